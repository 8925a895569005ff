"""``config.json`` checked at load, the same way for every family: the fields a family reads
(its record's ``config_fields``: each a kind below, required or not, or the activation names it
computes) and its ``divides`` pair; each error names the file, the field, the value and what is
expected.

>>> from jaxfeed.models.hub.bert import FAMILY as BERT
>>> check_config({"model_type": "bert", "vocab_size": 50, "hidden_size": 8,
...               "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16}, BERT)
>>> check_config({"model_type": "bert", "hidden_size": 8}, BERT, "ckpt/config.json")
Traceback (most recent call last):
...
jaxfeed.models.hub.files.CheckpointError: ckpt/config.json: vocab_size is missing; a bert \
config.json must give vocab_size, hidden_size, num_hidden_layers, num_attention_heads, \
intermediate_size
"""

from __future__ import annotations

import math
from typing import Any

from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.files import CheckpointError

# kind -> (test, what is expected): the checks a family's config_fields name
KINDS = {
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


TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def check_config(config: dict, family: Family, where: object = "config.json") -> None:
    """Refuse a ``config.json`` whose ``family``'s fields are missing, of the wrong type or out of
    range, name an unknown activation, or give a token id outside the vocabulary; a
    :class:`CheckpointError` naming ``where``, the field and the value."""
    model_type = config.get("model_type")
    fields = family.config_fields
    required = [k for k, check in fields.items() if isinstance(check, str) and check.endswith("!")]
    for key, check in fields.items():
        if key not in config:
            if key in required:
                raise CheckpointError(
                    f"{where}: {key} is missing; a {model_type} config.json must give "
                    f"{', '.join(required)}"
                )
            continue
        value = config[key]
        if isinstance(check, tuple):
            if value not in check:
                raise CheckpointError(
                    f"{where}: {key}={value!r} is not an activation jaxfeed computes; expected "
                    f"one of {', '.join(sorted(check))}"
                )
            continue
        if value is None and check.endswith("?"):
            continue
        test, expected = KINDS[check.rstrip("!?")]
        if not test(value):
            raise CheckpointError(f"{where}: {key} must be {expected}, got {value!r}")
    pair = family.divides
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


__all__ = ["KINDS", "check_config"]
