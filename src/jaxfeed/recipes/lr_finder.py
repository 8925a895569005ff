"""``--lr auto``: a learning-rate range test (the "LR finder") before training. A copy of the
run's model is trained for at most :data:`STEPS` optimizer steps while the learning rate grows
exponentially from :data:`LOW` to :data:`HIGH`; the test stops once the loss runs away. The chosen
rate is a tenth of the one at the lowest smoothed loss (the usual rule: well inside the range
where the loss still falls). The choice and the curve are written to ``RUN/lr_finder.json``.

>>> choose([1e-4, 1e-3, 1e-2, 1e-1, 1.0], [2.0, 1.5, 0.6, 0.9, 9.0], smoothing=0.0)
(0.001, 0.01)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxfeed.train.callbacks import Callback

STEPS = 100
LOW, HIGH = 1e-6, 1.0


class _Record(Callback):
    """Collects ``(learning rate, train loss)`` after every step; stops when the loss runs away."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, step: int, logs: dict[str, Any]) -> None:
        loss = logs.get("train_loss")
        if loss is None:
            return
        self.lrs.append(float(logs.get("learning_rate", math.nan)))
        self.losses.append(float(loss))
        best = min(self.losses)
        if not math.isfinite(loss) or (len(self.losses) > 10 and loss > 4 * best):
            trainer.stop_training = True


def choose(lrs: list[float], losses: list[float], smoothing: float = 0.9) -> tuple[float, float]:
    """``(chosen, steepest_low)``: a tenth of the rate at the lowest smoothed loss, and that rate."""
    smoothed, avg = [], None
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            break
        avg = loss if avg is None else smoothing * avg + (1 - smoothing) * loss
        smoothed.append(avg / (1 - smoothing ** (i + 1)) if smoothing else avg)
    best = min(range(len(smoothed)), key=smoothed.__getitem__)
    return lrs[best] / 10, lrs[best]


def range_test(config: Any, build: Any, loader: Any) -> dict[str, Any]:
    """Run the range test: ``build(config)`` makes a trainer of a config (the run's, its rate
    and schedule replaced), trained on ``loader``. Returns ``{"lr", "lr_at_min_loss", "steps",
    "curve": [[lr, loss], ...]}``."""
    rate = (HIGH / LOW) ** (1 / (STEPS - 1))
    probe = dataclasses.replace(
        config,
        lr=LOW,
        schedule={
            "class_path": "exponential_decay",
            "init_args": {"transition_steps": 1, "decay_rate": rate},
        },
        warmup_steps=0,
        patience=None,
        grad_accum=1,
    )
    trainer = build(probe)
    record = _Record()
    trainer.callbacks.append(record)
    trainer.fit(loader, None, epochs=1_000_000, max_steps=STEPS, log_every=1)
    if len(record.losses) < 5:
        raise RuntimeError(f"--lr auto: the range test made only {len(record.losses)} steps")
    chosen, at_min = choose(record.lrs, record.losses)
    return {
        "lr": float(f"{chosen:.2g}"),
        "lr_at_min_loss": at_min,
        "steps": len(record.losses),
        "curve": [[lr, loss] for lr, loss in zip(record.lrs, record.losses, strict=True)],
    }


def resolve(config: Any, build: Any, make_loader: Any, say: Any) -> tuple[Any, dict | None]:
    """``config`` with ``--lr auto`` replaced by the range test's choice (said in one line), and
    the test's record (None when the rate was given)."""
    if config.lr != "auto":
        return config, None
    found = range_test(config, build, make_loader())
    say(
        f"--lr auto: a range test of {found['steps']} steps from {LOW:g} up: lowest loss at lr "
        f"{found['lr_at_min_loss']:.3g}, chosen {found['lr']:g} (a tenth of it; curve in "
        "lr_finder.json)"
    )
    return dataclasses.replace(config, lr=found["lr"]), found
