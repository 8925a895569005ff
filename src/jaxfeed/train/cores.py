"""Compiled train / eval / predict steps for NNX and Linen models, behind one protocol.

A *core* turns a model and an optax transformation into a pytree ``state`` plus three functions
compiled once with ``jax.jit`` (state buffers donated):

* ``train_step(state, sums, batch, n, step) -> (state, sums)``
* ``eval_step(state, sums, batch, n) -> sums``
* ``predict_step(state, batch) -> outputs``

and ``checkpoint_state()`` / ``restore(manager, step)`` / ``write_back()`` for the trainer, and
``leaves()`` / ``compile(shardings)`` for laying the state out over a mesh
(:mod:`jaxfeed.train.sharding`). The NNX
graph is split once (``nnx.split``) and merged inside the trace, so no Python graph traversal runs
per step. Both cores call the model the same way (:class:`CallConvention`, :class:`Inputs`).

Each step adds the batch's sums into an accumulator that stays on the device (see
:func:`empty_sums`), so the host reads metrics only when it reports them. Rows past ``n`` (the
padding of a short last batch) and rows without a label (class id ``-1``) are masked out of the
loss, the gradients and the metrics.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfeed.runtime.prng import dropout_impl
from jaxfeed.train import ids, tokens
from jaxfeed.train.checkpoint import (
    CheckpointError,
    load_nnx_pure_state,
    nnx_pure_state,
    restore_linen,
    restore_weights,
)
from jaxfeed.train.checkpoint_trees import abstract_like
from jaxfeed.train.losses import Objective
from jaxfeed.train.sharding import Leaf
from jaxfeed.train.trained_part import base_problem, frozen_record, prune, saved_paths

Batch = dict[str, jax.Array]

# keyword -> value it takes in training; `deterministic` has the opposite polarity
TRAIN_FLAGS = {"train": True, "training": True, "is_training": True, "deterministic": False}
PRECISIONS = {"float32": None, "bfloat16": jnp.bfloat16}


# dropout's random bits: XLA's RngBitGenerator ("rbg") costs a fraction of threefry's compile
# time and step time on TPU, a counter hash a twentieth of either's bits on CPU; the same seed
# still gives the same run on one platform
def dropout_key(seed: int, step: Any) -> jax.Array:
    """The dropout key of training step ``step`` under ``seed``: a counter-hash key on a CPU
    (cheap bits where XLA's threefry and ``rbg`` are slow), an ``rbg`` key on accelerators
    (:func:`jaxfeed.runtime.prng.dropout_impl`).

    >>> a, b = dropout_key(0, 3), dropout_key(0, 3)
    >>> bool((jax.random.key_data(a) == jax.random.key_data(b)).all()), str(jax.random.key_impl(a))
    (True, 'ch')
    """
    return jax.random.fold_in(jax.random.key(seed, impl=dropout_impl()), step)


# ---------------------------------------------------------------------------------- calling
@dataclass(frozen=True)
class CallConvention:
    """How a model's ``__call__`` takes its mode and its dropout keys.

    >>> def f(x, *, training=False, rngs=None): ...
    >>> CallConvention.inspect(f).kwargs(train=True, rngs="R")
    {'training': True, 'rngs': 'R'}
    >>> CallConvention.inspect(lambda x, deterministic=True: x).kwargs(train=False)
    {'deterministic': True}
    """

    rngs: bool = False
    flag: str | None = None

    @classmethod
    def inspect(cls, fn: Callable) -> CallConvention:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return cls()
        flag = next((name for name in TRAIN_FLAGS if name in params), None)
        return cls(rngs="rngs" in params, flag=flag)

    def kwargs(self, train: bool, rngs: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.flag is not None:
            out[self.flag] = train if TRAIN_FLAGS[self.flag] else not train
        if self.rngs and rngs is not None:
            out["rngs"] = rngs
        return out


class Inputs:
    """Which batch columns the model takes: a name, a tuple of names (positional arguments) or
    ``{argument: column}`` (keyword arguments).

    >>> Inputs(("a", "b")).call({"a": 1, "b": 2, "c": 3})
    ((1, 2), {})
    >>> Inputs({"x": "a"}).columns
    ['a']
    """

    def __init__(self, spec: str | tuple | list | Mapping[str, str]) -> None:
        if isinstance(spec, str):
            self.positional, self.keywords = [spec], {}
        elif isinstance(spec, tuple | list) and spec and all(isinstance(c, str) for c in spec):
            self.positional, self.keywords = list(spec), {}
        elif isinstance(spec, Mapping) and spec:
            self.positional, self.keywords = [], {str(k): str(v) for k, v in spec.items()}
        else:
            raise TypeError(
                f"inputs= is a column name, a tuple of names or {{argument: column}}, got {spec!r}"
            )
        self.spec = spec
        self.columns = [*self.positional, *self.keywords.values()]

    def call(self, batch: Mapping[str, Any]) -> tuple[tuple, dict[str, Any]]:
        return tuple(batch[c] for c in self.positional), {
            k: batch[c] for k, c in self.keywords.items()
        }

    def example(self, value: Any) -> dict[str, Any]:
        """A batch dict from an ``example_input`` given in the shape of ``inputs=``."""
        if self.keywords:
            if not isinstance(value, Mapping):
                raise TypeError("example_input must be a dict {argument: array} like inputs=")
            return {c: jnp.asarray(value[k]) for k, c in self.keywords.items()}
        if len(self.positional) == 1:
            return {self.positional[0]: jnp.asarray(value)}
        return {c: jnp.asarray(v) for c, v in zip(self.positional, value, strict=True)}


def cast_floats(tree: Any, dtype: Any) -> Any:
    """Floating leaves of ``tree`` as ``dtype`` (others unchanged); ``dtype=None`` is a no-op."""
    if dtype is None:
        return tree
    return jax.tree.map(
        lambda x: (
            x.astype(dtype) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x
        ),
        tree,
    )


def _restore_dtypes(tree: Any, like: Any) -> Any:
    return jax.tree.map(
        lambda x, ref: x.astype(ref.dtype) if hasattr(ref, "dtype") else x, tree, like
    )


# ---------------------------------------------------------------------------------- sums
def empty_sums(metrics: Mapping[str, Any] = ()) -> dict[str, jax.Array]:
    """The on-device accumulator: weighted sums of the loss and metrics over labelled rows, their
    total weight ``count`` (rows, or real tokens for token losses), the labelled ``rows``,
    ``unlabelled`` rows, and the first step with a non-finite loss or an impossible
    label (-1 when none)."""
    sums = {
        "loss": np.zeros((), np.float32),
        "count": np.zeros((), np.float32),
        "rows": np.zeros((), np.float32),
        "unlabelled": np.zeros((), np.int32),
        "first_bad": np.full((), -1, np.int32),
        "bad_label_step": np.full((), -1, np.int32),
        "bad_label": np.zeros((), np.int32),
        "classes": np.zeros((), np.int32),
        **ids.empty(),
    }
    sums.update({f"m_{name}": np.zeros((), np.float32) for name in metrics})
    # built on the host and put on the device in one transfer: each jnp.zeros was an operation
    # dispatched (and, once a process for each dtype, compiled) on its own, ~20 an epoch
    return jax.device_put(sums)


class Rows(NamedTuple):
    """One value per row, and each row's weight in the means (0: left out; 1 per labelled row,
    or the number of real tokens for token losses), its real and counted rows; ``mean`` is the
    batch mean a loss function returned instead of values per row (no masking possible)."""

    values: jax.Array
    weight: jax.Array
    real: jax.Array
    counted: jax.Array
    mean: jax.Array | None = None


def _row_values(values: jax.Array, batch: Batch) -> tuple[jax.Array, jax.Array | None]:
    """``(batch,)`` values as they are; ``(batch, length, ...)`` values (one per token) as each
    row's mean over its real tokens, and their number."""
    if values.ndim < 2:
        return values, None
    return tokens.masked_row_mean(values, tokens.token_mask(batch, values.shape))


