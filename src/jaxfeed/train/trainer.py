"""`Trainer`: fit, evaluate and predict with a Flax model on a jaxfeed loader."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfeed.files import check_writable
from jaxfeed.train.callbacks import Callback
from jaxfeed.train.history import History, plot_history
from jaxfeed.train.steps import LOSSES, LinenCore, NNXCore, empty_sums

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
    """Train a Flax NNX model (or, through :meth:`from_linen`, a Linen module) on jaxfeed loaders.

    The train step is compiled once (``jax.jit`` over the split NNX state, buffers donated). A
    short last batch is padded to the batch size and masked out of the loss, gradients and
    metrics, so it causes no recompilation. Losses and accuracy are averaged per example. Dropout
    keys come from ``(seed, step)``; BatchNorm uses batch statistics in training and running
    averages in evaluation. When the loader's batches are sharded over several devices the state
    is replicated over them and the step runs data-parallel.

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
        metrics: Sequence[str] = ("accuracy",),
        inputs: str = "image",
        targets: str = "label",
        preprocess: Callable | None = None,
        seed: int = 0,
        callbacks: Sequence[Callback] = (),
        verbose: int = 1,
        deterministic: bool = False,
        out_dir: str | os.PathLike | None = None,
        _core: Any = None,
    ) -> None:
        if isinstance(loss, str):
            if loss not in LOSSES:
                raise ValueError(
                    f"unknown loss {loss!r}; known: {sorted(LOSSES)} (or pass a function)"
                )
            loss = LOSSES[loss]
        unknown = set(metrics) - {"accuracy"}
        if unknown:
            raise ValueError(
                f"unknown metrics {sorted(unknown)}; known: ['accuracy'] (the loss is always reported)"
            )
        if not isinstance(optimizer, optax.GradientTransformation):
            raise TypeError(
                f"optimizer must be an optax.GradientTransformation, got {type(optimizer).__name__}"
            )
        if deterministic:
            _require_deterministic_backend()
        self.inputs, self.targets = inputs, targets
        self.metrics = tuple(metrics)
        self.seed = int(seed)
        self.callbacks = list(callbacks)
        self.primary = jax.process_index() == 0  # only process 0 prints and writes run files
        self.verbose = int(verbose) if self.primary else 0
        self.deterministic = deterministic
        self.out_dir = Path(out_dir) if out_dir is not None else None
        preprocess = preprocess or (lambda batch: batch)
        self.core = _core or NNXCore(model, optimizer, loss, preprocess, inputs, targets, self.seed)
        self.model = model
        self.history = History()
        self.step = 0  # global training step
        self.epoch = 0  # completed epochs
        self.stop_training = False
        self._batch_sizes: dict[str, int] = {}
        self._placed = False
        self._shardings: dict[str, Any] = {}
        self._pad_fns: dict[tuple[int, int], Callable] = {}
        self._auto_shardings: dict[Any, Any] = {}

    @classmethod
    def from_linen(
        cls,
        module: Any,
        optimizer: optax.GradientTransformation,
        example_input: Any,
        *,
        seed: int = 0,
        **kwargs: Any,
    ) -> Trainer:
        """A trainer for a Linen module called as ``module.apply(variables, x, train=...)``.

        Parameters are initialised from ``seed`` on ``example_input``; ``trainer.variables`` holds
        ``{"params", "batch_stats"}`` after training.
        """
        preprocess = kwargs.get("preprocess") or (lambda batch: batch)
        inputs = kwargs.get("inputs", "image")
        x = preprocess({inputs: jnp.asarray(example_input)})[inputs]
        variables = module.init(jax.random.key(seed), x, train=False)
        loss = kwargs.get("loss", "cross_entropy")
        loss_fn = LOSSES[loss] if isinstance(loss, str) and loss in LOSSES else loss
        core = LinenCore(
            module,
            variables,
            optimizer,
            loss_fn,
            preprocess,
            inputs,
            kwargs.get("targets", "label"),
            seed,
        )
        return cls(module, optimizer, seed=seed, _core=core, **kwargs)

    @property
    def variables(self) -> dict[str, Any]:
        """Linen only: the trained ``{"params", "batch_stats"}``."""
        if not isinstance(self.core, LinenCore):
            raise AttributeError(
                "variables is for Linen trainers; an NNX model holds its own state"
            )
        return {k: self.core.state[k] for k in ("params", "batch_stats") if self.core.state[k]}

    # ------------------------------------------------------------------ placement and padding
    def _arrays(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        """The batch's arrays, on meshes with Auto axes.

        ``jax.make_mesh`` now makes Explicit axes, whose shardings are part of array types: every
        reshape in a model would then need an ``out_sharding``. The step lets XLA propagate
        shardings instead, so batches on an Explicit mesh are re-wrapped (no copy) onto the same
        devices with Auto axes.
        """
        out = {}
        for key, value in batch.items():
            if not isinstance(value, jax.Array):
                continue
            sharding = value.sharding
            if isinstance(sharding, jax.sharding.NamedSharding) and _explicit(sharding.mesh):
                auto = self._auto_shardings.get(sharding)
                if auto is None:
                    mesh = sharding.mesh
                    auto_mesh = jax.sharding.Mesh(
                        mesh.devices,
                        mesh.axis_names,
                        axis_types=(jax.sharding.AxisType.Auto,) * len(mesh.axis_names),
                    )
                    auto = self._auto_shardings[sharding] = jax.sharding.NamedSharding(
                        auto_mesh, sharding.spec
                    )
                value = jax.device_put(value, auto)
            out[key] = value
        return out

    def _prepare(self, arrays: dict[str, jax.Array]) -> None:
        """On the first batch: remember its size and placement; replicate the state over its mesh."""
        if self.inputs not in arrays or self.targets not in arrays:
            raise KeyError(
                f"the batch needs the columns {self.inputs!r} (inputs=) and {self.targets!r} (targets=); "
                f"it has {sorted(arrays)}"
            )
        for key, value in arrays.items():
            self._shardings.setdefault(key, value.sharding)
        if not self._placed:
            sharding = arrays[self.inputs].sharding
            if isinstance(sharding, jax.sharding.NamedSharding) and sharding.num_devices > 1:
                replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
            else:
                replicated = next(iter(arrays[self.inputs].devices()))
            self.core.state = _replicate(self.core.state, replicated)
            self._sums_placement = replicated
            self._placed = True

    def _full(self, batch: dict[str, Any], role: str) -> tuple[dict[str, jax.Array], int]:
        """The batch padded to its loader's batch size (repeating its rows), and its real row count.

        ``role`` ("train", "eval", "predict") keeps one batch size per use: the first batch's.
        """
        arrays = self._arrays(batch)
        self._prepare(arrays)
        n = int(arrays[self.inputs].shape[0])
        size = self._batch_sizes.setdefault(role, n)
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

    def _sums(self) -> dict[str, jax.Array]:
        return _replicate(empty_sums(), self._sums_placement)

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
        """Train for ``epochs`` epochs in total (counting earlier ``fit`` calls), evaluating after each.

        With ``checkpoint_dir`` a checkpoint is saved after every epoch (see
        :class:`jaxfeed.checkpoint.CheckpointManager`; ``checkpoint_options`` are its arguments);
        with ``resume=True`` training continues from the latest one there (same epoch, next batch,
        RNG and optimizer state) up to ``epochs`` in total, or starts fresh when there is none.
        Returns the :class:`History`; with ``out_dir`` also writes ``metrics.jsonl``,
        ``history.csv`` and ``curves.png``.
        """
        if not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"epochs must be an int >= 0, got {epochs!r}")
        if self.out_dir is not None and self.primary:
            check_writable(self.out_dir, "output folder")
        manager = None
        if checkpoint_dir is not None:
            from jaxfeed.checkpoint import CheckpointManager

            manager = CheckpointManager(checkpoint_dir, **(checkpoint_options or {}))
            if resume and manager.latest_step is not None:
                self.restore_checkpoint(manager, "latest", train_loader)
        elif resume:
            raise ValueError("resume=True needs checkpoint_dir=")
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

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> Any:
        if isinstance(self.core, LinenCore):
            return self.core.state
        from jaxfeed.checkpoint import nnx_pure_state

        self.core.write_back()
        return nnx_pure_state(self.core.model, self.core.optimizer)

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
                "api": "linen" if isinstance(self.core, LinenCore) else "nnx",
                "seed": self.seed,
                "inputs": self.inputs,
                "targets": self.targets,
                "processes": jax.process_count(),
            },
        }
        manager.save(self.step, self._checkpoint_state(), metrics=metrics or {}, meta=meta)

    def restore_checkpoint(
        self, manager: Any, step: int | str | None = "latest", loader: Any = None
    ) -> dict[str, Any]:
        """Load a checkpoint into this trainer (and ``loader``'s position); returns its metadata."""
        from jaxfeed.checkpoint import CheckpointError

        saved = manager.meta(manager.resolve(step)).get("config", {}).get("processes", 1)
        if saved != jax.process_count():
            raise CheckpointError(
                f"{manager.directory} was written by a job of {saved} processes; resume it with {saved} "
                f"processes (this job has {jax.process_count()})"
            )
        if isinstance(self.core, LinenCore):
            restored = manager.restore(step, state=self.core.state)
            self.core.state = restored["state"]
        else:
            from flax import nnx

            restored = manager.restore(step, model=self.core.model, optimizer=self.core.optimizer)
            self.core.graphdef, self.core.state = nnx.split((self.core.model, self.core.optimizer))
        meta = restored["meta"]
        self.step, self.epoch = int(meta["step"]), int(meta["epoch"])
        self.history = History(meta.get("history", []))
        self._placed = False
        if loader is not None and meta.get("loader") and hasattr(loader, "load_state_dict"):
            loader.load_state_dict(meta["loader"])
        return meta

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
            arrays, n = self._full(batch, "train")
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
                    host = self._check(sums, epoch, first_step)
                    bar.set_postfix(
                        loss=f"{host['loss']:.4f}",
                        acc=f"{host['accuracy']:.4f}",
                        rows_s=f"{rows / (now - start):,.0f}",
                    )
        if sums is None:
            raise ValueError("the train loader yielded no batches")
        host = self._check(sums, epoch, first_step)
        seconds = time.perf_counter() - start
        if bar is not None:
            bar.set_postfix(
                loss=f"{host['loss']:.4f}",
                acc=f"{host['accuracy']:.4f}",
                rows_s=f"{rows / seconds:,.0f}",
            )
            bar.close()
        logs = {"epoch": epoch, "train_loss": host["loss"]}
        if "accuracy" in self.metrics:
            logs["train_accuracy"] = host["accuracy"]
        logs.update(
            {
                "seconds": round(seconds, 4),
                "rows_per_second": round(rows / seconds, 1),
                "data_wait": round(
                    waited / seconds, 4
                ),  # share of the epoch spent waiting for batches
            }
        )
        return logs

    def _check(self, sums: dict[str, jax.Array], epoch: int, first_step: int) -> dict[str, float]:
        host = jax.device_get(sums)
        bad = int(host["first_bad"])
        if bad >= 0:
            raise NonFiniteLossError(
                f"the training loss is not finite at epoch {epoch}, step {bad - first_step + 1} of the "
                f"epoch (global step {bad + 1}); training stopped and this state was not written anywhere"
            )
        count = max(int(host["count"]), 1)
        return {"loss": float(host["loss"]) / count, "accuracy": float(host["correct"]) / count}

    # ------------------------------------------------------------------ evaluate and predict
    def evaluate(self, loader: Iterable) -> dict[str, float]:
        """Mean loss and accuracy over every example of ``loader`` (the model in eval mode)."""
        sums = None
        for batch in loader:
            arrays, n = self._full(batch, "eval")
            if sums is None:
                sums = self._sums()
            sums = self.core.eval_step(self.core.state, sums, arrays, np.int32(n))
        if sums is None:
            raise ValueError("the eval loader yielded no batches")
        host = jax.device_get(sums)
        count = max(int(host["count"]), 1)
        out = {"loss": float(host["loss"]) / count}
        if "accuracy" in self.metrics:
            out["accuracy"] = float(host["correct"]) / count
        return out

    def predict(self, data: dict[str, Any] | Iterable) -> jax.Array:
        """Logits for one batch dict, or for every batch of a loader (concatenated)."""
        if isinstance(data, dict):
            arrays, n = self._full(data, "predict")
            return self.core.predict_step(self.core.state, arrays)[:n]
        outputs = []
        for batch in data:
            arrays, n = self._full(batch, "predict")
            outputs.append(self.core.predict_step(self.core.state, arrays)[:n])
        if not outputs:
            raise ValueError("the loader yielded no batches")
        return jnp.concatenate(outputs)

    # ------------------------------------------------------------------ reporting
    def _interactive(self) -> bool:
        return self.verbose > 0 and sys.stdout.isatty()

    def _progress(self, loader: Iterable, epoch: int, epochs: int) -> Any:
        if not self._interactive():
            return None
        from tqdm.auto import tqdm

        total = len(loader) if hasattr(loader, "__len__") else None
        return tqdm(
            total=total,
            desc=f"epoch {epoch}/{epochs}",
            unit="batch",
            dynamic_ncols=True,
            leave=True,
        )

    def _report_epoch(self, logs: dict[str, Any], epochs: int) -> None:
        if self.verbose <= 0:
            return
        parts = [f"epoch {logs['epoch']}/{epochs}"]
        for key in ("train_loss", "train_accuracy", "eval_loss", "eval_accuracy"):
            if key in logs:
                parts.append(f"{key} {logs[key]:.4f}")
        parts.append(f"{logs['seconds']:.2f} s, {logs['rows_per_second']:,.0f} rows/s")
        print("  ".join(parts), flush=True)


def _replicate(tree: Any, placement: Any) -> Any:
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
