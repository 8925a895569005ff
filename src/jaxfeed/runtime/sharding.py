"""How arrays are laid out over a device mesh: replicated, FSDP, logical-axis rules; the meshes.

A :class:`ShardingPlan` turns each array of a model's state (parameters, optimizer state, other
model variables) into a :class:`jax.sharding.NamedSharding` on a mesh; JAX's SPMD partitioner then
compiles the trainer's step for that layout (it gathers FSDP-sharded parameters for the forward and
backward passes and inserts every collective itself), and ``from_pretrained`` puts each weight
straight onto its shards. The plan is the one reading of the sharding grammar
(:mod:`jaxfeed.runtime.sharding_grammar`), given as ``Trainer(sharding=)``,
``from_pretrained(sharding=)`` or ``jaxfeed train --sharding``; three modes:

* ``"replicate"``: every array whole on every device (data parallelism);
* ``"fsdp"``: every array of at least :data:`FSDP_MIN_SIZE` elements is split over the mesh's
  data axis along its largest dimension that divides evenly; smaller ones stay replicated;
* a dict of logical axis rules, ``{"embed": None, "mlp": "model", ...}``: arrays whose variables
  carry partitioning annotations (``nnx.with_partitioning(init, ("embed", "mlp"))``) are split
  along the mesh axes their logical names map to (tensor parallelism). A name without a rule is
  used as a mesh axis when the mesh has one by that name, else that dimension stays whole. The
  key ``"fsdp": True`` in the dict adds FSDP over the data axis for the dimensions the rules
  leave whole. A layer stack's leading axis is named ``"layers"``: kept whole (the scanned step
  slices it), by FSDP too, unless a rule names it.

Everything is checked before compiling: a rule naming an axis the mesh lacks, a rule whose
logical name no parameter carries (a typo), or a dimension that does not divide by its mesh axes,
raises a :class:`ShardingError` naming the rule or the parameter.

>>> import jax
>>> mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
>>> plan = ShardingPlan.parse({"mlp": "model", "fsdp": True})
>>> plan.spec("layers.0.kernel", (1024, 4096), ("embed", "mlp"), mesh)
P('data', 'model')
>>> ShardingPlan.parse("fsdp").spec("bias", (64,), None, mesh)
P()
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed.runtime.distributed import data_mesh
from jaxfeed.runtime.sharding_grammar import Rules, ShardingError, parse_rules

FSDP_MIN_SIZE = 4096  # elements: arrays smaller than this stay replicated under FSDP
DATA_AXIS = "data"
LAYERS = "layers"  # a layer stack's leading axis: whole unless a rule names it (never FSDP's)


def data_axis(mesh: Mesh) -> str:
    """The mesh axis batches are split over: ``"data"`` when the mesh has one, else its first.

    >>> import jax
    >>> data_axis(jax.make_mesh((1, 1), ("model", "data")))
    'data'
    """
    names = tuple(mesh.axis_names)
    return DATA_AXIS if DATA_AXIS in names else str(names[0])


def auto_mesh(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis of type Auto (the SPMD partitioner propagates shardings)."""
    types = getattr(mesh, "axis_types", None)
    auto = jax.sharding.AxisType.Auto
    if types is not None and all(t == auto for t in types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(auto,) * len(mesh.axis_names))


def default_mesh() -> Mesh:
    """A 1-D mesh named ``"data"`` over every device of every process."""
    return auto_mesh(data_mesh())


