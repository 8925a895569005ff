"""Where the trainer's arrays live: batches on their devices, padded to one size; the model state
replicated over the batches' devices, or laid out over the trainer's mesh.

The loader already puts batches on devices (``jaxfeed.runtime.devices``); :class:`BatchPlacement` only

* re-wraps batches on meshes with Explicit axes onto the same devices with Auto axes (no copy),
  so XLA propagates shardings through models that reshape;
* with a trainer ``mesh``, moves batches that arrive elsewhere onto it, split over its data axis
  (a batch that does not split evenly is refused before anything compiles);
* pads a short last batch to the first batch's size by repeating rows (one compiled step), and
  reports the number of real rows so the step masks the rest;
* replicates the state and the metric accumulator over the devices of the first batch (no mesh),
  so a step over batches sharded on a mesh runs data-parallel; or lays the state out on the mesh
  by a :class:`~jaxfeed.runtime.sharding.ShardingPlan` (FSDP, tensor parallelism).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed.runtime.devices import Placement, replicated
from jaxfeed.runtime.sharding import Leaf, ShardingPlan, data_axis, state_shardings


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
                 targets: str | None = None, *, mesh: Mesh | None = None,
                 plan: ShardingPlan | None = None) -> None:  # fmt: skip
        self.required = list(dict.fromkeys(required))  # for every role
        self.targets = targets  # also required to train and evaluate
        self.hints = hints or {}
        self.mesh = mesh  # Auto axes; None: the state follows the first batch's devices
        self.plan = plan or ShardingPlan()
        self.placement: Placement | None = None  # of the state: set by the first batch
        self.shardings: list[NamedSharding] | None = None  # of the state's leaves, when laid out
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
            if self.mesh is not None:
                value = self._on_mesh(key, value)
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

    def _on_mesh(self, key: str, value: jax.Array) -> jax.Array:
        """``value`` split over the mesh's data axis (scalars replicated)."""
        axis = data_axis(self.mesh)
        target = NamedSharding(self.mesh, PartitionSpec(axis) if value.ndim else PartitionSpec())
        if value.sharding.is_equivalent_to(target, value.ndim):
            return value
        ways = self.mesh.shape[axis]
        if value.ndim and value.shape[0] % ways:
            raise ValueError(
                f"a batch of {value.shape[0]} rows (column {key!r}) does not split over the {ways} "
                f"devices of the mesh's data axis {axis!r}: use a batch size that is a multiple of {ways}"
            )
        if not value.is_fully_addressable:
            raise ValueError(
                f"column {key!r} arrives split over other devices than the trainer's mesh; in a "
                f"multi-process run give the loader the mesh's sharding: "
                f"DataLoader(..., sharding=NamedSharding(mesh, PartitionSpec({axis!r})))"
            )
        return jax.device_put(value, target)

    def state_placement(self, arrays: dict[str, jax.Array]) -> Placement:
        """Where the state goes: replicated over the devices of the first batch, or the mesh."""
        if self.placement is None and self.mesh is not None:
            self.placement = NamedSharding(self.mesh, PartitionSpec())
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

    def layout(self, leaves: list[Leaf]) -> list[NamedSharding] | None:
        """The shardings of the state's leaves on the mesh by the plan (checked); None when the
        state is replicated."""
        if self.mesh is None or self.plan.replicated:
            return None
        return state_shardings(leaves, self.plan, self.mesh)

    def place_state(self, state: Any, leaves: list[Leaf]) -> tuple[Any, Any]:
        """``state`` on its devices: replicated, or laid out by the plan. Returns the placed
        state and the tree of its shardings when they are newly laid out (the step must be
        compiled for them), else None."""
        shardings = self.layout(leaves)
        if shardings is None:
            return replicate(state, self.placement), None
        tree = jax.tree.unflatten(jax.tree.structure(state), shardings)
        changed = shardings != self.shardings
        self.shardings = shardings
        return place(state, tree), tree if changed else None


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


def place(tree: Any, shardings: Any) -> Any:
    """Put each leaf of ``tree`` on its sharding in ``shardings`` (a tree of the same structure);
    a sharding spanning other processes takes this process's shards of its (identical) copy."""

    def put(x: Any, sharding: Any) -> Any:
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = put(jax.random.key_data(x), sharding)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        if sharding.is_fully_addressable:
            return jax.device_put(x, sharding)
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return jax.jit(_same, out_shardings=sharding)(x)  # XLA moves the shards
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree, shardings)


def _same(x: Any) -> Any:
    return x


def gather(tree: Any) -> Any:
    """Every array of ``tree`` whole on this process's first device (arrays split over
    processes are gathered: a collective, every process calls it)."""
    device = jax.local_devices()[0]

    def one(x: Any) -> Any:
        if not isinstance(x, jax.Array):
            return x
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(
                one(jax.random.key_data(x)), impl=jax.random.key_impl(x)
            )
        if x.is_fully_addressable:
            return jax.device_put(x, device)
        host = multihost_utils.process_allgather(x, tiled=True)
        return jax.device_put(np.asarray(host), device)

    return jax.tree.map(one, tree)


def _explicit(mesh: Any) -> bool:
    types = getattr(mesh, "axis_types", ())
    return any(t == jax.sharding.AxisType.Explicit for t in types)
