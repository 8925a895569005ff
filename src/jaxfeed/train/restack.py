"""Checkpoints written before layer stacks were stored stacked restore converted.

Until then a Hub model held each layer's weights apart (``['encoder']['layers'][3]['attention']
…``, and the optimizer state likewise); a model now holds them stacked
(``['encoder']['layers']['layer']['attention']…``, ``[layers, ...]``: see
:mod:`jaxfeed.models.stacked`). :func:`plan` matches each stacked variable the checkpoint lacks
with the per-layer arrays it holds; :func:`restore` reads those (Orbax, into the same target
layout with the leading axis dropped) and stacks them, so a run folder of an older jaxfeed
resumes, evaluates and exports. Any other difference is left to the caller's refusal.

>>> plan({"['w'][0]": ((2,), "f32"), "['w'][1]": ((2,), "f32")}, {"['w']['layer']": ((2, 2), "f32")})
{"['w']['layer']": ["['w'][0]", "['w'][1]"]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

LAYER = "['layer']"  # the key of a layer stack's stacked module (jaxfeed.models.stacked.Stack)


def plan(saved: Mapping[str, tuple], wanted: Mapping[str, tuple]) -> dict[str, list[str]] | None:
    """``{wanted key: [saved key of layer 0, 1, ...]}`` for the wanted arrays the checkpoint
    lacks that are a layer stack's, held one per layer in it (``[i]`` or ``['i']`` where the
    stack's ``['layer']`` is, each of the stacked shape without its leading axis); None when the
    difference is anything else (a key missing or extra, a shape that disagrees)."""
    out: dict[str, list[str]] = {}
    for key, (shape, _) in wanted.items():
        if key in saved:
            continue
        if LAYER not in key or not shape:
            return None
        head, _, tail = key.partition(LAYER)
        layers = []
        for i in range(shape[0]):
            found = next((k for k in (f"{head}[{i}]{tail}", f"{head}['{i}']{tail}") if k in saved),
                         None)  # fmt: skip
            if found is None or tuple(saved[found][0]) != tuple(shape[1:]):
                return None
            layers.append(found)
        out[key] = layers
    used = {k for v in out.values() for k in v} | (set(wanted) & set(saved))
    if not out or set(saved) - used:
        return None
    return out


def _keys(path: tuple) -> list[Any]:
    return [getattr(p, "key", getattr(p, "idx", getattr(p, "name", p))) for p in path]


def _set(tree: dict, keys: list[Any], value: Any) -> None:
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def _one_layer(leaf: Any) -> Any:
    """An abstract leaf of a stack, for one layer (its sharding without the leading axis)."""
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec)[1:]
        sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec))
    return jax.ShapeDtypeStruct(tuple(leaf.shape[1:]), leaf.dtype, sharding=sharding)


def restore(manager: Any, step: int, wanted: Any, layers: dict[str, list[str]]) -> dict[str, Any]:
    """``manager.restore`` of ``step`` into the abstract tree ``wanted`` (nested dicts, as
    :func:`plan`'s ``wanted`` keys name its leaves), the stacked leaves read one layer at a time
    from the keys ``layers`` gives and stacked."""
    old: dict = {}
    stacked: dict[str, tuple[list[Any], list[list[Any]], Any]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(wanted)[0]:
        key, keys = jax.tree_util.keystr(path), _keys(path)
        if key not in layers:
            _set(old, keys, leaf)
            continue
        head, _, tail = key.partition(LAYER)
        at = head.count("[")  # the stack's "layer" entry among the path's keys
        per = []
        for i, name in enumerate(layers[key]):
            index: int | str = i if name == f"{head}[{i}]{tail}" else str(i)
            one = [*keys[:at], index, *keys[at + 1 :]]
            _set(old, one, _one_layer(leaf))
            per.append(one)
        stacked[key] = (keys, per, leaf)
    restored = manager.restore(step, state=old)
    arrays = restored["state"]

    def get(keys: list[Any]) -> Any:
        node = arrays
        for k in keys:
            node = node[k]
        return node

    out: dict = {}
    for path, _ in jax.tree_util.tree_flatten_with_path(wanted)[0]:
        key, keys = jax.tree_util.keystr(path), _keys(path)
        if key not in stacked:
            _set(out, keys, get(keys))
            continue
        _, per, leaf = stacked[key]
        value = jnp.stack([get(one) for one in per])
        sharding = getattr(leaf, "sharding", None)
        _set(out, keys, value if sharding is None else jax.device_put(value, sharding))
    return {"state": out, "meta": restored["meta"]}


__all__ = ["plan", "restore"]
