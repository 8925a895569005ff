"""Callbacks: hooks the trainer calls at the start and end of fit and after every epoch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxfeed.train.trainer import Trainer


class Callback:
    """Override any of the hooks; set ``trainer.stop_training = True`` to stop after this epoch."""

    def on_fit_start(self, trainer: Trainer) -> None:
        pass

    def on_epoch_end(self, trainer: Trainer, logs: dict[str, Any]) -> None:
        pass

    def on_fit_end(self, trainer: Trainer) -> None:
        pass


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` epochs.

    ``mode`` is "min", "max" or "auto" (min for losses, max otherwise).

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
        monitor: str = "eval_loss",
        patience: int = 3,
        min_delta: float = 0.0,
        mode: str = "auto",
    ) -> None:
        if mode not in ("min", "max", "auto"):
            raise ValueError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
        if patience < 0:
            raise ValueError(f"patience must be >= 0, got {patience}")
        self.monitor = monitor
        self.patience = patience
        self.min_delta = abs(min_delta)
        self.mode = ("min" if "loss" in monitor else "max") if mode == "auto" else mode
        self.best: float | None = None
        self.wait = 0
        self.stopped_epoch: int | None = None

    def on_fit_start(self, trainer: Trainer) -> None:
        self.best, self.wait, self.stopped_epoch = None, 0, None

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
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait > self.patience:
            trainer.stop_training = True
            self.stopped_epoch = logs.get("epoch")