def make_mesh(axes: Mapping[str, int], devices: Sequence[Any] | None = None) -> Mesh:
    """A mesh of the named axis sizes over ``devices`` (default: every device); a size of -1
    takes the devices the others leave.

    >>> make_mesh({"data": -1, "model": 2}).shape["model"]
    2
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = dict(axes)
    known = math.prod(v for v in sizes.values() if v != -1)
    for name, value in sizes.items():
        if value == -1:
            if len(devices) % known:
                raise ValueError(
                    f"the mesh {dict(axes)} cannot cover {len(devices)} devices: "
                    f"{len(devices)} is not a multiple of {known}"
                )
            sizes[name] = len(devices) // known
    if math.prod(sizes.values()) != len(devices):
        raise ValueError(
            f"the mesh {sizes} has {math.prod(sizes.values())} devices, but there are {len(devices)}; "
            "give axis sizes whose product is the device count (or -1 for one of them)"
        )
    mesh = jax.make_mesh(
        tuple(sizes.values()),
        tuple(sizes),
        devices=devices,
        axis_types=(jax.sharding.AxisType.Auto,) * len(sizes),
    )
    return mesh


@dataclass(frozen=True)
class ShardingPlan:
    """Which arrays of the state split over which mesh axes (see the module docstring).

    >>> ShardingPlan.parse("replicate").replicated
    True
    """

    fsdp: bool = False
    rules: Rules | None = None  # (logical name, mesh axes or None) pairs
    fsdp_min_size: int = FSDP_MIN_SIZE

    @classmethod
    def parse(cls, sharding: Any) -> ShardingPlan:
        """``"replicate"``, ``"fsdp"`` or a dict of logical axis rules (``"fsdp": True`` inside
        adds FSDP), read by :func:`~jaxfeed.runtime.sharding_grammar.parse_rules`; a plan is
        returned as it is.

        >>> ShardingPlan.parse({"mlp": ["model"], "fsdp": True}).describe()
        {'mlp': 'model', 'fsdp': True}
        """
        if isinstance(sharding, ShardingPlan):
            return sharding
        fsdp, rules = parse_rules(sharding)
        return cls(fsdp=fsdp, rules=rules)

    @property
    def replicated(self) -> bool:
        return not self.fsdp and self.rules is None

    def describe(self) -> str | dict[str, Any]:
        """The plan as the trainer's ``sharding=`` argument (JSON)."""
        if self.rules is None:
            return "fsdp" if self.fsdp else "replicate"
        out: dict[str, Any] = {
            k: None if v is None else (v[0] if len(v) == 1 else list(v)) for k, v in self.rules
        }
        if self.fsdp:
            out["fsdp"] = True
        return out

    def check(self, mesh: Mesh) -> None:
        """Refuse rules that name an axis ``mesh`` does not have."""
        for name, axes in self.rules or ():
            for axis in axes or ():
                if axis not in mesh.axis_names:
                    raise ShardingError(
                        f"sharding rule {name!r}: {axis!r} names a mesh axis the mesh does not have "
                        f"(its axes: {', '.join(map(repr, mesh.axis_names))})"
                    )

    def unused_axes(self, mesh: Mesh) -> list[str]:
        """The axes of ``mesh`` (of more than one device) that neither the batches (the data
        axis), FSDP nor a rule of the plan use: their devices hold copies.

        >>> mesh = make_mesh({"data": -1, "model": 2})
        >>> ShardingPlan.parse("fsdp").unused_axes(mesh)
        ['model']
        >>> ShardingPlan.parse({"mlp": "model"}).unused_axes(mesh)
        []
        """
        used = {data_axis(mesh)} | {a for _, axes in self.rules or () for a in axes or ()}
        return [str(a) for a in mesh.axis_names if a not in used and mesh.shape[a] > 1]

    def check_names(self, leaves: Sequence[Leaf]) -> None:
        """Rules whose logical axis name no variable of the model carries: one close to a name
        the model has is a typo, refused with that name (it would leave the axis whole without
        a word), and so are rules none of which the model has (nothing would be split); others
        (a rule set shared by several models) are ignored with a warning.

        >>> plan = ShardingPlan.parse({"head": "model"})
        >>> plan.check_names([Leaf("q.kernel", (8, 8), ("embed", "heads"))])
        Traceback (most recent call last):
        ...
        jaxfeed.runtime.sharding_grammar.ShardingError: sharding rule 'head': no parameter of the model has a logical axis of that name; did you mean 'heads'? (its axes: 'embed', 'heads')
        """
        known = sorted({n for leaf in leaves for n in leaf.logical or () if isinstance(n, str)})
        unknown = [name for name, _ in self.rules or () if name not in known]
        if not unknown:
            return
        axes = ", ".join(map(repr, known)) or "none"
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            if close:
                raise ShardingError(
                    f"sharding rule {name!r}: no parameter of the model has a logical axis of "
                    f"that name; did you mean {close[0]!r}? (its axes: {axes})"
                )
        if len(unknown) == len(self.rules or ()):
            raise ShardingError(
                f"sharding rules {', '.join(map(repr, unknown))}: no parameter of the model has "
                f"a logical axis of these names, so nothing would be split (its axes: {axes})"
            )
        warnings.warn(
            f"sharding rules {', '.join(map(repr, unknown))} name no logical axis of this model "
            f"(its axes: {axes}): they are ignored",
            stacklevel=5,
        )

    def spec(self, name: str, shape: Sequence[int], logical: Sequence[Any] | None,
             mesh: Mesh) -> PartitionSpec:  # fmt: skip
        """The partition spec of the array ``name`` of ``shape`` whose variable is annotated with
        the ``logical`` axis names (None: not annotated) on ``mesh``."""
        shape = tuple(int(d) for d in shape)
        entries: list[tuple[str, ...]] = [()] * len(shape)
        if self.rules is not None and logical is not None and len(logical) == len(shape):
            rules = dict(self.rules)
            for dim, logical_name in enumerate(logical):
                if logical_name is None:
                    continue
                if logical_name in rules:
                    entries[dim] = tuple(rules[logical_name] or ())
                elif logical_name in mesh.axis_names:
                    entries[dim] = (logical_name,)
                for axis in entries[dim]:
                    if axis not in mesh.axis_names:
                        raise ShardingError(  # without check(mesh): from_pretrained's placement
                            f"{name}: the rule for {logical_name!r} names mesh axis {axis!r}, which "
                            f"the mesh does not have (its axes: {', '.join(mesh.axis_names)})"
                        )
                ways = math.prod(mesh.shape[a] for a in entries[dim])
                if shape[dim] % ways:
                    rule = f"the rule for {logical_name!r}"
                    raise ShardingError(
                        f"{name}: dimension {dim} (size {shape[dim]}, logical axis {logical_name!r}) "
                        f"does not split over mesh axis {'x'.join(entries[dim])} of size {ways}; "
                        f"change {rule} (e.g. {logical_name!r}: None to keep it whole), use a mesh "
                        f"whose {'x'.join(entries[dim])} size divides {shape[dim]}, or make that "
                        "dimension a multiple of it"
                    )
        if self.fsdp:
            axis = data_axis(mesh)
            ways = mesh.shape[axis]
            used = {a for e in entries for a in e}
            if ways > 1 and axis not in used and math.prod(shape) >= self.fsdp_min_size:
                stack = {d for d, n in enumerate(logical or ()) if n == LAYERS}  # scanned over
                free = [d for d in range(len(shape))
                        if not entries[d] and shape[d] % ways == 0 and d not in stack]  # fmt: skip
                if free:
                    best = max(free, key=lambda d: (shape[d], -d))
                    entries[best] = (axis,)
        while entries and not entries[-1]:
            entries.pop()
        return PartitionSpec(*(None if not e else e[0] if len(e) == 1 else e for e in entries))


