"""The pytrees a checkpoint holds, as Orbax writes and reads them: random keys as their data,
abstract trees (shapes, dtypes and shardings) to restore into, the first difference between a
saved tree and the one wanted, and a checksum per leaf (what :mod:`jaxfeed.train.checkpoint`
verifies on restore).

>>> _first_difference({"w": ((2,), "float32")}, {"w": ((3,), "float32")})
'w has shape (2,) in the checkpoint but (3,) here'
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _key_paths(tree: Any) -> list[str]:
    """Paths of the typed PRNG-key leaves of ``tree``."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array | jax.ShapeDtypeStruct) and jnp.issubdtype(
            leaf.dtype, jax.dtypes.prng_key
        ):
            out.append(jax.tree_util.keystr(path))
    return out


def _keys_to_data(tree: Any) -> Any:
    """Typed keys (``key<fry>``), which Orbax cannot store, as their uint32 key data."""

    def convert(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(leaf)
        if isinstance(leaf, jax.ShapeDtypeStruct) and jnp.issubdtype(
            leaf.dtype, jax.dtypes.prng_key
        ):
            data = jax.eval_shape(jax.random.key_data, leaf)
            return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=leaf.sharding)
        return leaf

    return jax.tree.map(convert, tree)


def _data_to_keys(tree: Any, like: Any) -> Any:
    """Wrap key data back into typed keys wherever ``like`` holds typed keys (arrays or
    ``ShapeDtypeStruct`` targets)."""

    def convert(data: Any, ref: Any) -> Any:
        if isinstance(ref, jax.Array | jax.ShapeDtypeStruct) and jnp.issubdtype(
            ref.dtype, jax.dtypes.prng_key
        ):
            impl = jax.random.key_impl(ref) if isinstance(ref, jax.Array) else ref.dtype._impl
            return jax.random.wrap_key_data(data, impl=impl)
        return data

    return jax.tree.map(convert, tree, like)


def _abstract(tree: Any) -> Any:
    """Shapes, dtypes and shardings of ``tree``'s arrays: where restored arrays go."""

    def spec(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, np.ndarray | np.generic):
            return jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)
        return x

    return jax.tree.map(spec, tree)


def abstract_like(tree: Any, shardings: Any) -> Any:
    """``tree``'s arrays as ``jax.ShapeDtypeStruct`` targets laid out by ``shardings`` (a tree of
    the same structure): :meth:`CheckpointManager.restore` reads each process's shards of them,
    whatever mesh, sharding or process count wrote the checkpoint.

    >>> import jax, jax.numpy as jnp
    >>> one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    >>> abstract_like({"w": jnp.zeros(2)}, {"w": one})["w"].shape
    (2,)
    """
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(tuple(x.shape), x.dtype, sharding=s), tree, shardings
    )


def _flat_shapes(tree: Any) -> dict[str, tuple]:
    return {
        jax.tree_util.keystr(p): (
            tuple(getattr(x, "shape", ())),
            str(getattr(x, "dtype", type(x).__name__)),
        )
        for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def _first_difference(saved: dict[str, tuple], wanted: dict[str, tuple]) -> str | None:
    for path in sorted(wanted):
        if path not in saved:
            return f"{path} is not in the checkpoint"
        if tuple(saved[path][0]) != tuple(wanted[path][0]):
            return f"{path} has shape {tuple(saved[path][0])} in the checkpoint but {tuple(wanted[path][0])} here"
    extra = sorted(set(saved) - set(wanted))
    if extra:
        return f"the checkpoint has {extra[0]}, which the model here does not"
    return None


def _host_bytes(x: Any) -> np.ndarray | None:
    """This process's full copy of ``x`` as bytes, or None when no process holds all of it."""
    if isinstance(x, jax.Array):
        if x.is_fully_addressable:
            host = np.asarray(x)
        elif x.is_fully_replicated:
            host = np.asarray(x.addressable_data(0))
        else:
            return None
    elif isinstance(x, np.ndarray | np.generic | int | float | bool):
        host = np.asarray(x)
    else:
        return None
    return np.ascontiguousarray(host).reshape(-1).view(np.uint8)


def checksums(tree: Any) -> dict[str, str | None]:
    """SHA-256 of every array leaf's bytes, by path (None for arrays split over processes).

    >>> import jax.numpy as jnp
    >>> checksums({"w": jnp.zeros(2)})["['w']"][:16]
    'af5570f5a1810b7a'
    """
    out: dict[str, str | None] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        data = _host_bytes(leaf)
        out[jax.tree_util.keystr(path)] = None if data is None else hashlib.sha256(data).hexdigest()
    return out
