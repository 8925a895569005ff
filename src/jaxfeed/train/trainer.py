"""`Trainer`: fit, evaluate and predict with a Flax model on a jaxfeed loader.

The trainer is the loop: it asks a *core* (:mod:`jaxfeed.train.cores`, NNX or Linen) for compiled
steps, and :mod:`jaxfeed.train.placement` for batches on their devices; it reports, checks and
saves what the steps compute.

Long because ``Trainer`` is one class whose fit loop, evaluation, prediction and checkpointing
share its state; its steps, placement, losses and logs already live in modules of their own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from jaxfeed._base.files import atomic_write, check_writable
from jaxfeed.runtime.devices import backends_initialized
from jaxfeed.train.callbacks import Callback, overrides
from jaxfeed.train.checkpoint import CheckpointManager
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
from jaxfeed.train.freeze import enable_remat, resolve_precision, trainable_filter
from jaxfeed.train.history import History, plot_history
from jaxfeed.train.loggers import Logger, RunLog, check_loggers, make_loggers
from jaxfeed.train.losses import resolve_loss, resolve_metrics, resolve_split_metrics
from jaxfeed.train.placement import BatchPlacement, gather
from jaxfeed.train.preemption import Preempted, SignalWatch
from jaxfeed.train.schedule import EpochProgress, Schedule
from jaxfeed.train.sharding import (
    ShardingPlan,
    auto_mesh,
    bytes_per_device,
    data_axis,
    default_mesh,
)

REPORT_SECONDS = 0.5  # how often the progress bar reads metrics from the device


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; nothing of that state was written.

    The message names the global step and epoch where it first happened, whatever ``log_every``
    is: each step records it on the device, and the host reads it when it next reads metrics.

    >>> import numpy as np, optax
    >>> from flax import nnx
    >>> from jaxfeed import DataLoader, Dataset, Trainer
    >>> from jaxfeed.models import MLP
    >>> from jaxfeed.train import NonFiniteLossError
    >>> data = Dataset.from_dict({"x": np.full((8, 2), np.inf, np.float32), "label": [0, 1] * 4})
    >>> trainer = Trainer(MLP(2, (2,), hidden=(4,), rngs=nnx.Rngs(0)), optax.sgd(0.1), inputs="x", verbose=0)
    >>> try:
    ...     trainer.fit(DataLoader(data, 4), epochs=1)
    ... except NonFiniteLossError as err:
    ...     print(type(err).__name__)
    NonFiniteLossError
    """


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


