"""``--lr auto``: a learning-rate range test (the "LR finder") before training. A copy of the
run's model is trained for at most :data:`STEPS` optimizer steps while the learning rate grows
exponentially from :data:`LOW` to :data:`HIGH`; the test stops once the loss runs away. The chosen
rate is a tenth of the one at the lowest smoothed loss (the usual rule: well inside the range
where the loss still falls). A curve whose smoothed loss never falls :data:`MIN_DROP` below its
start has no slope to read (data where nothing can be learned, or a model that learns nothing
in these steps): its lowest point is noise, so the default rate is used instead, and said.
The choice and the curve are written to ``RUN/lr_finder.json``.

>>> choose([1e-4, 1e-3, 1e-2, 1e-1, 1.0], [2.0, 1.5, 0.6, 0.9, 9.0], smoothing=0.0)
(0.001, 0.01)
>>> drop([2.0, 1.5, 0.6, 0.9, 9.0], smoothing=0.0), drop([0.69, 0.70, 0.68, 0.69], smoothing=0.0)
(0.786, 0.014)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxfeed.train.callbacks import Callback

STEPS = 100
LOW, HIGH = 1e-6, 1.0
MIN_DROP = 0.05  # the share of its starting loss the smoothed loss must fall by: a slope
START_STEPS = 5  # the starting loss: the mean of the first steps' losses


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


def _smoothed(losses: list[float], smoothing: float) -> list[float]:
    """The losses' bias-corrected exponential moving average, up to the first non-finite one."""
    smoothed, avg = [], 0.0
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            break
        avg = smoothing * avg + (1 - smoothing) * loss  # from 0: the correction below undoes it
        smoothed.append(avg / (1 - smoothing ** (i + 1)))
    return smoothed


def choose(lrs: list[float], losses: list[float], smoothing: float = 0.9) -> tuple[float, float]:
    """``(chosen, steepest_low)``: a tenth of the rate at the lowest smoothed loss, and that rate."""
    smoothed = _smoothed(losses, smoothing)
    best = min(range(len(smoothed)), key=smoothed.__getitem__)
    return lrs[best] / 10, lrs[best]


def drop(losses: list[float], smoothing: float = 0.9) -> float:
    """How far the lowest smoothed loss falls below the starting loss (the mean of the first
    :data:`START_STEPS`), as a share of it (rounded to 3 digits); 0 when it never falls."""
    smoothed = _smoothed(losses, smoothing)
    start = sum(smoothed[:START_STEPS]) / len(smoothed[:START_STEPS])
    if not start > 0:
        return 0.0
    return round(max(0.0, (start - min(smoothed)) / start), 3)


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
    fell = drop(record.losses)
    return {
        "lr": float(f"{chosen:.2g}"),
        "lr_at_min_loss": at_min,
        "loss_drop": fell,
        "slope": fell >= MIN_DROP,
        "steps": len(record.losses),
        "curve": [[lr, loss] for lr, loss in zip(record.lrs, record.losses, strict=True)],
    }


def resolve(config: Any, build: Any, make_loader: Any, say: Any,
            default: tuple[float, str] = (1e-3, "")) -> tuple[Any, dict | None]:  # fmt: skip
    """``config`` with ``--lr auto`` replaced by the range test's choice (said in one line), and
    the test's record (None when the rate was given). A curve without a slope gives
    ``default``: ``(rate, whose)``, ``whose`` naming it in the line (``"a pretrained model's"``)."""
    if config.lr != "auto":
        return config, None
    found = range_test(config, build, make_loader())
    if not found["slope"]:
        rate, whose = default
        found = {**found, "lr": rate, "fallback": "default"}
        say(
            f"--lr auto: the range test of {found['steps']} steps from {LOW:g} up found no slope "
            f"(the smoothed loss fell {found['loss_drop']:.1%} below its start at most, less than "
            f"{MIN_DROP:.0%}: no rate learns more than another here), so the default --lr "
            f"{rate:g}{f' ({whose})' if whose else ''} is used; curve in lr_finder.json"
        )
        return dataclasses.replace(config, lr=rate), found
    say(
        f"--lr auto: a range test of {found['steps']} steps from {LOW:g} up: lowest loss at lr "
        f"{found['lr_at_min_loss']:.3g}, chosen {found['lr']:g} (a tenth of it; curve in "
        "lr_finder.json)"
    )
    return dataclasses.replace(config, lr=found["lr"]), found
