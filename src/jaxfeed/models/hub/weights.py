"""Checkpoint tensors to NNX parameters and back, one tensor at a time.

A family maps each checkpoint tensor to a parameter of its NNX model with a :class:`Rule`
(``hf`` name, dotted ``path`` in the model, and a :class:`Transform` between the two layouts:
``TRANSPOSE`` for torch ``Linear`` weights, ``CONV2D`` for convolutions). :func:`load_weights`
fills a model, usually an abstract one (``nnx.eval_shape``) whose arrays do not exist yet: each
tensor goes from the safetensors memory map straight to its device sharding (every device reads
only its slice), cast to the parameter's dtype; parameters the checkpoint lacks are initialised
as ``transformers`` does (normal weights, zero biases, unit scales) and reported.
:func:`export_weights` is the inverse, for ``save_pretrained``.

>>> import tempfile, numpy as np
>>> from pathlib import Path
>>> from flax import nnx
>>> from jaxfeed.models.hub.files import Weights, write_safetensors
>>> folder = Path(tempfile.mkdtemp())
>>> write_safetensors(folder / "model.safetensors",
...                   {"fc.weight": np.ones((3, 2), np.float32), "fc.bias": np.zeros(3, np.float32)})
>>> model = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
>>> report = load_weights(model, Weights(folder),
...                       [Rule("fc.weight", "kernel", TRANSPOSE), Rule("fc.bias", "bias")])
>>> model.kernel[...].shape, report.newly_initialised
((2, 3), [])
>>> sorted(export_weights(model, [Rule("fc.weight", "kernel", TRANSPOSE)]))
['fc.weight']
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed.models.hub.files import CheckpointError, Weights
from jaxfeed.models.stacked import locate
from jaxfeed.runtime.sharding import ShardingPlan, default_mesh


# ---------------------------------------------------------------------------------- transforms
@dataclass(frozen=True)
class Transform:
    """A pair of numpy functions between a checkpoint tensor and the parameter: ``to_jax``
    (checkpoint layout -> parameter layout) and ``to_hf`` (its inverse). Both should return views
    (transposes, reshapes) so no copy is made before the tensor is placed."""

    to_jax: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]
    name: str = "transform"


IDENTITY = Transform(lambda x: x, lambda x: x, "identity")
TRANSPOSE = Transform(lambda x: x.T, lambda x: x.T, "transpose")  # torch Linear [out, in]
CONV2D = Transform(  # torch Conv2d OIHW <-> flax Conv HWIO
    lambda x: x.transpose(2, 3, 1, 0), lambda x: x.transpose(3, 2, 0, 1), "conv2d"
)
CONV1D = Transform(  # torch Conv1d OIW <-> flax Conv WIO
    lambda x: x.transpose(2, 1, 0), lambda x: x.transpose(2, 1, 0), "conv1d"
)


def reshape(
    jax_shape: Sequence[int], hf_shape: Sequence[int], *, transpose: bool = False
) -> Transform:
    """A reshape between the two layouts (after transposing a torch ``Linear`` weight when
    ``transpose``): e.g. ``[heads * head_dim, dim]`` <-> ``[dim, heads, head_dim]``.

    >>> t = reshape((4, 2, 3), (6, 4), transpose=True)
    >>> t.to_jax(np.zeros((6, 4))).shape, t.to_hf(np.zeros((4, 2, 3))).shape
    ((4, 2, 3), (6, 4))
    """
    jax_shape, hf_shape = tuple(jax_shape), tuple(hf_shape)
    if transpose:
        flat = hf_shape[::-1]
        return Transform(lambda x: x.T.reshape(jax_shape),
                         lambda x: x.reshape(flat).T, "reshape+transpose")  # fmt: skip
    return Transform(lambda x: x.reshape(jax_shape), lambda x: x.reshape(hf_shape), "reshape")


@dataclass(frozen=True)
class Rule:
    """Checkpoint tensor ``hf`` is the model's variable at the dotted ``path`` (list indices as
    numbers: ``"encoder.layers.3.attention.query.kernel"``), through ``transform``."""

    hf: str
    path: str
    transform: Transform = IDENTITY


@dataclass
class LoadReport:
    """What a load did: checkpoint tensors the rules ask for but the checkpoint lacks
    (``missing``), checkpoint tensors no rule reads (``unexpected``), and the checkpoint names (or
    model paths, for variables no rule covers) of the variables given fresh values
    (``newly_initialised``, which includes the missing ones and mismatched heads)."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    newly_initialised: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------- variables
