"""Which epoch or checkpoint is best: one rule for the Trainer, its callbacks, the checkpoint
manager and the command (a module of its own: the checkpoint manager and the trainer import it).

A *monitor* is a metric name as the history records it (``eval_loss``, ``eval_accuracy``,
``eval_f1``, ...). Its direction is ``min`` for losses and errors (names containing ``loss``, or
ending in ``mse``, ``mae``, ``rmse``, ``error`` or ``huber``) and ``max`` for everything else
(accuracy, F1, precision, recall, AUC, R²), unless given. Ties go to the earliest. The default
monitor of :class:`~jaxfeed.train.checkpoint.CheckpointManager`, :meth:`History.best
<jaxfeed.train.History.best>`, :class:`~jaxfeed.train.EarlyStopping` and ``jaxfeed train`` is
``eval_loss``.

>>> monitor_mode("eval_loss"), monitor_mode("eval_f1"), monitor_mode("eval_rmse")
('min', 'max', 'min')
>>> monitor_mode("eval_accuracy", "min")
'min'
>>> pick_best([(1, 0.5), (2, 0.3), (3, 0.3)], "min")
2
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

DEFAULT_MONITOR = "eval_loss"
MODES = ("min", "max")
_MINIMISED_SUFFIXES = ("mse", "mae", "rmse", "error", "huber")


def monitor_mode(monitor: str, mode: str | None = None) -> str:
    """``mode`` checked, or the direction of ``monitor`` (``"auto"`` and ``None`` alike)."""
    if mode not in (None, "auto", *MODES):
        raise ValueError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
    if mode in MODES:
        return mode
    name = monitor.lower()
    return "min" if "loss" in name or name.endswith(_MINIMISED_SUFFIXES) else "max"


def usable(value: Any) -> bool:
    """A number that can be ranked (not None, not NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def pick_best(scored: Iterable[tuple[Any, Any]], mode: str) -> Any:
    """The key of the best ``(key, value)`` pair (in the given order, the first on ties); None
    when no value can be ranked."""
    best_key, best_value = None, None
    for key, value in scored:
        if not usable(value):
            continue
        if best_value is None or (value < best_value if mode == "min" else value > best_value):
            best_key, best_value = key, value
    return best_key