def row_values(objective: Objective, outputs: Any, batch: Batch, n: Any) -> Rows:
    """The loss of each row and its weight: rows past ``n`` and unlabelled rows weigh 0."""
    values = jnp.asarray(objective.per_example(outputs, batch), jnp.float32)
    mean = values if values.ndim == 0 else None
    if mean is not None:  # a function returning the batch mean already: no masking possible
        values = jnp.broadcast_to(values, (jax.tree.leaves(batch)[0].shape[0],))
    values, token_weight = _row_values(values, batch)
    real = jnp.arange(values.shape[0]) < n
    counted = real if objective.labelled is None else real & objective.labelled(outputs, batch)
    if objective.weight is not None:
        token_weight = objective.weight(outputs, batch)
    weight = counted.astype(jnp.float32)
    if token_weight is not None:
        weight = weight * token_weight.astype(jnp.float32)
    return Rows(values, weight, real, counted, mean)


def masked_mean(objective: Objective, outputs: Any, batch: Batch, n: Any) -> tuple[jax.Array, Rows]:
    """The loss averaged with the rows' weights (over the rows that count, or their real
    tokens), and the rows (:class:`Rows`)."""
    rows = row_values(objective, outputs, batch, n)
    if rows.mean is not None:
        return rows.mean, rows
    total = jnp.sum(jnp.where(rows.weight > 0, rows.values * rows.weight, 0.0))
    return total / jnp.maximum(jnp.sum(rows.weight), 1e-9), rows


