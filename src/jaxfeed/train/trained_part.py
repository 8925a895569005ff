"""Checkpoints of the trained part of a model (issue 63): a Trainer that trains some parameters
over frozen pretrained weights (``trainable="lora"``, ``"head"``, a regular expression) saves
those parameters, the model's other variables (BatchNorm statistics, dropout keys) and the
optimizer state, never the frozen weights. Its ``meta`` records them as ``frozen``: how many,
their bytes, a fingerprint (SHA-256 of their paths, shapes, dtypes and 4096 evenly spaced values
of each) and the model's Hub source when it has one; a restore takes them from the model it is
given, and :func:`base_problem` refuses a model whose frozen weights are others.

>>> import numpy as np
>>> model = {"body": {"kernel": np.ones((2, 2), np.float32)}, "lora": np.zeros(2, np.float32)}
>>> record = frozen_record(model, {"['model']['lora']"})
>>> record["parameters"], record["bytes"]
(1, 16)
>>> base_problem({"frozen": record}, model, {"['model']['lora']"}) is None
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SAMPLES = 4096  # values of each frozen array in its fingerprint, evenly spaced


def saved_paths(meta: Mapping[str, Any]) -> set[str]:
    """The ``keystr`` paths of the arrays a step holds (``meta["shapes"]``)."""
    return set(meta.get("shapes") or {})


def _leaves(model: Mapping[str, Any], saved: set[str]) -> list[tuple[str, Any]]:
    """The model's arrays that ``saved`` does not hold (its frozen weights), by path."""
    flat = jax.tree_util.tree_flatten_with_path({"model": model})[0]
    return sorted(
        (jax.tree_util.keystr(p), x) for p, x in flat if jax.tree_util.keystr(p) not in saved
    )


def _sample(x: Any) -> bytes:
    """Evenly spaced values of ``x`` (none for an array split over processes)."""
    if isinstance(x, jax.Array) and not (x.is_fully_addressable or x.is_fully_replicated):
        return b""
    size = int(np.prod(np.shape(x)))
    stride = max(1, size // SAMPLES)
    return np.asarray(jnp.ravel(x)[::stride][:SAMPLES]).tobytes()


def frozen_record(model: Mapping[str, Any], saved: set[str], source: Any = None) -> dict[str, Any]:
    """What a step of the trained part records of the frozen weights (see the module's
    docstring): ``model`` is the model's pure state dict, ``saved`` the paths the step holds,
    ``source`` the model's ``hub_source`` (or None)."""
    digest, count, size = hashlib.sha256(), 0, 0
    for path, x in _leaves(model, saved):
        if not hasattr(x, "shape") or isinstance(x, jax.ShapeDtypeStruct):
            raise ValueError(
                f"{path} holds no values (an abstract model): its frozen weights are needed"
            )
        count += 1
        size += int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
        digest.update(f"{path} {tuple(x.shape)} {np.dtype(x.dtype).name}\n".encode())
        digest.update(_sample(x))
    base = None
    if source is not None:
        base = {k: str(getattr(source, k)) for k in ("repo_id", "commit", "folder")
                if getattr(source, k, None) is not None}  # fmt: skip
    return {"parameters": count, "bytes": size, "fingerprint": digest.hexdigest(), "base": base}


def base_problem(meta: Mapping[str, Any], model: Mapping[str, Any], saved: set[str]) -> str | None:
    """Why ``model`` (a pure state dict) is not the base a step of the trained part was trained
    from, or None when its frozen weights are the ones the step recorded."""
    recorded = meta.get("frozen") or {}
    base = recorded.get("base") or {}
    named = base.get("repo_id") or base.get("folder")
    where = (
        f" (its base: {named}{'@' + base['commit'] if base.get('commit') else ''})" if named else ""
    )
    try:
        mine = frozen_record(model, saved)
    except ValueError as err:
        return (
            f"the step holds only the trained part of its model{where}, and {err}: restore it "
            "into the model it was trained from"
        )
    if mine["fingerprint"] == recorded.get("fingerprint"):
        return None
    return (
        f"the step holds only the trained part of its model; the frozen weights it was trained "
        f"over ({recorded.get('parameters')} arrays, {recorded.get('bytes')} bytes{where}) differ "
        f"from this model's ({mine['parameters']} arrays, {mine['bytes']} bytes): restore it into "
        "the model it was trained from"
    )


def prune(tree: Mapping[str, Any], saved: set[str]) -> Any:
    """``tree`` (``{"model": ..., "optimizer": ...}`` pure dicts) with only the leaves whose
    paths ``saved`` holds, empty branches dropped."""

    def keep(node: Any, prefix: str) -> Any:
        if isinstance(node, Mapping):
            kept = {}
            for key, value in node.items():
                child = keep(value, f"{prefix}[{key!r}]")
                if child is not None:
                    kept[key] = child
            return kept or None
        return node if prefix in saved else None

    return keep(tree, "") or {}


def merged(tree: Any, part: Any) -> Any:
    """``tree`` with the leaves ``part`` (a pruned copy of its structure) holds replaced."""
    if not isinstance(tree, Mapping) or not isinstance(part, Mapping):
        return part
    return {k: merged(v, part[k]) if k in part else v for k, v in tree.items()}