@dataclass(frozen=True)
class Leaf:
    """One array of the state as the plan sees it."""

    name: str  # "model.layers.0.kernel"
    shape: tuple[int, ...]
    logical: tuple[Any, ...] | None  # the variable's partitioning annotation


def state_shardings(leaves: Sequence[Leaf], plan: ShardingPlan, mesh: Mesh) -> list[NamedSharding]:
    """One sharding per leaf, checked (see :meth:`ShardingPlan.spec`).

    >>> import jax
    >>> mesh = jax.make_mesh((1,), ("data",))
    >>> state_shardings([Leaf("w", (8, 8), None)], ShardingPlan(), mesh)[0].spec
    P()
    """
    plan.check(mesh)
    if plan.rules is not None and not any(leaf.logical for leaf in leaves):
        raise ShardingError(
            "sharding rules were given, but no variable of the model carries partitioning "
            "annotations (nnx.with_partitioning(init, ('embed', 'mlp')) on its parameters): nothing "
            "would be split; annotate the model, or use sharding='fsdp'"
        )
    if plan.rules is not None:
        plan.check_names(leaves)
    return [
        NamedSharding(mesh, plan.spec(leaf.name, leaf.shape, leaf.logical, mesh)) for leaf in leaves
    ]


def bytes_per_device(tree: Any) -> int:
    """The most bytes any one device holds of ``tree``'s arrays (from their shardings: the
    shards this process can see).

    >>> import jax.numpy as jnp
    >>> bytes_per_device({"w": jnp.zeros((4, 4)), "b": jnp.zeros(4)})
    80
    """
    per: dict[Any, int] = {}
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
            for shard in leaf.addressable_shards:
                per[shard.device] = per.get(shard.device, 0) + shard.data.nbytes
        elif isinstance(leaf, np.ndarray | np.generic):
            per[None] = per.get(None, 0) + np.asarray(leaf).nbytes
    return max(per.values(), default=0)


__all__ = [
    "DATA_AXIS",
    "FSDP_MIN_SIZE",
    "Leaf",
    "ShardingError",
    "ShardingPlan",
    "auto_mesh",
    "bytes_per_device",
    "data_axis",
    "default_mesh",
    "make_mesh",
    "state_shardings",
]