def variables(model: Any) -> dict[str, nnx.Variable]:
    """The model's variables by dotted path (list indices as numbers).

    >>> sorted(variables(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
    ['bias', 'kernel']
    """
    out = {}
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Variable):
            out[".".join(str(p) for p in path)] = node
    return out


def logical_axes(var: nnx.Variable) -> tuple[Any, ...] | None:
    """The logical axis names a variable is annotated with (``out_sharding``), or None."""
    names = var.get_metadata().get("out_sharding")
    return tuple(names) if names else None


def _shape_dtype(var: nnx.Variable) -> tuple[tuple[int, ...], Any]:
    value = var.get_value()
    return tuple(value.shape), value.dtype


def _abstract(var: nnx.Variable) -> bool:
    return isinstance(var.get_value(), jax.ShapeDtypeStruct)


# ---------------------------------------------------------------------------------- placement
ShardingFn = Callable[[str, tuple[int, ...], Any], jax.sharding.Sharding]


def plan_shardings(sharding: Any, mesh: Mesh | None) -> ShardingFn | None:
    """The sharding of each variable for ``from_pretrained(sharding=, mesh=)``: ``"replicate"``,
    ``"fsdp"``, a dict of logical axis rules (with ``"fsdp": True`` optionally) or a
    :class:`~jaxfeed.runtime.sharding.ShardingPlan`, laid out by that plan as
    ``Trainer(sharding=)`` lays out the state (default mesh: one ``"data"`` axis over every
    device). None for both: the default device.

    >>> mesh = jax.make_mesh((1,), ("data",))
    >>> plan_shardings("fsdp", mesh)("w", (8, 4096), ("embed", "mlp")).spec
    P()
    """
    if sharding is None and mesh is None:
        return None
    if not isinstance(sharding, str | Mapping | ShardingPlan | None):
        raise TypeError(f"sharding must be a string or a dict of rules, got {sharding!r}")
    plan = ShardingPlan.parse("replicate" if sharding is None else sharding)
    on = default_mesh() if mesh is None else mesh

    def place(name: str, shape: tuple[int, ...], logical: Any) -> jax.sharding.Sharding:
        return NamedSharding(on, plan.spec(name, shape, logical, on))

    return place


def _put(chunk: np.ndarray, device: Any) -> jax.Array:
    """One host chunk onto one device (a seam the memory benchmark counts bytes through)."""
    return jax.device_put(chunk, device)


def _place(host: np.ndarray, dtype: Any, sharding: jax.sharding.Sharding | None) -> jax.Array:
    """``host`` (a memory map or a view of one) on ``sharding``: device by device, each reading
    only its slice into a fresh host copy (never a view of the read-only map) cast to ``dtype``,
    so at most one slice is in host memory besides what the devices hold."""
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shape = tuple(host.shape)
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        chunk = _copy(host[index], dtype)
        pieces.append(_put(chunk, device))
        del chunk
    return jax.make_array_from_single_device_arrays(shape, sharding, pieces)


def _place_stacked(hosts: Sequence[np.ndarray], dtype: Any,
                   sharding: jax.sharding.Sharding | None) -> jax.Array:  # fmt: skip
    """The per-layer tensors ``hosts`` (views of memory maps) as one ``[layers, ...]`` array on
    ``sharding``: device by device, each device's chunk assembled from only its slice of each
    layer's tensor, so at most one chunk is in host memory besides what the devices hold."""
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shape = (len(hosts), *hosts[0].shape)
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        index = tuple(index) + (slice(None),) * (len(shape) - len(index))
        rows = range(len(hosts))[index[0]]
        first = hosts[rows[0]][index[1:]]
        chunk = np.empty((len(rows), *first.shape), dtype)
        for j, layer in enumerate(rows):
            chunk[j] = _copy(hosts[layer][index[1:]], dtype)
        pieces.append(_put(chunk, device))
        del chunk
    return jax.make_array_from_single_device_arrays(shape, sharding, pieces)


def _layer_sharding(sharding: jax.sharding.Sharding | None) -> jax.sharding.Sharding | None:
    """The sharding of one layer of a stack laid out on ``sharding`` (its leading axis whole:
    the rest as the stack's; a split leading axis: replicated, the stacking re-lays it)."""
    if not isinstance(sharding, NamedSharding):
        return sharding
    spec = tuple(sharding.spec)
    if spec and spec[0] is not None:
        return NamedSharding(sharding.mesh, PartitionSpec())
    return NamedSharding(sharding.mesh, PartitionSpec(*spec[1:]))


