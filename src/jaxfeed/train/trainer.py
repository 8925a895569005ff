"""`Trainer`: fit, evaluate and predict with a Flax model on a jaxfeed loader.

The trainer is the loop: it asks a *core* (:mod:`jaxfeed.train.cores`, NNX or Linen) for compiled
steps, and :mod:`jaxfeed.train.placement` for batches on their devices; it reports, checks and
saves what the steps compute. This module builds it and holds its state; its jobs live beside it:
the fit loop in :mod:`~jaxfeed.train.fitting`, evaluation and prediction in
:mod:`~jaxfeed.train.evaluation`, checkpoints in :mod:`~jaxfeed.train.checkpointing`, the
figures' checks and reports in :mod:`~jaxfeed.train.reporting`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxfeed.runtime.devices import backends_initialized
from jaxfeed.runtime.sharding import (
    ShardingPlan,
    auto_mesh,
    bytes_per_device,
    data_axis,
    default_mesh,
)
from jaxfeed.train import ids
from jaxfeed.train.callbacks import Callback
from jaxfeed.train.checkpointing import CheckpointMixin
from jaxfeed.train.cores import (
    PRECISIONS,
    Core,
    Inputs,
    LinenCore,
    NNXCore,
    StepSpec,
    as_transformation,
    empty_sums,
)
from jaxfeed.train.evaluation import EvalMixin
from jaxfeed.train.fitting import FitMixin
from jaxfeed.train.freeze import (
    enable_remat,
    refuse_integer_params,
    resolve_precision,
    trainable_filter,
)
from jaxfeed.train.history import History
from jaxfeed.train.loggers import Logger, check_loggers
from jaxfeed.train.losses import resolve_loss, resolve_metrics, resolve_split_metrics
from jaxfeed.train.placement import BatchPlacement, gather
from jaxfeed.train.reporting import REPORT_SECONDS, NonFiniteLossError, ReportMixin
from jaxfeed.train.schedule import EpochProgress

__all__ = ["REPORT_SECONDS", "NonFiniteLossError", "Trainer", "scale_images"]


def scale_images(batch: dict[str, jax.Array], key: str = "image") -> dict[str, jax.Array]:
    """A ``preprocess`` for image classifiers: integer pixels to float32 in [0, 1].

    >>> import jax.numpy as jnp
    >>> scale_images({"image": jnp.array([0, 255], jnp.uint8)})["image"]
    Array([0., 1.], dtype=float32)
    """
    x = batch[key]
    if jnp.issubdtype(x.dtype, jnp.integer):
        x = x.astype(jnp.float32) / 255.0
    return {**batch, key: x}


class Trainer(FitMixin, EvalMixin, CheckpointMixin, ReportMixin):
    """Train a Flax NNX model (or a Linen module, see :meth:`from_linen`) on jaxfeed loaders.

    The model is called the way it is written: ``inputs=`` names the batch column(s) it takes (a
    name, a tuple of names for positional arguments, or ``{argument: column}``); ``rngs=`` is
    passed only when ``__call__`` accepts it, and a ``train`` / ``training`` / ``deterministic``
    keyword only when present (otherwise the module's own ``nnx.Rngs`` and ``model.train()`` /
    ``model.eval()`` decide). ``loss`` is a built-in name (``"cross_entropy"``,
    ``"binary_cross_entropy"``, ``"mse"``, ``"mae"``, ``"huber"``, ``"next_token"`` for causal
    language models) or ``loss(outputs, batch)`` returning per-example (or per-token) values;
    ``metrics`` are names (``"accuracy"``, ``"top5_accuracy"``, ``"mse"``, ``"mae"``,
    ``"perplexity"``, ``"token_accuracy"``), names of metrics over a whole eval split (``"f1"``, ``"precision"``,
    ``"recall"``, ``"auc"``, ``"r2"``, ``"rmse"``: :mod:`jaxfeed.train.metrics`, eval only),
    functions ``(outputs, batch) -> per-example values`` or a ``{name: function or SplitMetric}``
    dict; by default accuracy for classification losses and nothing else
    for regression. ``optimizer`` is any optax transformation (``optax.MultiSteps`` too);
    transformations taking extra arguments get ``value=`` the loss (``reduce_on_plateau``), and
    an ``inject_hyperparams`` learning rate is logged as ``learning_rate``.
    ``precision="bfloat16"`` (or ``dtype=jnp.bfloat16``) runs forward and backward in bfloat16
    on float32 master parameters. ``trainable="all" | "head" | "lora" | <regex over paths>``
    trains only those parameters (the others get no gradient and no optimizer state; see
    :mod:`jaxfeed.train.freeze`); ``remat=True`` recomputes each layer's activations in the
    backward pass (gradient checkpointing) in models whose layer stacks support it;
    ``remat="dots"`` keeps the weight matmuls' outputs and recomputes the rest;
    ``remat="attention"`` keeps those and the attention weights (norms, activations and dropout
    masks are recomputed).

    The train step is compiled once (``jax.jit`` over the split state, buffers donated). A short
    last batch is padded to the batch size and masked out of the loss, gradients and metrics, so
    it causes no recompilation; so are rows whose class id is ``-1`` (no label). Losses and
    metrics are averaged per example, or per real token for token losses (``"next_token"``, or a
    loss returning ``(batch, length)`` values), so a batch with more padding does not count less.
    When the loader's batches are sharded over several devices
    the state is replicated over them and the step runs data-parallel.

    Models bigger than one device: ``mesh`` is a ``jax.sharding.Mesh`` (any axis names; batches
    are split over its ``"data"`` axis, else its first; default: one ``"data"`` axis over every
    device) and ``sharding`` lays the state out on it: ``"replicate"`` (data parallel),
    ``"fsdp"`` (each array split over the data axis along its largest evenly dividing
    dimension), or a dict of logical axis rules for models annotated with
    ``nnx.with_partitioning`` (tensor parallelism; ``"fsdp": True`` in the dict adds FSDP); see
    :mod:`jaxfeed.runtime.sharding`. JAX's SPMD partitioner compiles the step for that layout.
    :meth:`state_bytes_per_device` says what each device holds.

    >>> import optax
    >>> from flax import nnx
    >>> from jaxfeed import DataLoader, Trainer, load_dataset
    >>> from jaxfeed.models import CNN
    >>> from jaxfeed.train import scale_images
    >>> digits = load_dataset("digits")
    >>> model = CNN(10, input_shape=(8, 8, 1), rngs=nnx.Rngs(0))
    >>> trainer = Trainer(model, optax.adamw(1e-3), preprocess=scale_images, verbose=0)
    >>> history = trainer.fit(DataLoader(digits["train"], 64, shuffle=True), epochs=1)
    >>> sorted(history[0])
    ['data_wait', 'epoch', 'rows_per_second', 'seconds', 'train_accuracy', 'train_loss']
    """

    def __init__(
        self,
        model: Any,
        optimizer: optax.GradientTransformation,
        *,
        loss: str | Callable = "cross_entropy",
        metrics: str | Sequence[Any] | Mapping[str, Callable] | None = None,
        inputs: str | tuple[str, ...] | Mapping[str, str] = "image",
        targets: str | None = "label",
        preprocess: Callable | None = None,
        seed: int = 0,
        callbacks: Sequence[Callback] = (),
        verbose: int = 1,
        deterministic: bool = False,
        precision: str = "float32",
        dtype: Any = None,
        trainable: str = "all",
        remat: bool | str = False,
        out_dir: str | os.PathLike | None = None,
        loggers: Sequence[str | Logger] = (),
        handle_signals: bool = True,
        mesh: jax.sharding.Mesh | None = None,
        sharding: str | Mapping[str, Any] = "replicate",
    ) -> None:
        tx = as_transformation(optimizer)
        mesh, plan = _mesh_and_plan(mesh, sharding)
        self.mesh, self.sharding = mesh, plan.describe()
        precision = resolve_precision(precision, dtype)
        if (trainable != "all" or remat) and _is_linen(model):
            raise ValueError("trainable= and remat= apply to NNX models, not Linen modules")
        if trainable == "all" and not _is_linen(model):
            refuse_integer_params(model)
        if remat:
            enable_remat(model, remat)
        if deterministic:
            _require_deterministic_backend()
        spec = _step_spec(
            model, loss, metrics, inputs, targets, preprocess, seed, precision, trainable
        )
        targets = spec.objective.targets or targets  # next_token: "input_ids" unless named
        self.trainable, self.remat = trainable, remat
        self.inputs, self.targets = inputs, targets
        self.metrics = tuple(spec.metrics)
        self.split_metrics = resolve_split_metrics(metrics)  # over a whole eval split, on the host
        if self.split_metrics and targets is None:
            raise ValueError(f"metrics {sorted(self.split_metrics)} need targets=")
        self.precision = precision
        self.seed = int(seed)
        self.callbacks = list(callbacks)
        self.primary = jax.process_index() == 0  # only process 0 prints and writes run files
        self.verbose = int(verbose) if self.primary else 0
        self.deterministic = deterministic
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.plot_curves = (
            True  # fit draws curves.png into out_dir (the command: in the background)
        )
        self.core: Core = (
            LinenCore(model, tx, spec) if _is_linen(model) else NNXCore(model, tx, spec)
        )
        self.model = model
        hints = {c: "inputs=" for c in spec.inputs.columns}
        if targets is not None:
            hints[targets] = "targets="
        self.placement = BatchPlacement(spec.inputs.columns, hints, targets, mesh=mesh, plan=plan)
        if self.core.ready:  # refuse a layout that cannot apply before anything compiles
            self.placement.layout(self.core.leaves())
        self.loggers = tuple(loggers)
        check_loggers(self.loggers, self.out_dir)
        self.handle_signals = handle_signals
        self._start_state()

    def _start_state(self) -> None:
        """What a new trainer has trained (nothing), and what its runs fill in later."""
        self.history = History()
        self.step = 0  # global training step
        self.epoch = 0  # completed epochs
        self.stop_training = False
        self._warned_unlabelled = False
        self.input_spec: Any = None  # (args, kwargs) shapes the model is called with, for export
        self.batch_spec: dict[str, Any] | None = None  # the raw batch's columns, for export
        self.resume_hint: str | None = (
            None  # how to resume, printed on preemption (the CLI sets it)
        )
        self._progress: EpochProgress | None = None  # the epoch in progress
        self._id_check: Callable | None = None  # predict's check of token ids, compiled once
        self._last_eval: tuple[int, dict[str, float]] = (
            -1,
            {},
        )  # eval_every's latest (step, result)

    @classmethod
    def from_linen(
        cls,
        module: Any,
        optimizer: optax.GradientTransformation,
        example_input: Any = None,
        **kwargs: Any,
    ) -> Trainer:
        """A trainer for a Linen module, called as ``module.apply(variables, *inputs, train=...)``
        (or ``training=`` / ``deterministic=``, or no flag), every variable collection carried.

        The variables are initialised from ``seed``: on ``example_input`` (the model's input as
        ``inputs=`` gives it, after ``preprocess``) when given, else on the first real batch.
        ``trainer.variables`` holds ``{"params", "batch_stats", ...}``.
        """
        trainer = cls(module, optimizer, **kwargs)
        if example_input is not None:
            trainer.core.initialize_from(example_input)
        return trainer

    @property
    def variables(self) -> dict[str, Any]:
        """Linen only: the trained ``{"params", **other collections}``."""
        return self.core.variables()

    # ------------------------------------------------------------------ batches
    def _batch(self, batch: dict[str, Any], role: str) -> tuple[dict[str, jax.Array], int]:
        """The batch on its devices, padded; the state initialised and placed on first use."""
        arrays, n = self.placement.batch(batch, role)
        if self.placement.placement is None:
            if not self.core.ready:
                self.core.initialize(arrays)
            spec = self.core.spec
            self.input_spec = jax.eval_shape(lambda b: spec.inputs.call(spec.preprocess(b)), arrays)
            self.batch_spec = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in arrays.items()}
            self.placement.state_placement(arrays)
            self.core.state, shardings = self.placement.place_state(
                self.core.state, self.core.leaves()
            )
            if shardings is not None:
                self.core.compile(shardings, self.placement.placement)
        return arrays, n

    def state_bytes_per_device(self) -> int:
        """Bytes of the model and optimizer state on the device holding the most of it, from
        the arrays' shardings (0 before the state exists).

        >>> import optax
        >>> from flax import nnx
        >>> from jaxfeed import Trainer
        >>> Trainer(nnx.Linear(4, 2, rngs=nnx.Rngs(0)), optax.sgd(0.1), verbose=0).state_bytes_per_device()
        44
        """
        return bytes_per_device(self.core.state) if self.core.ready else 0

    def gather(self) -> None:
        """Make every array of the state whole on each process's first device (a collective:
        every process calls it), e.g. before process 0 exports a state split over processes."""
        self.core.state = gather(self.core.state)
        self.core.write_back()
        self.placement.reset()

    def _sums(self, saved: Mapping[str, Any] | None = None) -> dict[str, jax.Array]:
        sums = empty_sums(self.metrics)
        if saved:  # an epoch resumed mid-way continues its totals
            sums = {k: jnp.asarray(saved.get(k, v), v.dtype) for k, v in sums.items()}
        return self.placement.replicate(sums)

    def snapshot(self) -> Any:
        """A copy of the training state (model and optimizer), kept on its devices."""
        return jax.tree.map(jnp.copy, self.core.state)

    def load_snapshot(self, snapshot: Any) -> None:
        """Put a :meth:`snapshot` back (into the model objects too)."""
        self.core.state = jax.tree.map(jnp.copy, snapshot)
        self.core.write_back()


def _is_linen(model: Any) -> bool:
    from flax import linen  # noqa: PLC0415 (import cost: flax, at the first trainer)

    return isinstance(model, linen.Module)


def _require_deterministic_backend() -> None:
    """Bitwise-reproducible runs: XLA's CPU kernels are; GPU needs --xla_gpu_deterministic_ops."""
    flag = "--xla_gpu_deterministic_ops=true"
    if flag in os.environ.get("XLA_FLAGS", ""):
        return
    if not backends_initialized():
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
        return
    if jax.default_backend() == "gpu":
        raise RuntimeError(
            "deterministic=True on GPU needs XLA_FLAGS=--xla_gpu_deterministic_ops=true set before JAX "
            "starts; JAX is already running here"
        )


