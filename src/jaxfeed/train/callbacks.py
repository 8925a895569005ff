"""Callbacks: hooks the trainer calls at the start and end of fit, after steps and after epochs."""

from __future__ import annotations

import math
from typing import Any, Protocol

from jaxfeed.train.monitor import DEFAULT_MONITOR, monitor_mode


class Trainer(Protocol):
    """What callbacks see of :class:`jaxfeed.Trainer` (a protocol, so this module needs no
    import of the trainer, which imports it)."""

    stop_training: bool
    step: int
    epoch: int

    def snapshot(self) -> Any: ...

    def load_snapshot(self, snapshot: Any) -> None: ...


class Callback:
    """Override any of the hooks; set ``trainer.stop_training = True`` to stop (after the current
    step when set in ``on_train_batch_end``, after the epoch in ``on_epoch_end``).

    >>> import numpy as np, optax
    >>> from flax import nnx
    >>> from jaxfeed import DataLoader, Dataset, Trainer
    >>> from jaxfeed.models import MLP
    >>> from jaxfeed.train import Callback
    >>> class StopAt(Callback):
    ...     def on_train_batch_end(self, trainer, step, logs):
    ...         if step == 3:
    ...             trainer.stop_training = True
    >>> data = Dataset.from_dict({"x": np.ones((40, 2), np.float32), "label": [0, 1] * 20})
    >>> trainer = Trainer(MLP(2, (2,), hidden=(4,), rngs=nnx.Rngs(0)), optax.sgd(0.1), inputs="x",
    ...                   callbacks=[StopAt()], verbose=0)
    >>> _ = trainer.fit(DataLoader(data, 4), epochs=1)
    >>> trainer.step
    3
    """

    def on_fit_start(self, trainer: Trainer) -> None:
        pass

    def on_train_batch_end(self, trainer: Trainer, step: int, logs: dict[str, Any]) -> None:
        """After optimizer step ``step`` (the global step, counted from 1).

        ``logs`` holds ``step`` and ``epoch``; at the steps that write a metrics row (every
        ``log_every``) it also holds that row (``train_loss``, ``learning_rate``, ...). Reading
        the device every step would stall the pipeline, so other steps carry no metrics.
        """

    def on_epoch_end(self, trainer: Trainer, logs: dict[str, Any]) -> None:
        pass

    def on_fit_end(self, trainer: Trainer) -> None:
        pass


def overrides(callback: Callback, hook: str) -> bool:
    """Whether ``callback`` implements ``hook`` (the trainer skips hooks nobody implements)."""
    return getattr(type(callback), hook, None) is not getattr(Callback, hook)


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` epochs.

    ``mode`` is "min", "max" or "auto" (the rule of :mod:`jaxfeed.train.monitor`: min for losses
    and errors, max otherwise). With
    ``restore_best_weights=True`` the model holds the best epoch's weights when fit returns,
    whether it stopped early or ran to the end (a copy of the state is kept on the device).

    >>> stop = EarlyStopping("eval_loss", patience=1)
    >>> class T:
    ...     stop_training = False
    >>> t = T()
    >>> for loss in (1.0, 0.9, 0.95, 0.96):
    ...     stop.on_epoch_end(t, {"eval_loss": loss})
    >>> t.stop_training, stop.best
    (True, 0.9)
    """

    def __init__(
        self,
        monitor: str = DEFAULT_MONITOR,
        patience: int = 3,
        min_delta: float = 0.0,
        mode: str = "auto",
        *,
        restore_best_weights: bool = False,
    ) -> None:
        if patience < 0:
            raise ValueError(f"patience must be >= 0, got {patience}")
        self.monitor = monitor
        self.patience = patience
        self.min_delta = abs(min_delta)
        self.mode = monitor_mode(monitor, mode)
        self.restore_best_weights = restore_best_weights
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.wait = 0
        self.stopped_epoch: int | None = None
        self._best_state: Any = None

    def on_fit_start(self, trainer: Trainer) -> None:
        self.best, self.best_epoch, self.wait, self.stopped_epoch = None, None, 0, None
        self._best_state = None

    def on_epoch_end(self, trainer: Trainer, logs: dict[str, Any]) -> None:
        if self.monitor not in logs:
            raise KeyError(
                f"EarlyStopping monitors {self.monitor!r}, which is not among the epoch's metrics {sorted(logs)}"
            )
        value = float(logs[self.monitor])
        better = (
            self.best is None
            or (self.mode == "min" and value < self.best - self.min_delta)
            or (self.mode == "max" and value > self.best + self.min_delta)
        )
        if better and not math.isnan(value):
            self.best, self.best_epoch, self.wait = value, logs.get("epoch"), 0
            if self.restore_best_weights:
                self._best_state = trainer.snapshot()
            return
        self.wait += 1
        if self.wait > self.patience:
            trainer.stop_training = True
            self.stopped_epoch = logs.get("epoch")

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.restore_best_weights and self._best_state is not None:
            if self.best_epoch != trainer.epoch:
                trainer.load_snapshot(self._best_state)
            self._best_state = None