def add_sums(sums, objective, metrics, outputs, batch, rows: Rows, n, step):
    """Add one batch to the accumulator (inside the compiled step): the weighted sums of the
    loss and metrics, and their total weight as ``count``."""
    weight, real = rows.weight, rows.real
    counts = weight > 0
    loss = jnp.sum(jnp.where(counts, rows.values * weight, 0.0))
    new = dict(sums)
    new["loss"] = sums["loss"] + loss
    new["count"] = sums["count"] + jnp.sum(weight)
    new["rows"] = sums["rows"] + jnp.sum(rows.counted).astype(jnp.float32)
    new["unlabelled"] = sums["unlabelled"] + jnp.sum(real & ~rows.counted).astype(jnp.int32)
    for name, fn in metrics.items():
        if getattr(fn, "of_loss", False) and rows.mean is None:  # perplexity: the loss's own sum
            new[f"m_{name}"] = sums[f"m_{name}"] + loss
            continue
        values = jnp.asarray(fn(outputs, batch), jnp.float32)
        values = jnp.broadcast_to(values, weight.shape) if values.ndim == 0 else values
        if objective.weight is None and values.ndim >= 2:  # one value per token
            values = _row_values(values, batch)[0]
        values = values.reshape(weight.shape[0], -1).mean(axis=1)  # one value per example
        new[f"m_{name}"] = sums[f"m_{name}"] + jnp.sum(jnp.where(counts, values * weight, 0.0))
    bad = ~jnp.isfinite(loss)
    new["first_bad"] = jnp.where((sums["first_bad"] < 0) & bad, step, sums["first_bad"])
    if objective.label_check is not None:
        wrong = real & objective.label_check(outputs, batch)
        first = (sums["bad_label_step"] < 0) & jnp.any(wrong)
        labels = jnp.asarray(batch_targets(objective, batch), jnp.int32)
        value = labels[jnp.argmax(wrong)]
        if value.ndim:  # token targets: the row's first id outside the classes
            outside = ((value < 0) & (value != tokens.IGNORE)) | (value >= outputs.shape[-1])
            value = value.reshape(-1)[jnp.argmax(outside.reshape(-1))]
        new["bad_label_step"] = jnp.where(first, jnp.maximum(step, 0), sums["bad_label_step"])
        new["bad_label"] = jnp.where(first, value, sums["bad_label"])
        new["classes"] = jnp.full((), outputs.shape[-1], jnp.int32)
    return new


