"""Step-based schedules for ``Trainer.fit`` and the state of an epoch in progress.

Everything is counted in optimizer steps (``trainer.step``, the global step, counted over every
``fit`` call and across resumes): ``max_steps`` ends training, ``log_every`` writes a metrics
row, ``eval_every`` evaluates, ``checkpoint_every`` saves. They combine with ``epochs``: training
stops at whichever limit comes first, and epoch ends still evaluate, log and checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Schedule:
    """When a fit stops, logs, evaluates and checkpoints.

    >>> s = Schedule.make(epochs=None, max_steps=100, log_every=10)
    >>> s.epochs, s.finished(step=100, epoch=3), s.due("log_every", 20), s.due("eval_every", 20)
    (None, True, True, False)
    """

    epochs: int | None = 1
    max_steps: int | None = None
    eval_every: int | None = None
    checkpoint_every: int | None = None
    log_every: int | None = None

    @classmethod
    def make(
        cls,
        epochs: int | None = None,
        max_steps: int | None = None,
        eval_every: int | None = None,
        checkpoint_every: int | None = None,
        log_every: int | None = None,
    ) -> Schedule:
        """Validated; ``epochs=None`` means 1 epoch, or no epoch limit when ``max_steps`` is set."""
        if epochs is not None and (
            isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 0
        ):
            raise ValueError(f"epochs must be an int >= 0, got {epochs!r}")
        max_steps = _count("max_steps", max_steps)
        if epochs is None and max_steps is None:
            epochs = 1
        return cls(
            None if epochs is None else int(epochs),
            max_steps,
            _count("eval_every", eval_every),
            _count("checkpoint_every", checkpoint_every),
            _count("log_every", log_every),
        )

    def finished(self, step: int, epoch: int) -> bool:
        """Whether training is complete after ``step`` steps and ``epoch`` completed epochs."""
        return (self.epochs is not None and epoch >= self.epochs) or (
            self.max_steps is not None and step >= self.max_steps
        )

    def due(self, what: str, step: int) -> bool:
        """Whether ``what`` ("log_every", "eval_every", "checkpoint_every") falls on ``step``."""
        every = getattr(self, what)
        return every is not None and step % every == 0

    @property
    def per_step(self) -> bool:
        """Whether anything is scheduled between epoch ends."""
        return any(
            v is not None
            for v in (self.max_steps, self.eval_every, self.checkpoint_every, self.log_every)
        )


@dataclass
class EpochProgress:
    """An epoch in progress: its metric sums (on the device), first step, rows, time, and the
    sums at the last metrics row (the window a step row averages over). Saved in mid-epoch
    checkpoints so a resumed epoch reports the same totals."""

    epoch: int
    first_step: int
    rows: int = 0
    elapsed: float = 0.0  # seconds before this process took the epoch over (resume)
    waited: float = 0.0
    sums: Any = None
    saved_sums: dict[str, Any] | None = None  # host sums from a checkpoint, placed on first use
    started: float = field(default_factory=time.perf_counter)
    window_sums: dict[str, Any] | None = None
    window_time: float = field(default_factory=time.perf_counter)
    iterator: Any = None
    loader_state: dict[str, Any] | None = None  # where the loader stood when fit stopped mid-epoch

    def seconds(self) -> float:
        return self.elapsed + time.perf_counter() - self.started

    def batches_left(self) -> int | None:
        """Batches left in the epoch's iterator, when it knows (a DataLoader's does)."""
        try:
            return len(self.iterator)
        except TypeError:
            return None

    def to_meta(self, host_sums: dict[str, Any]) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "first_step": self.first_step,
            "rows": self.rows,
            "seconds": self.seconds(),
            "waited": self.waited,
            "sums": {k: np.asarray(v).item() for k, v in host_sums.items()},
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> EpochProgress:
        return cls(
            epoch=int(meta["epoch"]),
            first_step=int(meta["first_step"]),
            rows=int(meta["rows"]),
            elapsed=float(meta["seconds"]),
            waited=float(meta["waited"]),
            saved_sums=dict(meta["sums"]),
        )
