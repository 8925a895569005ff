"""``config.json`` checked at load, the same way for every family: the fields a family reads,
whether each is required, its type and range, and the activation names it computes; each error
names the file, the field, the value and what is expected.

>>> check_config({"model_type": "bert", "vocab_size": 50, "hidden_size": 8,
...               "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16})
>>> check_config({"model_type": "bert", "hidden_size": 8}, "ckpt/config.json")
Traceback (most recent call last):
...
jaxfeed.models.hub.files.CheckpointError: ckpt/config.json: vocab_size is missing; a bert \
config.json must give vocab_size, hidden_size, num_hidden_layers, num_attention_heads, \
intermediate_size
"""

from __future__ import annotations

import math
from typing import Any

from jaxfeed.models.hub.bert import ACTIVATIONS as ENCODER_ACTIVATIONS
from jaxfeed.models.hub.decoder import ACTIVATIONS as DECODER_ACTIVATIONS
from jaxfeed.models.hub.files import CheckpointError
from jaxfeed.models.hub.vit import ACTIVATIONS as VIT_ACTIVATIONS

# kind -> (test, what is expected)
_KINDS = {
    "count": (lambda v: _int(v) and v >= 1, "an integer >= 1"),
    "size": (lambda v: _int(v) and v >= 0, "an integer >= 0"),
    "positive": (lambda v: _num(v) and v > 0, "a finite number > 0"),
    "rate": (lambda v: _num(v) and 0 <= v < 1, "a number in [0, 1)"),
    "std": (lambda v: _num(v) and v >= 0, "a finite number >= 0"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# field -> kind (a kind, or a tuple of activation names); required fields come first, then
# optional ones ("?" suffix: null allowed)
_ENCODER = {
    "vocab_size": "count!", "hidden_size": "count!", "num_hidden_layers": "count!",
    "num_attention_heads": "count!", "intermediate_size": "count!",
    "max_position_embeddings": "count", "type_vocab_size": "count",
    "hidden_act": tuple(ENCODER_ACTIVATIONS), "layer_norm_eps": "positive",
    "hidden_dropout_prob": "rate", "attention_probs_dropout_prob": "rate",
    "classifier_dropout": "rate?", "initializer_range": "std", "tie_word_embeddings": "bool",
}  # fmt: skip
_VIT = {
    "hidden_size": "count", "num_hidden_layers": "count", "num_attention_heads": "count",
    "intermediate_size": "count", "hidden_act": tuple(VIT_ACTIVATIONS),
    "layer_norm_eps": "positive", "hidden_dropout_prob": "rate",
    "attention_probs_dropout_prob": "rate", "initializer_range": "std", "qkv_bias": "bool",
    "num_channels": "count",
}  # fmt: skip
_DECODER = {
    "vocab_size": "count!", "hidden_size": "count!", "num_hidden_layers": "count!",
    "num_attention_heads": "count!", "intermediate_size": "count!",
    "max_position_embeddings": "count!", "num_key_value_heads": "count?", "head_dim": "count?",
    "hidden_act": DECODER_ACTIVATIONS, "rms_norm_eps": "positive", "rope_theta": "positive",
    "tie_word_embeddings": "bool", "attention_bias": "bool", "mlp_bias": "bool",
    "initializer_range": "std", "sliding_window": "count?",
}  # fmt: skip
FIELDS: dict[str, dict[str, Any]] = {
    "bert": _ENCODER,
    "roberta": _ENCODER,
    "distilbert": {
        "vocab_size": "count!", "dim": "count", "n_layers": "count", "n_heads": "count",
        "hidden_dim": "count", "max_position_embeddings": "count",
        "activation": tuple(ENCODER_ACTIVATIONS), "dropout": "rate",
        "attention_dropout": "rate", "seq_classif_dropout": "rate", "qa_dropout": "rate",
        "initializer_range": "std", "tie_word_embeddings": "bool",
    },
    "vit": _VIT,
    "audio-spectrogram-transformer": {
        **_VIT, "patch_size": "count", "frequency_stride": "count", "time_stride": "count",
        "max_length": "count", "num_mel_bins": "count",
    },
    "gpt2": {
        "vocab_size": "count!", "n_embd": "count!", "n_layer": "count!", "n_head": "count!",
        "n_positions": "count!", "n_inner": "count?", "activation_function": DECODER_ACTIVATIONS,
        "layer_norm_epsilon": "positive", "resid_pdrop": "rate", "embd_pdrop": "rate",
        "attn_pdrop": "rate", "initializer_range": "std", "tie_word_embeddings": "bool",
    },
    "llama": _DECODER,
    "mistral": _DECODER,
    "qwen2": _DECODER,
    "qwen3": _DECODER,
}  # fmt: skip
# (hidden size, heads): the first a multiple of the second, when no head_dim is given
DIVIDES = {"bert": ("hidden_size", "num_attention_heads"), "roberta": ("hidden_size",
           "num_attention_heads"), "distilbert": ("dim", "n_heads"),
           "gpt2": ("n_embd", "n_head")}  # fmt: skip
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def check_config(config: dict, where: object = "config.json") -> None:
    """Refuse a ``config.json`` whose family's fields are missing, of the wrong type or out of
    range, name an unknown activation, or give a token id outside the vocabulary; a
    :class:`CheckpointError` naming ``where``, the field and the value."""
    model_type = config.get("model_type")
    fields = FIELDS.get(model_type, {}) if isinstance(model_type, str) else {}
    required = [k for k, kind in fields.items() if isinstance(kind, str) and kind.endswith("!")]
    for key, kind in fields.items():
        if key not in config:
            if key in required:
                raise CheckpointError(
                    f"{where}: {key} is missing; a {model_type} config.json must give "
                    f"{', '.join(required)}"
                )
            continue
        value = config[key]
        if isinstance(kind, tuple):
            if value not in kind:
                raise CheckpointError(
                    f"{where}: {key}={value!r} is not an activation jaxfeed computes; expected "
                    f"one of {', '.join(sorted(kind))}"
                )
            continue
        if value is None and kind.endswith("?"):
            continue
        test, expected = _KINDS[kind.rstrip("!?")]
        if not test(value):
            raise CheckpointError(f"{where}: {key} must be {expected}, got {value!r}")
    pair = DIVIDES.get(model_type)
    if pair and all(_int(config.get(k)) for k in pair) and config[pair[0]] % config[pair[1]]:
        raise CheckpointError(
            f"{where}: {pair[0]} {config[pair[0]]} must be a multiple of {pair[1]} "
            f"{config[pair[1]]}"
        )
    _check_token_ids(config, where)


def _check_token_ids(config: dict, where: object) -> None:
    """``pad_token_id``, ``bos_token_id`` and ``eos_token_id`` (an id or a list): ids inside
    ``vocab_size``, or null."""
    vocab = config.get("vocab_size")
    for key in TOKEN_IDS:
        value = config.get(key)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item is None:
                continue
            if not _int(item) or item < 0 or (_int(vocab) and item >= vocab):
                raise CheckpointError(
                    f"{where}: {key} {value!r} is not a token id of the vocabulary (0 to "
                    f"vocab_size - 1 = {vocab - 1 if _int(vocab) else '?'}); set it to the id "
                    "of the tokenizer's token, or null"
                )


__all__ = ["FIELDS", "check_config"]