def batch_targets(objective: Objective, batch: Batch) -> jax.Array:
    return batch[objective.targets]


# ---------------------------------------------------------------------------------- protocol
class Core(Protocol):
    """What the trainer needs of a model: compiled steps over one state pytree."""

    api: str  # "nnx" or "linen"
    state: Any  # the pytree the steps take and return (None until `ready`)
    train_step: Callable
    eval_step: Callable
    predict_step: Callable

    @property
    def ready(self) -> bool: ...

    def initialize(self, batch: Batch) -> None:
        """Create the state from the first real batch (Linen without ``example_input``)."""

    def checkpoint_state(self) -> Any: ...

    def checkpoint_meta(self, state: Any) -> dict[str, Any]:
        """What a checkpoint of ``state`` records besides it (``frozen``: the weights it leaves
        out, :mod:`jaxfeed.train.trained_part`)."""

    def restore(self, manager: Any, step: Any, shardings: Any = None) -> dict[str, Any]:
        """Read ``step`` into the state (into ``shardings``, a tree like the state, when given)."""

    def restore_weights(self, manager: Any, step: Any) -> dict[str, Any]:
        """Read only the model of ``step`` (never its optimizer state); returns its metadata."""

    def leaves(self) -> list[Leaf]:
        """The state's arrays in ``jax.tree.leaves`` order: names, shapes, partitioning
        annotations."""

    def compile(self, shardings: Any, sums: Any) -> None:
        """Compile the train step to return the state in ``shardings`` and the sums in ``sums``."""

    def write_back(self) -> None: ...

    def learning_rate(self) -> float | None: ...


def _learning_rate(opt_state: Any) -> float | None:
    """The ``learning_rate`` an ``optax.inject_hyperparams`` state holds, if any."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]:
        where = jax.tree_util.keystr(path)
        if "['hyperparams']" in where and "['learning_rate']" in where:
            return float(np.asarray(jax.device_get(leaf)).reshape(-1)[0])
    return None


def _leaf_name(path: tuple, top: dict[Any, str] | None = None) -> str:
    """``model.layers.0.kernel`` for a key path (``top`` renames the first key)."""
    parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
    if parts and top:
        first = getattr(path[0], "key", getattr(path[0], "idx", None))
        parts[0] = top.get(first, parts[0])
    return ".".join(parts)


def _names(annotation: Any) -> tuple[Any, ...] | None:
    """Logical (or mesh) axis names from an ``out_sharding`` / box annotation."""
    if annotation is None:
        return None
    annotation = getattr(annotation, "spec", annotation)  # a NamedSharding
    names = tuple(annotation)
    return names if any(n is not None for n in names) else None


def _annotated_leaves(tree: Any, is_box: Callable[[Any], bool], annotation: Callable[[Any], Any],
                      top: dict[Any, str] | None = None) -> list[Leaf]:  # fmt: skip
    out = []
    for path, item in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_box)[0]:
        name = _leaf_name(path, top)
        names = _names(annotation(item)) if is_box(item) else None
        for leaf in jax.tree.leaves(item):
            shape = tuple(getattr(leaf, "shape", ()))
            out.append(Leaf(name, shape, names if names and len(names) == len(shape) else None))
    return out


def _jit_steps(train_step: Callable, eval_step: Callable, predict_step: Callable,
               out_shardings: Any = None) -> tuple[Callable, Callable, Callable]:  # fmt: skip
    """The three steps compiled with ``jax.jit``, buffers donated; ``out_shardings`` (state,
    sums) fixes the train step's output layout."""
    train = (
        jax.jit(train_step, donate_argnums=(0, 1))
        if out_shardings is None
        else jax.jit(train_step, donate_argnums=(0, 1), out_shardings=out_shardings)
    )
    return train, jax.jit(eval_step, donate_argnums=(1,)), jax.jit(predict_step)


