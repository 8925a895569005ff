"""What an export is called with, checked before its StableHLO function runs
(:meth:`jaxfeed.serve.export.ExportedModel.call`): every refusal names the input and what it
takes.

Each input must be numbers of its dtype's kind (token ids are never strings), of its shape; the
inputs share one batch size and one sequence length; no sequence is empty; none is longer than
the ``max_length`` the export declares (learned positions); and token ids lie inside the
model's vocabulary (``token_ids``). Exports written before inputs recorded their checks are
checked by the constructor arguments of jaxfeed's own transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def check_input(path: Path, name: Any, value: Any, want: dict[str, Any]) -> Any:
    """One input checked and cast to its dtype (see :meth:`ExportedModel.call`)."""
    where = f"input {name} of {path}"
    try:  # device arrays stay where they are: only token ids are read on the host
        value = value if isinstance(value, jax.Array) else np.asarray(value)
    except (ValueError, TypeError) as err:  # ragged lists
        raise ValueError(
            f"{where} is not one rectangular array of {want['dtype']} (rows of different "
            f"lengths? pad them to one length): {str(err).splitlines()[0][:60]}"
        ) from None
    dtype = jnp.dtype(want["dtype"])
    numeric = value.dtype == np.bool_ or (
        jnp.issubdtype(value.dtype, jnp.number)
        and not jnp.issubdtype(value.dtype, jnp.complexfloating)
    )
    if not numeric and value.dtype != dtype:
        what = {"U": "strings", "S": "bytes", "O": "Python objects", "c": "complex numbers",
                "M": "dates", "m": "time spans", "V": "raw bytes"}.get(
            value.dtype.kind, str(value.dtype))  # fmt: skip
        hint = (
            "token ids: tokenize the texts first"
            if want.get("token_ids") or name == "input_ids"
            else "numbers"
        )
        raise TypeError(
            f"{where} takes {want['dtype']} values ({hint}), got {what} ({value.dtype})"
        )
    if value.dtype != dtype:
        if jnp.issubdtype(value.dtype, jnp.floating) != jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(
                f"{where} is {want['dtype']}, got {value.dtype} (apply the preprocessing the "
                "model was trained with)"
            )
        value = value.astype(dtype)
    fixed = want["shape"][1:]
    if value.ndim != len(want["shape"]) or any(
        w is not None and w != d for d, w in zip(value.shape[1:], fixed, strict=True)
    ):
        names = ", ".join("length" if w is None else str(w) for w in fixed)
        raise ValueError(f"{where} must have shape (batch, {names}), got {tuple(value.shape)}")
    return value


def check_together(
    path: Path, config: dict[str, Any], checked: list[tuple[Any, Any, dict[str, Any]]]
) -> None:
    """One batch size and one sequence length across the inputs; lengths within the
    model's bound; token ids within its vocabulary."""
    if not checked:
        return
    first, rows = checked[0][0], checked[0][1].shape[0]
    lengths: dict[Any, int] = {}
    for name, value, want in checked:
        if value.shape[0] != rows:
            raise ValueError(
                f"the inputs of {path} must have one batch size: input {first} has "
                f"{rows} rows, input {name} {value.shape[0]}"
            )
        symbolic = [d for d, w in zip(value.shape[1:], want["shape"][1:], strict=True)
                    if w is None]  # fmt: skip
        if symbolic:
            lengths[name] = symbolic[0]
    if len(set(lengths.values())) > 1:
        (a, la), (b, lb) = list(lengths.items())[:2]
        raise ValueError(
            f"the inputs of {path} must have one sequence length: input {a} has {la}, "
            f"input {b} {lb}"
        )
    for name, length in lengths.items():
        limit = _limit(config, next(w for n, _, w in checked if n == name))
        if length == 0:
            raise ValueError(
                f"input {name} of {path} has sequences of length 0: give at least one token per row"
            )
        if limit is not None and length > limit:
            raise ValueError(
                f"input {name} of {path} has sequences of {length} tokens; the model "
                f"takes at most {limit} (its max_length, learned positions): truncate them"
            )
        break  # one length for all
    for name, value, want in checked:
        count = _token_ids(config, name, want)
        if count is None or value.size == 0:
            continue
        value = np.asarray(value)
        bad = (value < 0) | (value >= count)
        if bad.any():
            at = np.unravel_index(int(np.argmax(bad)), value.shape)
            if want.get("argument") == "positions":
                raise ValueError(
                    f"input {name} of {path}: position {value[at]} (row {at[0]}) is outside the "
                    f"model's {count} learned positions (0..{count - 1}, its max_length)"
                )
            raise ValueError(
                f"input {name} of {path}: token id {value[at]} (row {at[0]}"
                + (f", position {at[1]}" if len(at) > 1 else "")
                + f") is outside the model's vocabulary of {count} ids (0..{count - 1})"
            )


def _builtin(config: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments of an export of a built-in transformer (exports written
    before inputs recorded their checks are checked by them)."""
    model = config.get("model") or {}
    kwargs = model.get("kwargs")
    if model.get("class") in ("TransformerClassifier", "TransformerLM") and isinstance(
        kwargs, dict
    ):
        return kwargs
    return {}


def _token_ids(config: dict[str, Any], name: Any, want: dict[str, Any]) -> int | None:
    count = want.get("token_ids")
    if count is None and name in (0, "input_ids"):
        count = _builtin(config).get("vocab_size")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _limit(config: dict[str, Any], want: dict[str, Any]) -> int | None:
    limit = want.get("max_length")
    if limit is None:
        kwargs = _builtin(config)
        if kwargs.get("positions", "learned") == "learned":
            limit = kwargs.get("max_length")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
