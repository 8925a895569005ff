"""`Trainer`: fit, evaluate and predict with a Flax model on a jaxfeed loader.

The trainer is the loop: it asks a *core* (:mod:`jaxfeed.train.cores`, NNX or Linen) for compiled
steps, and :mod:`jaxfeed.train.placement` for batches on their devices; it reports, checks and
saves what the steps compute.
"""

from __future__ import annotations

import os
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

from jaxfeed.files import check_writable
from jaxfeed.train.callbacks import Callback
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
from jaxfeed.train.history import History, plot_history
from jaxfeed.train.losses import resolve_loss, resolve_metrics
from jaxfeed.train.placement import BatchPlacement

REPORT_SECONDS = 0.5  # how often the progress bar reads metrics from the device


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; nothing of that state was written."""


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
    ``"binary_cross_entropy"``, ``"mse"``, ``"mae"``, ``"huber"``) or ``loss(outputs, batch)``
    returning per-example values; ``metrics`` are names (``"accuracy"``, ``"top5_accuracy"``,
    ``"mse"``, ``"mae"``), functions ``(outputs, batch) -> per-example values`` or a
    ``{name: function}`` dict; by default accuracy for classification losses and nothing else
    for regression. ``optimizer`` is any optax transformation (``optax.MultiSteps`` too);
    transformations taking extra arguments get ``value=`` the loss (``reduce_on_plateau``), and
    an ``inject_hyperparams`` learning rate is logged as ``learning_rate``.
    ``precision="bfloat16"`` runs forward and backward in bfloat16 on float32 parameters.

    The train step is compiled once (``jax.jit`` over the split state, buffers donated). A short
    last batch is padded to the batch size and masked out of the loss, gradients and metrics, so
    it causes no recompilation; so are rows whose class id is ``-1`` (no label). Losses and
    metrics are averaged per example. When the loader's batches are sharded over several devices
    the state is replicated over them and the step runs data-parallel.

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
        out_dir: str | os.PathLike | None = None,
    ) -> None:
        tx = as_transformation(optimizer)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        if deterministic:
            _require_deterministic_backend()
        objective = resolve_loss(loss, targets)
        spec = StepSpec(
            objective=objective,
            metrics=resolve_metrics(metrics, objective, targets),
            preprocess=preprocess or (lambda batch: batch),
            inputs=Inputs(inputs),
            seed=int(seed),
            compute_dtype=PRECISIONS[precision],
        )
        self.inputs, self.targets = inputs, targets
        self.metrics = tuple(spec.metrics)
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
        required = list(spec.inputs.columns)
        if targets is not None:
            required.append(targets)
            hints[targets] = "targets="
        self.placement = BatchPlacement(required, hints)
        self.history = History()
        self.step = 0  # global training step
        self.epoch = 0  # completed epochs
        self.stop_training = False
        self._warned_unlabelled = False

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
            self.placement.state_placement(arrays)
            self.core.state = self.placement.replicate(self.core.state)
        return arrays, n

    def _sums(self) -> dict[str, jax.Array]:
        return self.placement.replicate(empty_sums(self.metrics))

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
        epochs: int = 1,
        *,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        checkpoint_options: dict[str, Any] | None = None,
    ) -> History:
        """Train until ``epochs`` epochs are done **in total**, evaluating after each.

        ``epochs`` counts every epoch this trainer has trained, over all ``fit`` calls and a
        resumed checkpoint: ``fit(epochs=2)`` then ``fit(epochs=5)`` trains 5 epochs. A call that
        would train nothing raises ``ValueError`` (with ``resume=True`` it only warns: the run is
        already complete). With ``checkpoint_dir`` a checkpoint is saved after every epoch (see
        :class:`jaxfeed.checkpoint.CheckpointManager`; ``checkpoint_options`` are its arguments);
        with ``resume=True`` training continues from the latest one there (same epoch, next batch,
        RNG and optimizer state), or starts fresh when there is none. Returns the
        :class:`History`; with ``out_dir`` also writes ``metrics.jsonl``, ``history.csv`` and
        ``curves.png``.
        """
        if not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"epochs must be an int >= 0, got {epochs!r}")
        if self.out_dir is not None and self.primary:
            check_writable(self.out_dir, "output folder")
        manager = None
        if checkpoint_dir is not None:
            from jaxfeed.checkpoint import CheckpointManager  # orbax is heavy: only when asked

            manager = CheckpointManager(checkpoint_dir, **(checkpoint_options or {}))
            if resume and manager.latest_step is not None:
                self.restore_checkpoint(manager, "latest", train_loader)
        elif resume:
            raise ValueError("resume=True needs checkpoint_dir=")
        if self.epoch >= epochs:
            message = (
                f"fit(epochs={epochs}) trains nothing: this trainer has already trained {self.epoch} "
                f"epochs, and epochs counts in total; pass epochs={self.epoch + 1} or more to continue"
            )
            if manager is not None:
                manager.close()
            if not resume:
                raise ValueError(message)
            warnings.warn(message, stacklevel=2)
            return self.history
        self.stop_training = False
        try:
            self._fit_epochs(train_loader, eval_loader, epochs, manager)
        finally:
            if manager is not None:
                manager.close()
        self.core.write_back()
        for cb in self.callbacks:
            cb.on_fit_end(self)
        if self.out_dir is not None and self.history and self.primary:
            plot_history(self.history, self.out_dir / "curves.png")
        return self.history

    def _fit_epochs(
        self, train_loader: Iterable, eval_loader: Iterable | None, epochs: int, manager: Any
    ) -> None:
        for cb in self.callbacks:
            cb.on_fit_start(self)
        while self.epoch < epochs and not self.stop_training:
            logs = self._train_epoch(train_loader, self.epoch + 1, epochs)
            if eval_loader is not None:
                result = self.evaluate(eval_loader)
                logs.update({f"eval_{k}": v for k, v in result.items()})
            self.epoch += 1
            self.history.append(logs)
            self._report_epoch(logs, epochs)
            for cb in self.callbacks:
                cb.on_epoch_end(self, logs)
            if self.out_dir is not None and self.primary:
                self.history.save(self.out_dir)
            if manager is not None and self.epoch % manager.save_every_epochs == 0:
                self.save_checkpoint(manager, train_loader, logs)

    def _train_epoch(self, loader: Iterable, epoch: int, epochs: int) -> dict[str, Any]:
        start = time.perf_counter()
        sums = None
        bar = self._progress(loader, epoch, epochs)
        last_report, rows = start, 0
        first_step = self.step
        waited = 0.0
        iterator = iter(loader)
        while True:
            before = time.perf_counter()
            batch = next(iterator, None)
            waited += time.perf_counter() - before
            if batch is None:
                break
            arrays, n = self._batch(batch, "train")
            if sums is None:
                sums = self._sums()
            self.core.state, sums = self.core.train_step(
                self.core.state, sums, arrays, np.int32(n), np.int32(self.step)
            )
            self.step += 1
            rows += n
            if bar is not None:
                bar.update(1)
                now = time.perf_counter()
                if now - last_report > REPORT_SECONDS:
                    last_report = now
                    bar.set_postfix(
                        self._postfix(self._check(sums, epoch, first_step), rows, now - start)
                    )
        if sums is None:
            raise ValueError("the train loader yielded no batches")
        host = self._check(sums, epoch, first_step)
        seconds = time.perf_counter() - start
        if bar is not None:
            bar.set_postfix(self._postfix(host, rows, seconds))
            bar.close()
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
        count = max(float(host["count"]), 1.0)
        out = {"loss": float(host["loss"]) / count}
        out.update({name: float(host[f"m_{name}"]) / count for name in self.metrics})
        return out

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(
        self, manager: Any, loader: Any = None, metrics: dict[str, Any] | None = None
    ) -> None:
        """Save the model, optimizer, step, epoch, history and ``loader``'s position as step ``self.step``."""
        meta = {
            "epoch": self.epoch,
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
        """Load a checkpoint into this trainer (and ``loader``'s position); returns its metadata."""
        from jaxfeed.checkpoint import CheckpointError  # orbax is heavy: only when asked

        saved = manager.meta(manager.resolve(step)).get("config", {}).get("processes", 1)
        if saved != jax.process_count():
            raise CheckpointError(
                f"{manager.directory} was written by a job of {saved} processes; resume it with {saved} "
                f"processes (this job has {jax.process_count()})"
            )
        if loader is not None:
            self._ensure_ready(loader)
        meta = self.core.restore(manager, step)
        self.step, self.epoch = int(meta["step"]), int(meta["epoch"])
        self.history = History(meta.get("history", []))
        self.placement.reset()
        if loader is not None and meta.get("loader") and hasattr(loader, "load_state_dict"):
            loader.load_state_dict(meta["loader"])
        return meta

    # ------------------------------------------------------------------ evaluate and predict
    def evaluate(self, loader: Iterable) -> dict[str, float]:
        """Mean loss and metrics over every labelled example of ``loader`` (the model in eval mode)."""
        sums = None
        for batch in loader:
            arrays, n = self._batch(batch, "eval")
            if sums is None:
                sums = self._sums()
            sums = self.core.eval_step(self.core.state, sums, arrays, np.int32(n))
        if sums is None:
            raise ValueError("the eval loader yielded no batches")
        return self._check(sums, None)

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

    def _progress(self, loader: Iterable, epoch: int, epochs: int) -> Any:
        if not self._interactive():
            return None
        from tqdm.auto import tqdm  # only for terminals

        total = len(loader) if hasattr(loader, "__len__") else None
        return tqdm(
            total=total,
            desc=f"epoch {epoch}/{epochs}",
            unit="batch",
            dynamic_ncols=True,
            leave=True,
        )

    def _postfix(self, host: dict[str, float], rows: int, seconds: float) -> dict[str, str]:
        shown = {k: f"{v:.4f}" for k, v in list(host.items())[:3]}
        shown["rows_s"] = f"{rows / max(seconds, 1e-9):,.0f}"
        return shown

    def _report_epoch(self, logs: dict[str, Any], epochs: int) -> None:
        if self.verbose <= 0:
            return
        parts = [f"epoch {logs['epoch']}/{epochs}"]
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
    from flax import linen  # flax loads with the first trainer (start-up time)

    return isinstance(model, linen.Module)


def _require_deterministic_backend() -> None:
    """Bitwise-reproducible runs: XLA's CPU kernels are; GPU needs --xla_gpu_deterministic_ops."""
    flag = "--xla_gpu_deterministic_ops=true"
    if flag in os.environ.get("XLA_FLAGS", ""):
        return
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
        return
    if jax.default_backend() == "gpu":
        raise RuntimeError(
            "deterministic=True on GPU needs XLA_FLAGS=--xla_gpu_deterministic_ops=true set before JAX "
            "starts; JAX is already running here"
        )