def as_transformation(optimizer: Any) -> optax.GradientTransformation:
    """An optax transformation; ``optax.MultiSteps`` instances give their transformation."""
    if isinstance(optimizer, optax.MultiSteps):
        return optimizer.gradient_transformation()
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"optimizer must be an optax.GradientTransformation (or optax.MultiSteps), got "
            f"{type(optimizer).__name__}"
        )
    return optimizer


def _extra_args(tx: optax.GradientTransformation, loss: jax.Array) -> dict[str, Any]:
    """``value=`` the loss for transformations that take extra arguments (reduce_on_plateau)."""
    return {"value": loss} if isinstance(tx, optax.GradientTransformationExtraArgs) else {}


@dataclass
class StepSpec:
    """What the steps of either core share."""

    objective: Objective
    metrics: dict[str, Callable]
    preprocess: Callable
    inputs: Inputs
    seed: int
    compute_dtype: Any = None  # None: float32
    trainable: Any = None  # an nnx filter of the trained parameters (None: every nnx.Param)
    id_columns: ids.Columns = ()  # batch columns of token ids and their counts (checked)


# ---------------------------------------------------------------------------------- NNX
class NNXCore:
    """An ``nnx.Module`` and an ``nnx.Optimizer`` as one split state.

    Dropout keys: a model whose ``__call__`` takes ``rngs=`` gets ``nnx.Rngs(dropout=...)`` from
    ``(seed, step)`` (:func:`dropout_key`); otherwise the module's own ``nnx.Rngs`` streams advance
    inside the state.
    """

    api = "nnx"

    def __init__(self, model: Any, tx: optax.GradientTransformation, spec: StepSpec) -> None:
        from flax import nnx  # noqa: PLC0415 (import cost: flax, on a trainer's first use)

        self.model, self.spec = model, spec
        wrt = nnx.Param if spec.trainable is None else spec.trainable  # frozen: no state
        self.optimizer = nnx.Optimizer(model, tx, wrt=wrt)
        self.graphdef, self.state = nnx.split((model, self.optimizer))
        self.convention = CallConvention.inspect(type(model).__call__)
        convention, graphdef = self.convention, self.graphdef
        objective, metrics, inputs = spec.objective, spec.metrics, spec.inputs
        dtype = spec.compute_dtype
        layer_masks = getattr(spec.trainable, "layer_masks", None) or {}  # layers kept frozen

        def forward(model: Any, batch: Batch, train: bool, key: Any = None) -> Any:
            args, kwargs = inputs.call(cast_floats(batch, dtype))
            rngs = nnx.Rngs(dropout=key) if key is not None else None
            out = model(*args, **kwargs, **convention.kwargs(train, rngs))
            return cast_floats(out, jnp.float32 if dtype is not None else None)

        def train_step(state, sums, batch, n, step):
            model, optimizer = nnx.merge(graphdef, state)
            model.train()
            batch = spec.preprocess(batch)
            key = dropout_key(spec.seed, step)
            gdef, params, frozen, rest = nnx.split(model, wrt, nnx.Param, ...)

            def loss_fn(params):
                frozen_ = cast_floats(frozen, dtype)  # no gradient flows to frozen parameters
                m = nnx.merge(gdef, cast_floats(params, dtype), frozen_, rest, copy=True)
                outputs = forward(m, batch, True, key)
                mean, rows = masked_mean(objective, outputs, batch, n)
                return mean, (outputs, rows, nnx.state(m, nnx.Not(nnx.Param)))

            (mean, (outputs, rows, new_rest)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params
            )
            nnx.update(model, _restore_dtypes(new_rest, rest))
            before = _held_layers(params, layer_masks)
            optimizer.update(model, grads, **_extra_args(optimizer.tx, mean))
            _keep_layers(model, before, layer_masks)
            sums = add_sums(sums, objective, metrics, outputs, batch, rows, n, step)
            sums = ids.record(sums, spec.id_columns, batch, n, step)
            return nnx.state((model, optimizer)), sums

        def eval_step(state, sums, batch, n):
            model, _ = nnx.merge(graphdef, state)
            model.eval()
            batch = spec.preprocess(batch)
            outputs = forward(model, batch, False)
            _, rows = masked_mean(objective, outputs, batch, n)
            sums = add_sums(sums, objective, metrics, outputs, batch, rows, n, -1)
            return ids.record(sums, spec.id_columns, batch, n, -1)

        def predict_step(state, batch):
            model, _ = nnx.merge(graphdef, state)
            model.eval()
            return forward(model, spec.preprocess(batch), False)

        self._steps = (train_step, eval_step, predict_step)
        self.train_step, self.eval_step, self.predict_step = _jit_steps(*self._steps)

    @property
    def ready(self) -> bool:
        return True

    def leaves(self) -> list[Leaf]:
        from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

        return _annotated_leaves(
            self.state,
            lambda x: isinstance(x, nnx.Variable),
            lambda v: v.get_metadata().get("out_sharding"),
            {0: "model", 1: "optimizer"},
        )

    def compile(self, shardings: Any, sums: Any) -> None:
        self.train_step, self.eval_step, self.predict_step = _jit_steps(
            *self._steps, out_shardings=(shardings, sums)
        )

    def initialize(self, batch: Batch) -> None:
        pass  # an NNX model is built with its parameters

    def write_back(self) -> None:
        """Put the trained state into the user's model and optimizer objects. They share the
        state's arrays, not copies: a copy would hold a second model and optimizer state on the
        devices for as long as the trainer lives (a 1B model's 6.6 GB on a 16 GB chip). A later
        step donates those arrays, as the first step donates the arrays the model was built
        with, so the objects are current after each ``fit``, ``evaluate`` or checkpoint and
        stale while steps run."""
        from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

        nnx.update((self.model, self.optimizer), self.state)

    def checkpoint_state(self) -> Any:
        """The model and the optimizer as pure dicts; of a model trained in part (``trainable=``)
        the trained parameters and the variables that are not parameters alone, never the
        frozen weights (:mod:`jaxfeed.train.trained_part`)."""
        from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

        self.write_back()
        if self.spec.trainable is None:
            return nnx_pure_state(self.model, self.optimizer)
        part = nnx.Any(self.spec.trainable, nnx.Not(nnx.Param))
        return {"model": nnx.to_pure_dict(nnx.state(self.model, part)),
                "optimizer": nnx.to_pure_dict(nnx.state(self.optimizer))}  # fmt: skip

    def checkpoint_meta(self, state: Any) -> dict[str, Any]:
        if self.spec.trainable is None:
            return {}
        saved = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]}
        model = nnx_pure_state(self.model)["model"]
        return {"frozen": frozen_record(model, saved, getattr(self.model, "hub_source", None))}

    def restore(self, manager: Any, step: Any, shardings: Any = None) -> dict[str, Any]:
        from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

        step = manager.resolve(step)
        meta = manager.meta(step)
        layout = None
        if shardings is not None:  # straight into it: no device ever holds more than its shards
            layout = {"model": nnx.to_pure_dict(shardings[0]),
                      "optimizer": nnx.to_pure_dict(shardings[1])}  # fmt: skip
        if meta.get("frozen"):  # the trained part alone: the frozen weights are the model's
            saved = saved_paths(meta)
            problem = base_problem(meta, nnx_pure_state(self.model)["model"], saved)
            if problem:
                raise CheckpointError(
                    f"cannot restore step {step} of {manager.directory}: {problem}"
                )
            target = prune(nnx_pure_state(self.model, self.optimizer), saved)
            if layout is not None:
                target = abstract_like(target, prune(layout, saved))
            restored = manager.restore(step, state=target)
            load_nnx_pure_state(restored["state"], self.model, self.optimizer)
        elif layout is None:  # into the shardings the model's arrays have now
            restored = manager.restore(step, model=self.model, optimizer=self.optimizer)
        else:
            target = nnx_pure_state(self.model, self.optimizer)
            restored = manager.restore(step, state=abstract_like(target, layout))
            load_nnx_pure_state(restored["state"], self.model, self.optimizer)
        self.graphdef, self.state = nnx.split((self.model, self.optimizer))
        return restored["meta"]

    def restore_weights(self, manager: Any, step: Any) -> dict[str, Any]:
        from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

        self.write_back()  # the model object holds the arrays the state has now
        meta = restore_weights(manager, self.model, step)["meta"]
        self.graphdef, self.state = nnx.split((self.model, self.optimizer))
        return meta

    def learning_rate(self) -> float | None:
        return None if self.state is None else _learning_rate(self.state)

    def variables(self) -> Any:
        raise AttributeError("variables is for Linen trainers; an NNX model holds its own state")


