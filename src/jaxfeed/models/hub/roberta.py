"""RoBERTa (and XLM-RoBERTa) in Flax NNX: BERT's encoder with positions counted from the pad
token over non-pad tokens, and RoBERTa's heads (a dense + tanh classification head on ``<s>``,
an LM head with a fixed GELU), numerically equal to ``transformers``' PyTorch model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flax import nnx

from jaxfeed.models.hub.bert import (
    ENCODER_DIVIDES,
    ENCODER_FIELDS,
    QUERY_VALUE,
    TASKS,
    EncoderModel,
    _classifier_dropout,
    bert_settings,
    encoder_rules,
    linear_rules,
    norm_rules,
)
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.weights import TRANSPOSE, Rule


def settings(config: dict):
    s = bert_settings({**config, "pad_token_id": config.get("pad_token_id", 1)})
    return replace(s, roberta_positions=True, type_vocab_size=int(config.get("type_vocab_size", 1)))


def build(config: dict, *, task: str, num_labels: int | None, dtype: Any, param_dtype: Any,
          rngs: nnx.Rngs) -> EncoderModel:  # fmt: skip
    """RoBERTa with the ``task``'s head, from a ``config.json`` dict."""
    return EncoderModel(settings(config), task=task, num_labels=num_labels, head="roberta",
                        classifier_dropout=_classifier_dropout(config), dtype=dtype,
                        param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list[Rule]:
    """RoBERTa's checkpoint tensors (``transformers``' names) to the model's parameters."""
    s = settings(config)
    out = encoder_rules(s, "roberta")
    if task == "sequence-classification":
        out += linear_rules("classifier.dense", "pooler")
        out += linear_rules("classifier.out_proj", "classifier")
    elif task == "token-classification":
        out += linear_rules("classifier", "classifier")
    elif task == "masked-lm":
        out += linear_rules("lm_head.dense", "transform")
        out += norm_rules("lm_head.layer_norm", "transform_norm")
        out.append(Rule("lm_head.bias", "decoder_bias"))
        if not s.tied:
            out.append(Rule("lm_head.decoder.weight", "decoder.kernel", TRANSPOSE))
    return out


def _architectures(prefix: str) -> dict[str, str]:
    return {
        "sequence-classification": f"{prefix}ForSequenceClassification",
        "token-classification": f"{prefix}ForTokenClassification",
        "masked-lm": f"{prefix}ForMaskedLM",
        "feature-extraction": f"{prefix}Model",
    }


ARCHITECTURES = _architectures("Roberta")
FAMILY = Family(
    model_types=("roberta",),
    tasks=TASKS,
    default_task="feature-extraction",
    build=build,
    rules=rules,
    architecture=ARCHITECTURES.__getitem__,
    prefix="roberta",
    tasks_by_architecture=tuple((v, k) for k, v in ARCHITECTURES.items()),
    lora_targets=QUERY_VALUE,
    module_renames=(),
    config_fields=ENCODER_FIELDS,
    divides=ENCODER_DIVIDES,
)