def _mesh_and_plan(
    mesh: jax.sharding.Mesh | None, sharding: str | Mapping[str, Any]
) -> tuple[jax.sharding.Mesh | None, ShardingPlan]:
    """The Trainer's mesh (a default one when the plan shards) and its sharding plan, checked."""
    plan = ShardingPlan.parse(sharding)
    if mesh is not None and not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if mesh is None and not plan.replicated:
        mesh = default_mesh()
    mesh = None if mesh is None else auto_mesh(mesh)
    if mesh is not None:
        plan.check(mesh)
        if plan.fsdp and mesh.shape[data_axis(mesh)] == 1:
            warnings.warn(
                f"sharding={plan.describe()!r} on a mesh whose data axis {data_axis(mesh)!r} "
                "has one device: nothing is split over it (every array stays whole there)",
                stacklevel=3,  # the caller of Trainer(...)
            )
    return mesh, plan


def _step_spec(
    model: Any,
    loss: str | Callable,
    metrics: Any,
    inputs: str | tuple[str, ...] | Mapping[str, str],
    targets: str | None,
    preprocess: Callable | None,
    seed: int,
    precision: str,
    trainable: str,
) -> StepSpec:
    """What the compiled steps compute: the objective, metrics, preprocess, input columns, seed,
    compute dtype, trainable parameters and token-id columns."""
    objective = resolve_loss(loss, targets)
    targets = objective.targets or targets  # next_token: "input_ids" unless named
    columns = Inputs(inputs)
    return StepSpec(
        objective=objective,
        metrics=resolve_metrics(metrics, objective, targets),
        preprocess=preprocess or (lambda batch: batch),
        inputs=columns,
        seed=int(seed),
        compute_dtype=PRECISIONS[precision],
        trainable=None if trainable == "all" else trainable_filter(model, trainable),
        id_columns=ids.id_columns(model, columns.positional, columns.keywords),
    )