def _held_layers(params: Any, masks: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """The values before the update of the stacked parameters trained in some layers only."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    if not masks:
        return {}
    flat = {".".join(map(str, k)): v for k, v in nnx.to_flat_state(params)}
    return {path: flat[path].get_value() for path in masks if path in flat}


def _keep_layers(model: Any, before: Mapping[str, jax.Array],
                 masks: Mapping[str, np.ndarray]) -> None:  # fmt: skip
    """Put back the layers a regular expression ``trainable=`` left out of a stacked parameter
    (``jaxfeed.train.freeze.trainable_layers``): only the selected layers change."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    if not before:
        return
    for path, var in nnx.iter_graph(model):
        name = ".".join(map(str, path))
        if isinstance(var, nnx.Variable) and name in before:
            new = var.get_value()
            keep = jnp.asarray(masks[name]).reshape((-1,) + (1,) * (new.ndim - 1))
            var.set_value(jnp.where(keep, new, before[name]))


# ---------------------------------------------------------------------------------- Linen
class LinenCore:
    """A Linen module, its ``params``, every other variable collection (``batch_stats`` and any
    other) and an optax state, as the article keeps them in a ``TrainState``. The dropout key is
    derived from ``(seed, step)``. Without ``example_input`` the variables are initialised from
    the first real batch (after ``preprocess``)."""

    api = "linen"

    def __init__(self, module: Any, tx: optax.GradientTransformation, spec: StepSpec,
                 example_input: Any = None) -> None:  # fmt: skip
        self.module, self.tx, self.spec = module, tx, spec
        self.model = module
        self.convention = CallConvention.inspect(type(module).__call__)
        self.state: Any = None
        convention, objective, metrics, inputs = (
            self.convention, spec.objective, spec.metrics, spec.inputs,
        )  # fmt: skip
        base_key, dtype = jax.random.key(spec.seed), spec.compute_dtype

        def apply(params, collections, batch, train, key=None):
            args, kwargs = inputs.call(cast_floats(batch, dtype))
            variables = {"params": cast_floats(params, dtype), **collections}
            kwargs.update(convention.kwargs(train))
            if train and collections:
                out, updates = module.apply(
                    variables, *args, **kwargs, rngs={"dropout": key}, mutable=list(collections)
                )
                collections = _restore_dtypes(
                    {k: updates.get(k, v) for k, v in collections.items()}, collections
                )
            else:
                rngs = {"dropout": key} if train else None
                out = module.apply(variables, *args, **kwargs, rngs=rngs)
            return cast_floats(out, jnp.float32 if dtype is not None else None), collections

        def train_step(state, sums, batch, n, step):
            batch = spec.preprocess(batch)
            key = dropout_key(spec.seed, step)

            def loss_fn(params):
                outputs, collections = apply(params, state["collections"], batch, True, key)
                mean, rows = masked_mean(objective, outputs, batch, n)
                return mean, (outputs, rows, collections)

            (mean, (outputs, rows, collections)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                state["params"]
            )
            updates, opt_state = tx.update(
                grads, state["opt_state"], state["params"], **_extra_args(tx, mean)
            )
            new = {
                "params": optax.apply_updates(state["params"], updates),
                "collections": collections,
                "opt_state": opt_state,
            }
            sums = add_sums(sums, objective, metrics, outputs, batch, rows, n, step)
            return new, ids.record(sums, spec.id_columns, batch, n, step)

        def eval_step(state, sums, batch, n):
            batch = spec.preprocess(batch)
            outputs, _ = apply(state["params"], state["collections"], batch, False)
            _, rows = masked_mean(objective, outputs, batch, n)
            sums = add_sums(sums, objective, metrics, outputs, batch, rows, n, -1)
            return ids.record(sums, spec.id_columns, batch, n, -1)

        def predict_step(state, batch):
            return apply(state["params"], state["collections"], spec.preprocess(batch), False)[0]

        def init(batch):
            args, kwargs = inputs.call(batch)
            k_params, k_dropout = jax.random.split(base_key)
            return module.init(
                {"params": k_params, "dropout": k_dropout}, *args, **kwargs,
                **convention.kwargs(False),
            )  # fmt: skip

        self._init = jax.jit(init)
        self._steps = (train_step, eval_step, predict_step)
        self.train_step, self.eval_step, self.predict_step = _jit_steps(*self._steps)
        if example_input is not None:
            self.initialize_from(example_input)

    @property
    def ready(self) -> bool:
        return self.state is not None

    def initialize(self, batch: Batch) -> None:
        if self.state is None:
            self._set_variables(self._init(self.spec.preprocess(batch)))

    def initialize_from(self, example_input: Any) -> None:
        """Initialise on ``example_input`` (the model's input as ``inputs=`` names it, after
        ``preprocess``, which does not see it)."""
        self._set_variables(self._init(self.spec.inputs.example(example_input)))

    def _set_variables(self, variables: Mapping[str, Any]) -> None:
        variables = dict(variables)
        params = variables.pop("params")
        self.state = {
            "params": params,
            "collections": variables,
            "opt_state": self.tx.init(params),
        }

    def variables(self) -> dict[str, Any]:
        if self.state is None:
            raise AttributeError(
                "the Linen variables are initialised from the first batch: train, evaluate or "
                "predict once first (or pass example_input=)"
            )
        return {"params": self.state["params"], **self.state["collections"]}

    def write_back(self) -> None:
        pass  # Linen modules hold no state: read ``trainer.variables``

    def checkpoint_state(self) -> Any:
        return self.state

    def checkpoint_meta(self, state: Any) -> dict[str, Any]:
        return {}  # a Linen trainer trains every parameter

    def restore(self, manager: Any, step: Any, shardings: Any = None) -> dict[str, Any]:
        target = self.state if shardings is None else abstract_like(self.state, shardings)
        restored = restore_linen(manager, step, target)  # either Linen checkpoint layout
        self.state = restored["state"]
        return restored["meta"]

    def restore_weights(self, manager: Any, step: Any) -> dict[str, Any]:
        if self.state is None:  # variables made from the first batch: restore the whole state
            return self.restore(manager, step)
        restored = restore_weights(manager, self.variables(), step)
        weights = dict(restored["weights"])
        self.state = {**self.state, "params": weights.pop("params"), "collections": weights}
        return restored["meta"]

    def leaves(self) -> list[Leaf]:
        from flax.core import meta  # noqa: PLC0415 (import cost: flax, only for Linen models)

        def annotation(box: Any) -> Any:
            return getattr(box, "names", None)

        return _annotated_leaves(self.state, lambda x: isinstance(x, meta.AxisMetadata), annotation)

    def compile(self, shardings: Any, sums: Any) -> None:
        self.train_step, self.eval_step, self.predict_step = _jit_steps(
            *self._steps, out_shardings=(shardings, sums)
        )

    def learning_rate(self) -> float | None:
        return None if self.state is None else _learning_rate(self.state["opt_state"])
