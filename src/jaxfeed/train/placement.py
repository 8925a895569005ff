"""Where the trainer's arrays live: batches on their devices, padded to one size; the model state
replicated over the batches' devices.

The loader already puts batches on devices (``jaxfeed.devices``); :class:`BatchPlacement` only

* re-wraps batches on meshes with Explicit axes onto the same devices with Auto axes (no copy),
  so XLA propagates shardings through models that reshape;
* pads a short last batch to the first batch's size by repeating rows (one compiled step), and
  reports the number of real rows so the step masks the rest;
* replicates the state and the metric accumulator over the devices of the first batch, so a step
  over batches sharded on a mesh runs data-parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxfeed.devices import Placement, replicated


class BatchPlacement:
    """Batches padded to one size per role, and the placement of everything else.

    >>> import jax.numpy as jnp
    >>> placement = BatchPlacement(["x"])
    >>> arrays, n = placement.batch({"x": jnp.arange(4)}, "train")
    >>> arrays, n = placement.batch({"x": jnp.arange(3)}, "train")
    >>> arrays["x"].tolist(), n
    ([0, 1, 2, 0], 3)
    """

    def __init__(self, required: Iterable[str], hints: dict[str, str] | None = None,
                 targets: str | None = None) -> None:  # fmt: skip
        self.required = list(dict.fromkeys(required))  # for every role
        self.targets = targets  # also required to train and evaluate
        self.hints = hints or {}
        self.placement: Placement | None = None  # of the state: set by the first batch
        self._sizes: dict[str, int] = {}
        self._shardings: dict[str, Any] = {}
        self._pad_fns: dict[tuple[int, int], Callable] = {}
        self._auto: dict[Any, Any] = {}

    def reset(self) -> None:
        """Place the state again on the next batch (after a restore)."""
        self.placement = None

    def arrays(self, batch: dict[str, Any], role: str = "predict") -> dict[str, jax.Array]:
        """The batch's array columns as ``jax.Array`` (numpy arrays a user built are moved to the
        default device; strings and other values are dropped), on meshes with Auto axes."""
        out = {}
        other = {}
        for key, value in batch.items():
            if isinstance(value, np.ndarray | np.generic) and value.dtype.kind in "biufc":
                value = jnp.asarray(value)
            if not isinstance(value, jax.Array):
                other[key] = type(value).__name__
                continue
            sharding = value.sharding
            if isinstance(sharding, jax.sharding.NamedSharding) and _explicit(sharding.mesh):
                value = jax.device_put(value, self._auto_sharding(sharding))
            out[key] = value
        required = list(self.required)
        if role != "predict" and self.targets is not None and self.targets not in required:
            required.append(self.targets)
        if any(c not in out for c in required):
            wanted = ", ".join(f"{c!r} ({self.hints.get(c, 'a column')})" for c in required)
            not_arrays = "".join(
                f"; {c!r} is a {other[c]}, not an array" for c in required if c in other
            )
            raise KeyError(
                f"the batch needs the columns {wanted}; it has the arrays {sorted(out)}{not_arrays}"
            )
        return out

    def _auto_sharding(self, sharding: jax.sharding.NamedSharding) -> Any:
        auto = self._auto.get(sharding)
        if auto is None:
            mesh = sharding.mesh
            auto_mesh = jax.sharding.Mesh(
                mesh.devices,
                mesh.axis_names,
                axis_types=(jax.sharding.AxisType.Auto,) * len(mesh.axis_names),
            )
            auto = self._auto[sharding] = jax.sharding.NamedSharding(auto_mesh, sharding.spec)
        return auto

    def state_placement(self, arrays: dict[str, jax.Array]) -> Placement:
        """Where the state goes: replicated over the devices of the first batch."""
        if self.placement is None:
            sharding = arrays[self.required[0]].sharding
            if sharding.num_devices > 1:
                self.placement = replicated(sharding)
            else:
                self.placement = next(iter(arrays[self.required[0]].devices()))
        return self.placement

    def batch(self, batch: dict[str, Any], role: str) -> tuple[dict[str, jax.Array], int]:
        """The batch padded to its role's batch size (repeating its rows), and its real row count.

        ``role`` ("train", "eval", "predict") keeps one batch size per use: the first batch's.
        """
        arrays = self.arrays(batch, role)
        for key, value in arrays.items():
            self._shardings.setdefault(key, value.sharding)
        n = int(arrays[self.required[0]].shape[0])
        size = self._sizes.setdefault(role, n)
        if n > size:
            raise ValueError(
                f"a {role} batch of {n} rows is larger than the first {role} batch ({size}); keep one batch size"
            )
        if n == size:
            return arrays, n
        if (size, n) not in self._pad_fns:
            shardings = {k: self._shardings.get(k) for k in arrays}
            self._pad_fns[size, n] = jax.jit(
                lambda b: {k: jnp.take(v, jnp.arange(size) % n, axis=0) for k, v in b.items()},
                out_shardings=shardings,
            )
        return self._pad_fns[size, n](arrays), n

    def replicate(self, tree: Any) -> Any:
        """``tree`` on the state's placement."""
        return replicate(tree, self.placement)


def replicate(tree: Any, placement: Any) -> Any:
    """Put every leaf on ``placement``; a sharding spanning other processes gets each process's
    own (identical) copy, so no array ever crosses hosts."""
    if isinstance(placement, jax.Device) or placement.is_fully_addressable:
        return jax.device_put(tree, placement)

    def put(x: Any) -> Any:
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = put(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, placement, lambda index: host[index])

    return jax.tree.map(put, tree)


def _explicit(mesh: Any) -> bool:
    types = getattr(mesh, "axis_types", ())
    return any(t == jax.sharding.AxisType.Explicit for t in types)