BLOCK_BYTES = 8 << 20  # of the file read between releases of the memory map's pages


def _release(view: np.ndarray) -> None:
    """Drop the pages of ``view``'s memory map from this process (they stay in the page cache):
    so touched file pages never add up to more than a block."""
    mm = getattr(view, "_mmap", None)
    if mm is not None and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED)


def _copy(view: np.ndarray, dtype: Any) -> np.ndarray:
    """A fresh C-order copy of ``view`` (of a memory map) as ``dtype``, read in blocks along the
    file's outermost axis, releasing the map's pages after each."""
    if view.ndim == 0 or view.nbytes <= BLOCK_BYTES or getattr(view, "_mmap", None) is None:
        out = np.array(view, dtype=dtype, copy=True)
        _release(view)
        return out
    out = np.empty(view.shape, dtype)
    axis = int(np.argmax(np.abs(view.strides)))  # consecutive file rows run along this axis
    step = max(1, BLOCK_BYTES // max(1, abs(view.strides[axis])))
    for start in range(0, view.shape[axis], step):
        part = (slice(None),) * axis + (slice(start, start + step),)
        out[part] = view[part]
        _release(view)
    return out


def _init_value(path: str, shape: tuple[int, ...], dtype: Any, std: float, key: jax.Array,
                sharding: jax.sharding.Sharding | None) -> jax.Array:  # fmt: skip
    """A fresh value as ``transformers``' ``_init_weights``: biases 0, norm scales 1, other
    weights normal with standard deviation ``std``; made on its sharding."""
    leaf = path.rsplit(".", 1)[-1]

    def make() -> jax.Array:
        if leaf == "bias" or leaf.endswith("_bias"):
            return jnp.zeros(shape, dtype)
        if leaf in ("scale", "weight_scale") or leaf.endswith("_scale"):
            return jnp.ones(shape, dtype)
        return (std * jax.random.normal(key, shape, jnp.float32)).astype(dtype)

    return jax.jit(make, out_shardings=sharding)()


# ---------------------------------------------------------------------------------- load
def _candidates(name: str, prefix: str) -> list[str]:
    """Names a tensor may have: with or without the base model's ``prefix``, and with the
    LayerNorm ``gamma``/``beta`` names older checkpoints use."""
    names = [name]
    if prefix and name.startswith(prefix + "."):
        names.append(name[len(prefix) + 1 :])
    elif prefix:
        names.append(f"{prefix}.{name}")
    for n in list(names):
        if n.endswith(".weight"):
            names.append(n[: -len(".weight")] + ".gamma")
        elif n.endswith(".bias"):
            names.append(n[: -len(".bias")] + ".beta")
    return names


def _hf_shape(transform: Transform, shape: tuple[int, ...], dtype: Any) -> tuple[int, ...] | None:
    try:
        return tuple(transform.to_hf(np.broadcast_to(np.zeros((), dtype), shape)).shape)
    except Exception:  # a transform that cannot run on a view: shape unknown
        return None


FRESH_FLOOR = 1 << 30  # bytes of fresh parameters always allowed, whatever the checkpoint


class _FreshBudget:
    """The bytes of parameters a load may create afresh (missing, resized or uncovered): the
    checkpoint's own weights' bytes, at least :data:`FRESH_FLOOR`; a config asking for more is
    refused before the array is made, as a tensor larger than its file is refused on loading."""

    def __init__(self, weights: Weights) -> None:
        self.weights = weights
        held = sum(e.end - e.start for e in weights.entries.values())
        self.left = max(held, FRESH_FLOOR)

    def take(self, name: str, shape: tuple[int, ...], dtype: Any) -> None:
        size = int(np.dtype(dtype).itemsize) * math.prod(shape)
        if size > self.left:
            found = (
                f" (the checkpoint's is {list(self.weights.shape(name))})"
                if name in self.weights
                else ""
            )
            raise CheckpointError(
                f"{name}: the model built from {self.weights.folder / 'config.json'} would make "
                f"it afresh with shape {list(shape)}{found}, {size / 2**30:.1f} GiB, more than "
                f"the {self.left / 2**30:.1f} GiB left to new parameters (the checkpoint's "
                "weights' size, at least 1 GiB); correct the sizes in config.json"
            )
        self.left -= size


def _sharding_fn(shardings: ShardingFn | Mapping[str, Any] | None, mesh: Mesh | None) -> ShardingFn:
    """Where each variable goes: ``shardings`` (a function or a mapping of path to sharding),
    else replicated on ``mesh``, else None (the default device)."""
    if isinstance(shardings, Mapping):
        table = dict(shardings)
        return lambda path, shape, logical: table.get(path)
    if shardings is not None:
        return shardings
    if mesh is not None:
        replicated = NamedSharding(mesh, PartitionSpec())
        return lambda path, shape, logical: replicated
    return lambda path, shape, logical: None


def load_weights(
    model: Any,
    weights: Weights,
    rules: Sequence[Rule],
    *,
    mesh: Mesh | None = None,
    shardings: ShardingFn | Mapping[str, jax.sharding.Sharding] | None = None,
    prefix: str = "",
    init_std: float = 0.02,
    seed: int = 0,
    ignore_mismatched: bool | Callable[[str], bool] = False,
) -> LoadReport:
    """Fill ``model``'s variables from ``weights`` by ``rules``, one tensor at a time, straight
    onto each variable's sharding: ``shardings`` (a function of ``(path, shape, logical_axes)``
    or a mapping of path to sharding), else replicated on ``mesh``, else the default device.

    A tensor is found under its name, with or without the base model's ``prefix`` (``"bert"``),
    or under the old LayerNorm names ``gamma``/``beta``. A shape that disagrees raises
    :class:`CheckpointError` naming the tensor and both shapes, unless ``ignore_mismatched``
    (True, or a predicate of the checkpoint name) lets it be re-initialised. Variables the
    checkpoint does not give and that have no value yet (abstract models) are initialised as
    ``transformers`` does (``init_std``), and reported.
    """
    model_vars = variables(model)
    load = _Load(weights, _sharding_fn(shardings, mesh), prefix, init_std,
                 jax.random.key(seed), ignore_mismatched)  # fmt: skip
    for where, entries in _by_variable(model, model_vars, rules).items():
        var = model_vars[where]
        if entries[0][2] is None:
            load.one(where, var, *entries[0][:2])
        else:
            load.stacked(where, var, entries)
    for j, (path, var) in enumerate(model_vars.items()):
        if path in load.covered or not _abstract(var):
            continue
        shape, dtype = _shape_dtype(var)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise CheckpointError(f"no rule gives the model's variable {path} ({dtype}) a value")
        load.budget.take(path, shape, dtype)
        target = load.sharding_of(path, shape, logical_axes(var))
        var.set_value(_init_value(path, shape, dtype, init_std,
                                  jax.random.fold_in(load.key, len(rules) + j), target))  # fmt: skip
        load.report.newly_initialised.append(path)
    load.report.unexpected = [n for n in weights.names() if n not in load.used]
    return load.report


def _by_variable(model: Any, model_vars: Mapping[str, Any], rules: Sequence[Rule]) -> dict:
    """``{variable path: [(rule number, rule, layer index or None), ...]}``: the rules of one
    layer of a stack name the stacked variable and their layer."""
    out: dict[str, list[tuple[int, Rule, int | None]]] = {}
    for i, rule in enumerate(rules):
        try:
            where, var, index = locate(model, rule.path)
        except (KeyError, IndexError, AttributeError, TypeError):
            where, var, index = rule.path, None, None
        if not isinstance(var, nnx.Variable) or where not in model_vars:
            raise KeyError(
                f"rule for {rule.hf!r} names {rule.path!r}, which the model does not have "
                f"(e.g. {', '.join(list(model_vars)[:4])})"
            )
        out.setdefault(where, []).append((i, rule, index))
    return out


class _Load:
    """One :func:`load_weights` call's state: what it read, covered and reported."""

    def __init__(self, weights: Weights, sharding_of: ShardingFn, prefix: str, init_std: float,
                 key: jax.Array, ignore_mismatched: Any) -> None:  # fmt: skip
        self.weights, self.sharding_of, self.prefix = weights, sharding_of, prefix
        self.init_std, self.key, self.ignore = init_std, key, ignore_mismatched
        self.budget = _FreshBudget(weights)
        self.report = LoadReport()
        self.used: set[str] = set()
        self.covered: set[str] = set()

    def read(self, rule: Rule, shape: tuple[int, ...], dtype: Any, what: str) -> Any:
        """The checkpoint tensor of ``rule`` in the parameter's layout (a view), or None when
        the variable must be made afresh (missing, or resized under ``ignore_mismatched``)."""
        name = next((n for n in _candidates(rule.hf, self.prefix) if n in self.weights), None)
        if name is None:
            self.budget.take(rule.hf, shape, dtype)
            self.report.missing.append(rule.hf)
            self.report.newly_initialised.append(rule.hf)
            return None
        self.used.add(name)
        host = rule.transform.to_jax(self.weights.get(name))
        if tuple(host.shape) == shape:
            return host
        ignore = self.ignore(rule.hf) if callable(self.ignore) else self.ignore
        expected = _hf_shape(rule.transform, shape, dtype)
        if not ignore:
            raise CheckpointError(
                f"tensor {name!r} in {self.weights.folder} has shape "
                f"{list(self.weights.shape(name))}, but the model built from its config.json "
                f"expects {list(expected or shape)} (parameter {what}, {list(shape)} in "
                "jaxfeed's layout)"
            )
        self.report.mismatched.append(
            f"{rule.hf}: {list(self.weights.shape(name))} -> {list(expected or shape)}"
        )
        self.budget.take(name, shape, dtype)
        self.report.newly_initialised.append(rule.hf)
        return None

    def one(self, where: str, var: nnx.Variable, i: int, rule: Rule) -> None:
        """A variable of its own from its one tensor."""
        self.covered.add(where)
        shape, dtype = _shape_dtype(var)
        target = self.sharding_of(where, shape, logical_axes(var))
        host = self.read(rule, shape, dtype, rule.path)
        if host is not None:
            var.set_value(_place(host, dtype, target))
        else:
            var.set_value(_init_value(rule.path, shape, dtype, self.init_std,
                                      jax.random.fold_in(self.key, i), target))  # fmt: skip

    def stacked(self, where: str, var: nnx.Variable, entries: list) -> None:
        """A layer stack's variable ``[layers, ...]`` from one tensor per layer: straight onto
        its shards when every layer's tensor is there, else stacked from per-layer arrays
        (tensors read, missing layers made as ``transformers`` makes them)."""
        self.covered.add(where)
        shape, dtype = _shape_dtype(var)
        target = self.sharding_of(where, shape, logical_axes(var))
        hosts: list[Any] = [None] * shape[0]
        rules: dict[int, tuple[int, Rule]] = {}
        for i, rule, index in entries:
            rules[index] = (i, rule)
            hosts[index] = self.read(rule, shape[1:], dtype, f"{rule.path} of {where}")
        if all(h is not None for h in hosts):
            var.set_value(_place_stacked(hosts, dtype, target))
            return
        one = _layer_sharding(target)
        pieces = []
        for index, host in enumerate(hosts):
            if host is not None:
                pieces.append(_place(host, dtype, one))
                continue
            i, rule = rules.get(index, (1_000_000 + index, Rule(where, where)))
            if index not in rules:
                self.budget.take(f"{where}[{index}]", shape[1:], dtype)
                self.report.newly_initialised.append(f"{where}[{index}]")
            pieces.append(_init_value(rule.path, shape[1:], dtype, self.init_std,
                                      jax.random.fold_in(self.key, i), one))  # fmt: skip
        var.set_value(jax.jit(lambda *xs: jnp.stack(xs), out_shardings=target)(*pieces))


def export_weights(model: Any, rules: Sequence[Rule]) -> dict[str, np.ndarray]:
    """The checkpoint tensors of ``model`` by ``rules`` (numpy, checkpoint layout, C order): the
    inverse of :func:`load_weights`, for ``save_pretrained``."""
    model_vars = variables(model)
    read: dict[str, np.ndarray] = {}  # a stack's variable is read once for all its layers
    out: dict[str, np.ndarray] = {}
    for where, entries in _by_variable(model, model_vars, rules).items():
        if where not in read:
            read[where] = np.asarray(jax.device_get(model_vars[where].get_value()))
        for _, rule, index in entries:
            value = read[where] if index is None else read[where][index]
            out[rule.hf] = np.ascontiguousarray(rule.transform.to_hf(value))
    return out


__all__ = [
    "CONV1D",
    "CONV2D",
    "IDENTITY",
    "TRANSPOSE",
    "LoadReport",
    "Rule",
    "Transform",
    "export_weights",
    "load_weights",
    "logical_axes",
    "plan_shardings",
    "reshape",
    "variables",
]