class Trainer:
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
    on float32 master parameters. ``trainable="all" | "head" | <regex over parameter paths>``
    trains only those parameters (the others get no gradient and no optimizer state; see
    :mod:`jaxfeed.train.freeze`); ``remat=True`` recomputes each layer's activations in the
    backward pass (gradient checkpointing) in models whose layer stacks support it.

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
    :mod:`jaxfeed.train.sharding`. JAX's SPMD partitioner compiles the step for that layout.
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
        remat: bool = False,
        out_dir: str | os.PathLike | None = None,
        loggers: Sequence[str | Logger] = (),
        handle_signals: bool = True,
        mesh: jax.sharding.Mesh | None = None,
        sharding: str | Mapping[str, Any] = "replicate",
    ) -> None:
        tx = as_transformation(optimizer)
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
                    stacklevel=2,
                )
        self.mesh, self.sharding = mesh, plan.describe()
        precision = resolve_precision(precision, dtype)
        if (trainable != "all" or remat) and _is_linen(model):
            raise ValueError("trainable= and remat= apply to NNX models, not Linen modules")
        if remat:
            enable_remat(model)
        if deterministic:
            _require_deterministic_backend()
        objective = resolve_loss(loss, targets)
        targets = objective.targets or targets  # next_token: "input_ids" unless named
        spec = StepSpec(
            objective=objective,
            metrics=resolve_metrics(metrics, objective, targets),
            preprocess=preprocess or (lambda batch: batch),
            inputs=Inputs(inputs),
            seed=int(seed),
            compute_dtype=PRECISIONS[precision],
            trainable=None if trainable == "all" else trainable_filter(model, trainable),
        )
        self.trainable, self.remat = trainable, bool(remat)
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
        self.history = History()
        self.step = 0  # global training step
        self.epoch = 0  # completed epochs
        self.stop_training = False
        self._warned_unlabelled = False
        self.input_spec: Any = None  # (args, kwargs) shapes the model is called with, for export
        self.batch_spec: dict[str, Any] | None = None  # the raw batch's columns, for export
        self.loggers = tuple(loggers)
        check_loggers(self.loggers, self.out_dir)
        self.handle_signals = handle_signals
        self.resume_hint: str | None = (
            None  # how to resume, printed on preemption (the CLI sets it)
        )
        self._progress: EpochProgress | None = None  # the epoch in progress
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
            sums = {k: jnp.asarray(saved.get(k, 0), v.dtype) for k, v in sums.items()}
        return self.placement.replicate(sums)

    def snapshot(self) -> Any:
        """A copy of the training state (model and optimizer), kept on its devices."""
        return jax.tree.map(jnp.copy, self.core.state)

    def load_snapshot(self, snapshot: Any) -> None:
        """Put a :meth:`snapshot` back (into the model objects too)."""
        self.core.state = jax.tree.map(jnp.copy, snapshot)
        self.core.write_back()

    def _ensure_ready(self, loader: Iterable) -> None:
        """Initialise a lazily built model from the loader's first batch (before a restore)."""
        if not self.core.ready:
            for batch in loader:
                self._batch(batch, "train")
                break

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        train_loader: Iterable,
        eval_loader: Iterable | None = None,
        epochs: int | None = None,
        *,
        max_steps: int | None = None,
        eval_every: int | None = None,
        checkpoint_every: int | None = None,
        log_every: int | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        checkpoint_options: dict[str, Any] | None = None,
    ) -> History:
        """Train until ``epochs`` epochs and/or ``max_steps`` optimizer steps are done **in total**,
        evaluating after each epoch.

        ``epochs`` and ``max_steps`` count everything this trainer has trained, over all ``fit``
        calls and a resumed checkpoint: ``fit(epochs=2)`` then ``fit(epochs=5)`` trains 5 epochs.
        Without ``max_steps``, ``epochs`` defaults to 1; with it, to no limit (training stops at
        whichever limit comes first). A call that would train nothing raises ``ValueError`` (with
        ``resume=True`` it only warns: the run is already complete).

        Step schedule (counted in optimizer steps, ``trainer.step``): every ``log_every`` steps a
        row of the training loss and metrics averaged since the previous row, the learning rate
        (``optax.inject_hyperparams``), rows/s and wall time goes to ``metrics.jsonl`` and the
        loggers; every ``eval_every`` steps an eval row; every ``checkpoint_every`` steps a
        checkpoint, saved in the background.

        Training that stops inside an epoch (``max_steps``, ``stop_training``) evaluates its last
        state on ``eval_loader`` (an ``eval`` row) and, with ``checkpoint_dir``, saves it with
        those figures and the epoch's training metrics so far, so it is ranked with the epochs'
        checkpoints; ``history`` keeps whole epochs. With ``checkpoint_dir`` a checkpoint is also saved after every epoch
        and where training ends mid-epoch (see :class:`jaxfeed.train.checkpoint.CheckpointManager`;
        ``checkpoint_options`` are its arguments); with ``resume=True`` training continues from
        the latest one there (same step, next batch, RNG and optimizer state, the epoch's
        metrics so far), on any number of processes and devices, or starts fresh when there is
        none. SIGTERM or SIGINT during fit finish the step, save a checkpoint (with a
        ``checkpoint_dir``), print how to resume and raise
        :class:`~jaxfeed.train.preemption.Preempted`, a ``SystemExit`` (the process exits 143 or
        130); ``handle_signals=False`` leaves signals alone. Returns the :class:`History`; with
        ``out_dir`` also writes ``metrics.jsonl``, ``history.csv`` and ``curves.png``.
        """
        schedule = Schedule.make(epochs, max_steps, eval_every, checkpoint_every, log_every)
        if checkpoint_every is not None and checkpoint_dir is None:
            raise ValueError("checkpoint_every= needs checkpoint_dir=")
        if eval_every is not None and eval_loader is None:
            raise ValueError("eval_every= needs an eval_loader")
        if self.out_dir is not None and self.primary:
            check_writable(self.out_dir, "output folder")
        manager = None
        if checkpoint_dir is not None:
            manager = CheckpointManager(checkpoint_dir, **(checkpoint_options or {}))
            if resume and manager.latest_step is not None:
                self.restore_checkpoint(manager, "latest", train_loader)
            elif manager.latest_step is not None and manager.latest_step != self.step:
                # another run's steps (or this trainer's future ones): writing would mix the runs
                found = manager.latest_step
                manager.close()
                raise FileExistsError(
                    f"checkpoint_dir {manager.directory} holds checkpoints of another run (up "
                    f"to step {found}; this trainer is at step {self.step}); pass resume=True "
                    "to continue that run, or choose an empty checkpoint_dir"
                )
        elif resume:
            raise ValueError("resume=True needs checkpoint_dir=")
        if schedule.finished(self.step, self.epoch):
            message = (
                f"fit(epochs={epochs}) trains nothing: this trainer has already trained {self.epoch} "
                f"epochs, and epochs counts in total; pass epochs={self.epoch + 1} or more to continue"
                if schedule.epochs is not None and self.epoch >= schedule.epochs
                else f"fit(max_steps={max_steps}) trains nothing: this trainer has already trained "
                f"{self.step} steps, and max_steps counts in total"
            )
            if manager is not None:
                manager.close()
            if not resume:
                raise ValueError(message)
            warnings.warn(message, stacklevel=2)
            return self.history
        self.stop_training = False
        if manager is not None:
            manager.begin_writing()  # refuses a directory another live run writes
        run_log = RunLog(
            self.out_dir if self.primary else None,
            make_loggers(self.loggers, self.out_dir, resume_step=self.step or None)
            if self.primary
            else [],
        )
        run_log.start(self.step)
        watch = SignalWatch() if self.handle_signals else None
        try:
            with watch or contextlib.nullcontext():
                self._fit_epochs(train_loader, eval_loader, schedule, manager, run_log, watch)
        finally:
            run_log.close()
            if manager is not None:
                manager.close()
        self.core.write_back()
        for cb in self.callbacks:
            cb.on_fit_end(self)
        if self.out_dir is not None and self.history and self.primary:
            plot_history(self.history, self.out_dir / "curves.png")
        return self.history

    def _fit_epochs(
        self,
        train_loader: Iterable,
        eval_loader: Iterable | None,
        schedule: Schedule,
        manager: Any,
        run_log: RunLog,
        watch: SignalWatch | None,
    ) -> None:
        for cb in self.callbacks:
            cb.on_fit_start(self)
        epochs = schedule.epochs
        while not schedule.finished(self.step, self.epoch) and not self.stop_training:
            logs = self._train_epoch(
                train_loader, eval_loader, self.epoch + 1, schedule, manager, run_log, watch
            )
            if logs is None:  # stopped mid-epoch: max_steps, or a callback's stop_training
                stopped = self._stop_mid_epoch(eval_loader, run_log)
                if manager is not None and manager.latest_step != self.step:
                    self.save_checkpoint(manager, train_loader, stopped)
                break
            if eval_loader is not None:
                result = self.evaluate(eval_loader)
                logs.update({f"eval_{k}": v for k, v in result.items()})
            self.epoch += 1
            self._progress = None
            self.history.append(logs)
            self._report_epoch(logs, epochs)
            for cb in self.callbacks:
                cb.on_epoch_end(self, logs)
            memory = self.state_bytes_per_device()  # as the state is laid out
            run_log.write({**logs, "step": self.step, "state_bytes_per_device": memory}, "epoch")
            if self.out_dir is not None and self.primary:
                atomic_write(self.out_dir / "history.csv", self.history.to_csv())
            if manager is not None and (
                self.epoch % manager.save_every_epochs == 0
                or schedule.due("checkpoint_every", self.step)
            ):
                self.save_checkpoint(manager, train_loader, logs)
            if watch is not None and watch.should_stop(self.step, boundary=True):
                self._preempt(watch, manager, train_loader)
        if manager is not None and self.step and manager.latest_step != self.step:
            self._check_progress()
            self.save_checkpoint(manager, train_loader)  # ended mid-epoch: resumable from here

    def _stop_mid_epoch(self, eval_loader: Iterable | None, run_log: RunLog) -> dict[str, Any]:
        """The figures of a fit that stops inside an epoch (``max_steps``, ``stop_training``):
        the epoch's training metrics so far and, with an eval loader, the last state evaluated
        (an ``eval`` row; reused when ``eval_every`` fell on this step). They go with the last
        checkpoint, so that a run shorter than an epoch still has a state to select and export;
        ``history`` keeps completed epochs only."""
        progress = self._progress
        metrics: dict[str, Any] = {}
        if progress is not None and progress.sums is not None:
            host = self._check(progress.sums, progress.epoch, progress.first_step)
            metrics.update({f"train_{k}": v for k, v in host.items()})
        if eval_loader is not None:
            step, result = self._last_eval
            if step != self.step:
                result = self.evaluate(eval_loader)
                row = {"step": self.step, "epoch": self.epoch + 1}
                row.update({f"eval_{k}": v for k, v in result.items()})
                row["wall_time"] = round(time.time(), 3)
                run_log.write(row, "eval")
            metrics.update({f"eval_{k}": v for k, v in result.items()})
        return metrics

    def _train_epoch(
        self,
        loader: Iterable,
        eval_loader: Iterable | None,
        epoch: int,
        schedule: Schedule,
        manager: Any,
        run_log: RunLog,
        watch: SignalWatch | None,
    ) -> dict[str, Any] | None:
        """One epoch (or the rest of a resumed one); None when training stops mid-epoch."""
        progress = self._progress
        if progress is None or progress.epoch != epoch:
            progress = self._progress = EpochProgress(epoch, first_step=self.step)
        else:  # resumed or continued mid-epoch: the clock and the window restart here
            progress.started = progress.window_time = time.perf_counter()
            if progress.loader_state is not None:  # a later fit continues the same epoch
                loader.load_state_dict(progress.loader_state)
        progress.loader_state = None
        start = progress.started
        bar = self._progress_bar(loader, epoch, schedule.epochs)
        last_report = start
        per_batch = [cb for cb in self.callbacks if overrides(cb, "on_train_batch_end")]
        hooks = schedule.per_step or bool(per_batch) or watch is not None
        progress.iterator = iterator = iter(loader)
        try:
            while True:
                before = time.perf_counter()
                batch = next(iterator, None)
                progress.waited += time.perf_counter() - before
                if batch is None:
                    break
                arrays, n = self._batch(batch, "train")
                if progress.sums is None:
                    progress.sums = self._sums(progress.saved_sums)
                    progress.window_sums = progress.saved_sums
                self.core.state, progress.sums = self.core.train_step(
                    self.core.state, progress.sums, arrays, np.int32(n), np.int32(self.step)
                )
                self.step += 1
                progress.rows += n
                if bar is not None:
                    bar.update(1)
                    now = time.perf_counter()
                    if now - last_report > REPORT_SECONDS:
                        last_report = now
                        host = self._check(progress.sums, epoch, progress.first_step)
                        bar.set_postfix(self._postfix(host, progress.rows, progress.seconds()))
                if hooks and self._after_step(
                    progress, loader, eval_loader, schedule, manager, run_log, watch, per_batch
                ):
                    if hasattr(loader, "state_dict"):
                        progress.loader_state = loader.state_dict()
                    return None
        finally:
            if bar is not None:
                bar.close()
            progress.iterator = None
        sums, rows, waited = progress.sums, progress.rows, progress.waited
        if sums is None:
            raise ValueError("the train loader yielded no batches")
        host = self._check(sums, epoch, progress.first_step)
        seconds = progress.seconds()
        if bar is not None:
            bar.set_postfix(self._postfix(host, rows, seconds))
        logs: dict[str, Any] = {"epoch": epoch}
        logs.update({f"train_{k}": v for k, v in host.items()})
        learning_rate = self.core.learning_rate()
        if learning_rate is not None:
            logs["learning_rate"] = learning_rate
        logs["seconds"] = round(seconds, 4)
        logs["rows_per_second"] = round(rows / seconds, 1)
        logs["data_wait"] = round(
            waited / seconds, 4
        )  # share of the epoch spent waiting for batches
        return logs

    def _check(
        self, sums: dict[str, jax.Array], epoch: int | None, first_step: int = 0
    ) -> dict[str, float]:
        """Host values of the sums: mean loss and metrics; raises on impossible labels and on a
        non-finite training loss."""
        return self._means(self._host_sums(sums, epoch, first_step))

    def _host_sums(
        self, sums: dict[str, jax.Array], epoch: int | None, first_step: int = 0
    ) -> dict[str, Any]:
        """The sums on the host, checked: raises on impossible labels and on a non-finite
        training loss."""
        host = jax.device_get(sums)
        where = "in the eval data" if epoch is None else f"at epoch {epoch}"
        if int(host["bad_label_step"]) >= 0:
            step = int(host["bad_label_step"])
            if epoch is not None:
                where += f", step {step - first_step + 1} of the epoch"
            classes = int(host["classes"])
            raise ValueError(
                f"label {int(host['bad_label'])} {where} is outside the model's {classes} classes "
                f"(0..{classes - 1}; -1 means no label) in column {self.targets!r}"
            )
        bad = int(host["first_bad"])
        if epoch is not None and bad >= 0:
            raise NonFiniteLossError(
                f"the training loss is not finite at epoch {epoch}, step {bad - first_step + 1} of the "
                f"epoch (global step {bad + 1}); training stopped and this state was not written anywhere"
            )
        unlabelled = int(host["unlabelled"])
        if unlabelled and not self._warned_unlabelled:
            self._warned_unlabelled = True
            warnings.warn(
                f"{unlabelled} rows {where} have label -1 (no label) in column {self.targets!r}: "
                "they are left out of the loss and the metrics",
                stacklevel=3,
            )
        return host

    def _means(self, host: Mapping[str, Any]) -> dict[str, float]:
        count = float(host["count"])
        count = count if count > 0 else 1.0
        out = {"loss": float(host["loss"]) / count}
        for name, fn in self.core.spec.metrics.items():
            value = float(host[f"m_{name}"]) / count
            finalize = getattr(fn, "finalize", None)  # e.g. perplexity: exp of the mean loss
            out[name] = finalize(value) if finalize is not None else value
        return out

    def _check_progress(self) -> None:
        """Refuse to save a state whose epoch so far saw a non-finite loss."""
        p = self._progress
        if p is not None and p.sums is not None:
            self._host_sums(p.sums, p.epoch, p.first_step)

    # ------------------------------------------------------------------ between steps
    def _after_step(
        self,
        progress: EpochProgress,
        loader: Iterable,
        eval_loader: Iterable | None,
        schedule: Schedule,
        manager: Any,
        run_log: RunLog,
        watch: SignalWatch | None,
        per_batch: list[Callback],
    ) -> bool:
        """Logs, evaluations, checkpoints and signals after a step; True to stop mid-epoch.
        Evaluations, checkpoints and signals falling on an epoch's last step wait for its end."""
        step = self.step
        last = progress.batches_left() == 0
        logs: dict[str, Any] = {"step": step, "epoch": progress.epoch}
        if schedule.due("log_every", step):
            row = self._step_row(progress)
            run_log.write(row, "train")
            logs.update(row)
        for cb in per_batch:
            cb.on_train_batch_end(self, step, logs)
        if last:
            return False
        stopping = self.stop_training or (
            schedule.max_steps is not None and step >= schedule.max_steps
        )
        if eval_loader is not None and schedule.due("eval_every", step):
            result = self.evaluate(eval_loader)
            self._last_eval = (step, result)
            row = {"step": step, "epoch": progress.epoch}
            row.update({f"eval_{k}": v for k, v in result.items()})
            row["wall_time"] = round(time.time(), 3)
            run_log.write(row, "eval")
        if manager is not None and schedule.due("checkpoint_every", step) and not stopping:
            self._check_progress()  # (a stop saves its own checkpoint, with its figures)
            self.save_checkpoint(manager, loader)
        if watch is not None and watch.should_stop(step):
            self._preempt(watch, manager, loader)
        return stopping

    def _step_row(self, progress: EpochProgress) -> dict[str, Any]:
        """Training loss and metrics averaged since the previous row (or the epoch start)."""
        host = self._host_sums(progress.sums, progress.epoch, progress.first_step)
        now = time.perf_counter()
        before = progress.window_sums or {}
        window = {k: host[k] - before.get(k, 0) for k in ("loss", "count", "rows")}
        window.update({k: v - before.get(k, 0) for k, v in host.items() if k.startswith("m_")})
        seconds = max(now - progress.window_time, 1e-9)
        progress.window_sums, progress.window_time = host, now
        row: dict[str, Any] = {"step": self.step, "epoch": progress.epoch}
        row.update({f"train_{k}": v for k, v in self._means(window).items()})
        learning_rate = self.core.learning_rate()
        if learning_rate is not None:
            row["learning_rate"] = learning_rate
        row["rows_per_second"] = round(float(window["rows"]) / seconds, 1)
        row["wall_time"] = round(time.time(), 3)
        return row

    def _preempt(self, watch: SignalWatch, manager: Any, loader: Iterable) -> None:
        """Save (when checkpointing), say how to resume, and raise :class:`Preempted`."""
        where = f"{signal.Signals(watch.signum).name}: stopped after step {self.step} ({self.epoch} epochs done)"
        if manager is not None:
            self._check_progress()
            if manager.latest_step != self.step:
                self.save_checkpoint(manager, loader)
            manager.wait()
            hint = self.resume_hint or "fit(..., checkpoint_dir=..., resume=True)"
            message = f"{where}; checkpoint saved in {manager.directory}; resume with: {hint}"
        else:
            message = f"{where}; nothing saved (fit had no checkpoint_dir)"
        if self.primary:
            print(message, file=sys.stderr, flush=True)
        raise Preempted(
            message,
            signum=watch.signum,
            step=self.step,
            epoch=self.epoch,
            checkpoint=None if manager is None else manager.directory,
        )

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(
        self, manager: Any, loader: Any = None, metrics: dict[str, Any] | None = None
    ) -> None:
        """Save the model, optimizer, step, epoch, history and ``loader``'s position as step ``self.step``."""
        progress = self._progress
        meta = {
            "epoch": self.epoch,
            "progress": None
            if progress is None or progress.sums is None
            else progress.to_meta(jax.device_get(progress.sums)),
            "loader": loader.state_dict() if hasattr(loader, "state_dict") else None,
            "history": list(self.history),
            "config": {
                "model": type(self.model).__name__,
                "api": self.core.api,
                "seed": self.seed,
                "inputs": self.inputs,
                "targets": self.targets,
                "processes": jax.process_count(),
            },
        }
        manager.save(self.step, self.core.checkpoint_state(), metrics=metrics or {}, meta=meta)

    def restore_checkpoint(
        self, manager: Any, step: int | str | None = "latest", loader: Any = None
    ) -> dict[str, Any]:
        """Load a checkpoint into this trainer (and ``loader``'s position); returns its metadata.

        The checkpoint may come from any number of processes and devices: the state is restored
        here and placed on this run's mesh by the next batch; the loader's position is global.
        """
        if loader is not None:
            self._ensure_ready(loader)
        meta = self.core.restore(manager, step, self._layout())
        self.step, self.epoch = int(meta["step"]), int(meta["epoch"])
        self.history = History(meta.get("history", []))
        progress = meta.get("progress")
        self._progress = EpochProgress.from_meta(progress) if progress else None
        self.placement.reset()
        if loader is not None and meta.get("loader") and hasattr(loader, "load_state_dict"):
            loader.load_state_dict(meta["loader"])
        return meta

    def _layout(self) -> Any:
        """The state's shardings on the mesh (a tree like the state), or None when it is
        replicated: a restore reads straight into them."""
        if not self.core.ready:
            return None
        shardings = self.placement.layout(self.core.leaves())
        if shardings is None:
            return None
        return jax.tree.unflatten(jax.tree.structure(self.core.state), shardings)

    # ------------------------------------------------------------------ evaluate and predict
    def evaluate(self, loader: Iterable) -> dict[str, float]:
        """Mean loss and metrics over every labelled example of ``loader`` (the model in eval
        mode); whole-split metrics (``f1``, ``auc``, ``r2``, ...) from the outputs of every
        labelled row."""
        sums = None
        outputs, targets = [], []
        for batch in loader:
            arrays, n = self._batch(batch, "eval")
            if sums is None:
                sums = self._sums()
            sums = self.core.eval_step(self.core.state, sums, arrays, np.int32(n))
            if self.split_metrics:
                predicted = self.core.predict_step(self.core.state, arrays)  # whole on the host:
                outputs.append(np.asarray(gather(predicted))[:n])  # every process calls it
                targets.append(np.asarray(gather(arrays[self.targets]))[:n])
        if sums is None:
            raise ValueError("the eval loader yielded no batches")
        result = self._check(sums, None)
        if self.split_metrics:
            result.update(self._split_metrics(np.concatenate(outputs), np.concatenate(targets)))
        return result

    def _split_metrics(self, outputs: np.ndarray, targets: np.ndarray) -> dict[str, float]:
        out = {}
        for name, metric in self.split_metrics.items():
            rows = targets >= 0 if metric.classification and targets.dtype.kind in "iu" else None
            out[name] = (
                metric(outputs, targets) if rows is None else metric(outputs[rows], targets[rows])
            )
        return out

    def predict(self, data: dict[str, Any] | Iterable) -> Any:
        """The model's outputs (eval mode) for one batch dict, or for every batch of a loader
        (concatenated)."""
        if isinstance(data, dict):
            arrays, n = self._batch(data, "predict")
            return _rows(self.core.predict_step(self.core.state, arrays), n)
        outputs = []
        for batch in data:
            arrays, n = self._batch(batch, "predict")
            outputs.append(_rows(self.core.predict_step(self.core.state, arrays), n))
        if not outputs:
            raise ValueError("the loader yielded no batches")
        return jax.tree.map(lambda *parts: jnp.concatenate(parts), *outputs)

    # ------------------------------------------------------------------ reporting
    def _interactive(self) -> bool:
        return self.verbose > 0 and sys.stdout.isatty()

    def _progress_bar(self, loader: Iterable, epoch: int, epochs: int | None) -> Any:
        if not self._interactive():
            return None

        total = len(loader) if hasattr(loader, "__len__") else None
        return tqdm(
            total=total,
            desc=f"epoch {epoch}/{epochs or '-'}",
            unit="batch",
            dynamic_ncols=True,
            leave=True,
        )

    def _postfix(self, host: dict[str, float], rows: int, seconds: float) -> dict[str, str]:
        shown = {k: f"{v:.4f}" for k, v in list(host.items())[:3]}
        shown["rows_s"] = f"{rows / max(seconds, 1e-9):,.0f}"
        return shown

    def _report_epoch(self, logs: dict[str, Any], epochs: int | None) -> None:
        if self.verbose <= 0:
            return
        parts = [f"epoch {logs['epoch']}/{epochs}" if epochs else f"epoch {logs['epoch']}"]
        for key, value in logs.items():
            if key.startswith(("train_", "eval_")) or key == "learning_rate":
                parts.append(
                    f"{key} {value:.4g}" if key == "learning_rate" else f"{key} {value:.4f}"
                )
        parts.append(f"{logs['seconds']:.2f} s, {logs['rows_per_second']:,.0f} rows/s")
        print("  ".join(parts), flush=True)


def _rows(outputs: Any, n: int) -> Any:
    return jax.tree.map(lambda x: x[:n], outputs)


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
