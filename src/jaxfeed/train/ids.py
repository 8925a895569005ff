"""Token ids checked against the model that embeds them, in training, evaluation and prediction.

An id outside ``0..vocab - 1`` is never a valid input: one past the table reads NaN (JAX fills
an out-of-range gather), and a negative one silently reads another row. A model says which of
its arguments are ids, and how many there are, with ``token_id_ranges() -> {argument: count}``;
without it, a model whose ``__call__`` takes ``input_ids`` and that has an int ``vocab_size``
(or a Hub ``hub_config`` with ``vocab_size``, and ``type_vocab_size`` for ``token_type_ids``)
embeds ``input_ids``, and one with a ``max_input_length`` (learned positions) embeds its
``positions`` argument. The compiled steps record the first bad id of an epoch on the device
(:func:`record`), and the host names it, with its column, row and position (:func:`message`).

>>> import jax.numpy as jnp
>>> found = first_bad({"input_ids": jnp.array([[1, 2], [3, 9]])}, (("input_ids", 5),), 2)
>>> {k: int(v) for k, v in found.items()}
{'found': 1, 'column': 0, 'id': 9, 'row': 1, 'position': 1, 'padding': 0}
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

MASK = "attention_mask"
KEYS = ("found", "column", "id", "row", "position", "padding")
Columns = tuple[tuple[str, int], ...]  # (batch column, number of ids) pairs


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def call_parameters(model: Any) -> list[str]:
    """The names of ``model.__call__``'s parameters, ``self`` left out."""
    try:
        params = inspect.signature(type(model).__call__).parameters
    except (TypeError, ValueError):
        return []
    return [p for p in params if p != "self"]


def token_id_ranges(model: Any) -> dict[str, int]:
    """``{argument: number of ids}`` of the arguments of ``model`` that it embeds (see the
    module docstring).

    >>> from flax import nnx
    >>> from jaxfeed.models import TransformerClassifier
    >>> token_id_ranges(TransformerClassifier(30, 2, dim=8, depth=1, num_heads=2, rngs=nnx.Rngs(0)))
    {'input_ids': 30}
    """
    declared = getattr(model, "token_id_ranges", None)
    if callable(declared):
        return {str(k): int(v) for k, v in dict(declared()).items()}
    params = call_parameters(model)
    hub = getattr(model, "hub_config", None)
    hub = hub if isinstance(hub, Mapping) else {}
    out: dict[str, int] = {}
    vocab = _count(getattr(model, "vocab_size", None)) or _count(hub.get("vocab_size"))
    if "input_ids" in params and vocab:
        out["input_ids"] = vocab
    types = _count(hub.get("type_vocab_size"))
    if "token_type_ids" in params and types:
        out["token_type_ids"] = types
    table = _count(getattr(model, "max_input_length", None))  # learned positions: a table too
    if "positions" in params and table:
        out["positions"] = table
    return out


def id_columns(model: Any, positional: Sequence[str], keywords: Mapping[str, str]) -> Columns:
    """The batch columns that feed ``model``'s embedded ids (``inputs=``: positional columns
    and ``{argument: column}``), with their number of ids."""
    ranges = token_id_ranges(model)
    if not ranges:
        return ()
    params = call_parameters(model)
    out = [
        (column, ranges[params[i]])
        for i, column in enumerate(positional)
        if i < len(params) and params[i] in ranges
    ]
    out += [(column, ranges[arg]) for arg, column in keywords.items() if arg in ranges]
    return tuple(out)


def first_bad(batch: Mapping[str, Any], columns: Columns, n: Any) -> dict[str, jax.Array]:
    """The first id outside its range among the first ``n`` rows (traceable): ``found`` (0/1),
    the ``column`` (its index in ``columns``), the ``id``, its ``row`` and ``position``, and
    whether the batch's ``attention_mask`` marks that position as ``padding``."""
    out = {k: jnp.zeros((), jnp.int32) for k in KEYS}
    for index in reversed(range(len(columns))):  # the first column with a bad id wins
        name, count = columns[index]
        if name not in batch:
            continue
        ids = jnp.asarray(batch[name])
        if ids.ndim == 0 or ids.shape[0] == 0 or ids.size == 0:
            continue
        ids = ids.reshape(ids.shape[0], -1)
        if not jnp.issubdtype(ids.dtype, jnp.integer):
            ids = ids.astype(jnp.int32)  # what the model does with them
        real = (jnp.arange(ids.shape[0]) < n)[:, None]
        bad = ((ids < 0) | (ids >= count)) & real
        at = jnp.argmax(bad.reshape(-1))
        row, position = at // ids.shape[1], at % ids.shape[1]
        padding = jnp.zeros((), jnp.int32)
        mask = batch.get(MASK)
        if mask is not None and tuple(mask.shape) == tuple(batch[name].shape):
            padding = (jnp.asarray(mask).reshape(ids.shape)[row, position] == 0).astype(jnp.int32)
        hit = jnp.any(bad)
        values = {"found": jnp.ones((), jnp.int32), "column": jnp.int32(index),
                  "id": ids[row, position].astype(jnp.int32), "row": row.astype(jnp.int32),
                  "position": position.astype(jnp.int32), "padding": padding}  # fmt: skip
        out = {k: jnp.where(hit, values[k], out[k]) for k in KEYS}
    return out


def empty() -> dict[str, np.ndarray]:
    """The accumulator's entries: the step of the first bad id (-1: none) and what it was (on
    the host: the accumulator goes to the device in one transfer)."""
    sums = {f"bad_id_{k}": np.zeros((), np.int32) for k in KEYS if k != "found"}
    sums["bad_id_step"] = np.full((), -1, np.int32)
    return sums


def record(sums: dict[str, Any], columns: Columns, batch: Mapping[str, Any], n: Any,
           step: Any) -> dict[str, Any]:  # fmt: skip
    """``sums`` with the batch's first bad id, unless an earlier step already recorded one."""
    if not columns:
        return sums
    found = first_bad(batch, columns, n)
    first = (sums["bad_id_step"] < 0) & (found["found"] > 0)
    new = dict(sums)
    new["bad_id_step"] = jnp.where(first, jnp.maximum(step, 0), sums["bad_id_step"])
    for k in KEYS[1:]:
        new[f"bad_id_{k}"] = jnp.where(first, found[k], sums[f"bad_id_{k}"])
    return new


def message(found: Mapping[str, Any], columns: Columns, where: str) -> str:
    """The error for a bad id (host values of :func:`first_bad`, or the ``bad_id_`` sums).

    >>> message({"column": 0, "id": 9, "row": 1, "position": 1, "padding": 0},
    ...         (("input_ids", 5),), "in the predict batch")  # doctest: +NORMALIZE_WHITESPACE
    "token id 9 in column 'input_ids' (row 1 of the batch, position 1) in the predict batch is outside the
    model's vocabulary of 5 ids (0..4): tokenize with the tokenizer the model was built for, or
    build it with a larger vocabulary"
    """
    get = {k: int(found.get(k, found.get(f"bad_id_{k}", 0))) for k in KEYS[1:]}
    name, count = columns[get["column"]]
    if "position" in name:  # the learned position table, not the vocabulary
        return (
            f"position {get['id']} in column {name!r} (row {get['row']} of the batch, position "
            f"{get['position']}) {where} is outside the model's {count} learned positions "
            f"(0..{count - 1}, its max_length)"
        )
    what = "the pad id" if get["padding"] else "token id"
    head = (
        f"{what} {get['id']} in column {name!r} (row {get['row']} of the batch, position "
        f"{get['position']}"
        f"{', a padding position' if get['padding'] else ''}) {where} is outside the model's "
        f"vocabulary of {count} ids (0..{count - 1})"
    )
    if get["padding"]:
        return head + ": pad with an id of the vocabulary (the tokenizer's pad token)"
    if get["id"] < 0:
        return head + ": a negative id would read another token's embedding"
    return (
        head + ": tokenize with the tokenizer the model was built for, or build it with a larger "
        "vocabulary"
    )
