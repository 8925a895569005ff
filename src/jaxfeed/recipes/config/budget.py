"""The run's budget when the command line leaves it open: a batch size and a run length that
follow the data, early stopping with a patience that follows them, and BatchNorm statistics that
settle within the first epoch (``jaxfeed train`` with no ``--epochs``, ``--max-steps``,
``--batch-size``, ``--patience``; an option given always wins).

* batch size: a power of two near a tenth of the train rows, between 8 and 64 (never more
  than the rows);
* run length: 10 epochs, or more when 10 epochs make fewer than :data:`STEP_FLOOR` optimizer
  steps (a small data set gets enough updates to learn; augmented images get the image kind's
  floor, :func:`jaxfeed.recipes.kinds.image.augmented_floor`);
* early stopping, with a validation split: after a fifth of the epochs (at least 3) without a
  better ``--monitor``;
* BatchNorm momentum of the built-in models (cnn, audio_cnn): low enough that the running
  statistics forget their initial values within the first epoch (at most Flax's 0.9), so that
  evaluation matches training on short runs (an augmented run lengthened by its floor keeps 0.9
  and runs to its end: :func:`resolve`);
* the linear baseline (:mod:`jaxfeed.recipes.train.candidates`): images averaged over blocks
  down to :data:`LINEAR_FEATURES` numbers at most (:func:`linear_pool`), fitted on as many train
  rows as :data:`BASELINE_WORK` allows (:func:`baseline_rows`): every row of a small data set,
  when it is also a candidate for the run's model.

>>> choose_batch(108), choose_batch(1437), choose_batch(30)
(16, 64, 8)
>>> epochs_for(7, given=None), epochs_for(23, given=None), epochs_for(7, given=3)
(29, 10, 3)
>>> round(bn_momentum(7), 3), bn_momentum(200)
(0.518, 0.9)
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import jax.numpy as jnp

from jaxfeed.recipes.kinds.builtins import BUILTINS
from jaxfeed.train.callbacks import EarlyStopping

EFFICIENCY = 0.25  # the share of the timed matmul's FLOP/s the built-in text transformer's
# steps reached: 0.25-0.55 on the licence classifier of issue 54 (2 cores at load 4-9, the matmul
# timed at a quieter or busier moment than the steps): rather more time said than taken
STEP_FLOOR = 200  # optimizer steps a run gets at least, when its length is not given
DEFAULT_EPOCHS = 10  # the run length of a data set large enough for the floor
MAX_AUTO_BATCH = 64
MIN_AUTO_BATCH = 8
BATCHNORM_MODELS = tuple(n for n, b in BUILTINS.items() if b.batchnorm)  # ("cnn", "audio_cnn")
DEFAULT_MOMENTUM = 0.9
LINEAR_FEATURES = 4096  # a linear baseline's inputs at most (images averaged over blocks to fit)
# rows x features x outputs a baseline fit reads: one pass of the objective and its gradient is
# then about 0.27 GFLOP (tens of ms on 2 cores), a fit of 5 penalties a few hundred passes
BASELINE_WORK = 2**26
BASELINE_MIN_ROWS = 1000  # ... but at least this many rows, however wide
NGRAM_BUCKETS = 2**18  # hashed n-gram rows of the text baseline (ngram); 1 and 2 tokens long
NGRAM_N = 2


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait.

    >>> duration(42.4), duration(150), duration(5400), duration(0.2)
    ('42 s', '2.5 min', '1.5 h', '1 s')
    """
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.2g} min"
    return f"{seconds / 3600:.2g} h"


def flops_text(flops: float) -> str:
    """A count of floating-point operations, in G, T or P.

    >>> flops_text(7.5e11), flops_text(2.34e12), flops_text(3e9), flops_text(5e15)
    ('750 GFLOP', '2.3 TFLOP', '3 GFLOP', '5 PFLOP')
    """
    for scale, name in ((1e15, "P"), (1e12, "T")):
        if flops >= scale:
            return f"{flops / scale:.2g} {name}FLOP"
    return f"{flops / 1e9:.3g} GFLOP"


def gflops(rate: float) -> str:
    """A rate in GFLOP/s, whole from 10 up.

    >>> gflops(1.04e11), gflops(2.56e10), gflops(3.4e9)
    ('104', '26', '3.4')
    """
    value = rate / 1e9
    return f"{round(value):,}" if value >= 10 else f"{value:.2g}"


def matmul_rate(seconds: float = 0.2) -> float:
    """The FLOP/s of a float32 matrix product (1024x512 by 512x512) compiled and timed on the
    default device for about ``seconds``: what this machine gives now, the load included."""
    a = jnp.ones((1024, 512), jnp.float32)
    b = jnp.ones((512, 512), jnp.float32)
    product = jax.jit(jnp.matmul)
    product(a, b).block_until_ready()
    runs, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or runs < 3:
        product(a, b).block_until_ready()
        runs += 1
    return 2 * 1024 * 512 * 512 * runs / elapsed


def linear_pool(shape: Any, limit: int = LINEAR_FEATURES) -> int:
    """The side of the blocks a linear baseline averages an input of ``shape`` over (its first
    two axes, when it has two or more), so that at most ``limit`` numbers are left: 1 when they
    already fit.

    >>> linear_pool([8, 8]), linear_pool([32, 32, 3]), linear_pool([224, 224, 3]), linear_pool([40])
    (1, 1, 7, 1)
    """
    shape = [int(d) for d in shape]
    if len(shape) < 2:
        return 1
    rest = math.prod(shape[2:])
    pool = 1
    while (shape[0] // pool) * (shape[1] // pool) * rest > limit and pool < min(shape[:2]):
        pool += 1
    return pool


def baseline_rows(rows: int, width: int, outputs: int) -> int:
    """The train rows a baseline is fitted on: all ``rows``, or as many as
    :data:`BASELINE_WORK` allows at ``width`` features (non-zeros, for a bag of n-grams) and
    ``outputs`` outputs, at least :data:`BASELINE_MIN_ROWS`. Fitted on every row, the linear
    model is also a candidate for the run's model.

    >>> baseline_rows(1437, 64, 10), baseline_rows(50_000, 3072, 10)
    (1437, 2184)
    """
    most = max(BASELINE_MIN_ROWS, BASELINE_WORK // max(width * max(outputs, 1), 1))
    return min(rows, most)


def epoch_count(count: int) -> str:
    """``1 epoch``, ``29 epochs``: a count of epochs as the budget's line says it.

    >>> epoch_count(1), epoch_count(29)
    ('1 epoch', '29 epochs')
    """
    return f"{count} epoch{'' if count == 1 else 's'}"


def choose_batch(rows: int) -> int:
    """A batch size for ``rows`` train rows: the power of two at or above a tenth of them, in
    ``[8, 64]``, and never more than the rows (a tiny set: a batch of half its rows, at least 1).

    >>> [choose_batch(n) for n in (1, 10, 60, 160, 640, 100_000)]
    [1, 5, 8, 16, 64, 64]
    """
    if rows < 2 * MIN_AUTO_BATCH:
        return max(1, rows // 2)
    size = 2 ** math.ceil(math.log2(max(rows / 10, 1)))
    return int(min(MAX_AUTO_BATCH, max(MIN_AUTO_BATCH, size), rows))


def epochs_for(steps_per_epoch: int, given: int | None, floor: int = STEP_FLOOR) -> int:
    """The run's epochs: ``given``, else 10, or as many as ``floor`` steps need.

    >>> epochs_for(5, None, floor=1000)
    200
    """
    if given is not None:
        return given
    return max(DEFAULT_EPOCHS, math.ceil(floor / max(steps_per_epoch, 1)))


def patience_for(epochs: int) -> int:
    """Epochs without improvement before the run stops: a fifth of them, at least 3."""
    return max(3, math.ceil(epochs / 5))


def bn_momentum(steps_per_epoch: int) -> float:
    """A BatchNorm momentum whose running statistics keep under 1% of their initial values
    after one epoch (Flax's convention: ``new = m * old + (1 - m) * batch``), between 0.5 and
    the default 0.9."""
    return float(min(DEFAULT_MOMENTUM, max(0.5, 0.01 ** (1 / max(steps_per_epoch, 1)))))


@dataclasses.dataclass
class Budget:
    """What the run chose and why; recorded in ``config.json`` (``resolved["budget"]``)."""

    rows: int
    batch_size: int
    epochs: int
    steps_per_epoch: int
    patience: int | None
    momentum: float | None
    chosen: list[str]  # the options the data chose (the others were given)
    max_steps: int | None = None  # --max-steps: the run ends there if its epochs go further
    epochs_given: bool = True  # False: --max-steps alone set the epochs (enough to reach it)
    limited: str | None = None  # why the batch is smaller than a tenth of the rows asks
    epochs_default: str | None = None  # the epochs are the kind's default (fine-tuning's), why
    epoch_flops: float | None = None  # an epoch's training and evaluation (None: not counted)
    matmul_rate: float | None = None  # FLOP/s of a matmul timed on this machine before the run
    floor: int = STEP_FLOOR  # the optimizer steps a run of chosen length makes at least
    floor_why: str | None = None  # why the floor is not STEP_FLOOR (augmented images)
    floor_holds: bool = False  # that floor set the run's length: no early stopping cuts it

    @property
    def steps(self) -> int:
        """The optimizer steps the run makes at most: its epochs', cut at ``max_steps``."""
        total = self.epochs * self.steps_per_epoch
        return total if self.max_steps is None else min(total, self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "steps": self.steps}

    def describe(self, monitor: str, unit: str = "rows") -> str:
        """One line: ``108 rows: batch 16, 29 epochs (203 steps), early stopping after ...``."""
        parts = []
        given = (
            "given"
            if "batch_size" not in self.chosen
            else self.limited
            if self.limited
            else f"at most {MAX_AUTO_BATCH}"
            if self.batch_size == MAX_AUTO_BATCH and self.rows > 10 * MAX_AUTO_BATCH
            else "half the rows: a tiny set"
            if self.rows < 2 * MIN_AUTO_BATCH
            else "about a tenth of the rows"
        )
        parts.append(f"batch {self.batch_size} ({given})")
        if "epochs" in self.chosen:
            why = (
                f"a floor of {self.floor} optimizer steps"
                if self.epochs > DEFAULT_EPOCHS
                else f"{DEFAULT_EPOCHS} epochs make at least {self.floor} steps"
            ) + (f"; {self.floor_why}" if self.floor_why else "")
            if self.floor_holds:
                why += ", no early stopping before it"
            most = "" if self.floor_holds else "at most "
            parts.append(f"{most}{epoch_count(self.epochs)} = {self.steps} steps ({why})")
        else:
            parts.append(self._length())
        if self.patience is not None:
            watched = monitor.removeprefix("eval_").replace("_", " ")
            how = "" if "patience" in self.chosen else " (given)"
            parts.append(
                f"early stopping after {epoch_count(self.patience)} ({self.patience * self.steps_per_epoch}"
                f" steps) without improvement on validation {watched}{how}"
            )
        if self.momentum is not None:
            parts.append(
                f"BatchNorm momentum {self.momentum:.3g} (its statistics settle within an epoch)"
            )
        if (cost := self.expected()) is not None:
            parts.append(cost)
        line = f"budget: {self.rows:,} train {unit}: " + ", ".join(parts)
        if self.rows < 2 * MIN_AUTO_BATCH:
            line += f" (warning: {self.rows} train {unit} are too few to learn much from)"
        return line

    @property
    def expected_seconds(self) -> float | None:
        """The run's training and evaluation at :data:`EFFICIENCY` of the timed matmul's rate,
        over the epochs its steps make (early stopping may end it sooner); None when not known."""
        if not self.epoch_flops or not self.matmul_rate:
            return None
        epochs = self.steps / max(self.steps_per_epoch, 1)
        return epochs * self.epoch_flops / (EFFICIENCY * self.matmul_rate)

    def expected(self) -> str | None:
        """The cost the budget expects, and what the estimate rests on.

        >>> Budget(614, 8, 10, 77, 3, None, [], epoch_flops=2.5e11, matmul_rate=7e10).expected()
        'expected at most 2.4 min of steps here (2.5 TFLOP at 18 GFLOP/s: 25% of the 70 GFLOP/s a matmul timed on this machine gave; compiling adds to it)'
        """
        seconds = self.expected_seconds
        if seconds is None or self.epoch_flops is None or self.matmul_rate is None:
            return None
        total = self.epoch_flops * self.steps / max(self.steps_per_epoch, 1)
        return (
            f"expected at most {duration(seconds)} of steps here ({flops_text(total)} at "
            f"{gflops(EFFICIENCY * self.matmul_rate)} GFLOP/s: {EFFICIENCY:.0%} of the "
            f"{gflops(self.matmul_rate)} GFLOP/s a matmul timed on this machine gave; compiling "
            "adds to it)"
        )

    def _length(self) -> str:
        """The run's length when options gave it: ``--epochs``, ``--max-steps`` or both.

        >>> Budget(170, 10, 10, 17, None, None, [], max_steps=20)._length()
        '20 steps (--max-steps, given; the 10 epochs given would make 170)'
        >>> Budget(170, 10, 10, 17, None, None, [], max_steps=25, epochs_given=False)._length()
        '25 steps (--max-steps, given) = 1.47 epochs'
        >>> Budget(170, 10, 10, 17, None, None, [], max_steps=500)._length()
        '10 epochs = 170 steps (given; --max-steps 500 is not reached)'
        >>> Budget(170, 10, 3, 17, None, None, [], epochs_default="a pretrained model's default")._length()
        "3 epochs = 51 steps (a pretrained model's default)"
        """
        total = self.epochs * self.steps_per_epoch
        source = self.epochs_default or "given"
        if self.max_steps is None:
            return f"{epoch_count(self.epochs)} = {total} steps ({source})"
        if not self.epochs_given and self.max_steps <= total:  # --max-steps alone
            epochs = self.max_steps / self.steps_per_epoch
            return f"{self.max_steps} steps (--max-steps, given) = {epochs:.3g} epochs"
        if self.max_steps < total:
            return (
                f"{self.max_steps} steps (--max-steps, given; the {epoch_count(self.epochs)} "
                f"{'given' if self.epochs_default is None else 'of ' + source} would make {total})"
            )
        return f"{epoch_count(self.epochs)} = {total} steps ({source}; --max-steps {self.max_steps} is not reached)"


def auto_batch(
    config: Any, rows: int, devices: int = 1, limit: tuple[int, str] | None = None
) -> Any:
    """``config`` with a batch size: ``--batch-size``, else :func:`choose_batch` of ``rows``
    (at most the kind's ``limit``, ``(size, why)``) rounded up to a multiple of the ``devices``
    the batches split over."""
    if config.batch_size is not None:
        return config
    size = choose_batch(rows)
    if limit is not None:
        size = min(size, limit[0])
    return dataclasses.replace(config, batch_size=-(-size // devices) * devices)


def resolve(
    config: Any,
    batch_chosen: bool,
    rows: int,
    batches: int,
    selection: bool,
    limit: tuple[int, str] | None = None,
    default_epochs: tuple[int, str] | None = None,
    cost: tuple[float, float] | None = None,
    floor: tuple[int, str] | None = None,
) -> tuple[Any, Budget]:
    """The run's epochs, patience and BatchNorm momentum from its data (``rows`` train rows in
    ``batches`` batches an epoch), where the options leave them open (``batch_chosen``: the
    batch size came from :func:`auto_batch`); returns the config with them set (what
    ``config.json`` saves, so that ``--resume`` continues them) and the budget.
    ``default_epochs``: ``(epochs, why)`` the kind sets when ``--epochs`` is not given (a
    pretrained model's fine-tuning), in place of the data's; ``cost``: ``(epoch FLOPs, matmul
    FLOP/s)``, for the cost the budget expects; ``floor``: ``(steps, why)`` instead of
    :data:`STEP_FLOOR` (the kind's, for augmented images): when it lengthens the run, early
    stopping does not cut it short (the few images of such a folder leave a validation split of
    a handful, too noisy to stop on) and BatchNorm keeps its momentum of 0.9 (the run is long
    enough for the statistics to settle; on 39 augmented images of squares against discs at 5
    steps an epoch, a momentum of 0.5 made them follow the last two batches, the validation loss
    the best checkpoint is chosen by jumped from epoch to epoch, and three seeds reached 0.95,
    0.94, 0.94 test accuracy against 0.99, 0.95, 0.99 at 0.9).

    >>> from jaxfeed.recipes.config import RunConfig
    >>> config = RunConfig(model="mlp", batch_size=8)
    >>> resolve(config, True, 39, 5, True, floor=(1000, "augmented"))[1].describe("eval_loss")
    'budget: 39 train rows: batch 8 (about a tenth of the rows), 200 epochs = 1000 steps (a floor of 1000 optimizer steps; augmented, no early stopping before it)'
    """
    steps_floor, floor_why = floor if floor is not None else (STEP_FLOOR, None)
    chosen = ["batch_size"] if batch_chosen else []
    steps = max(1, batches // max(config.grad_accum, 1))  # optimizer steps an epoch
    default = default_epochs if config.epochs is None else None
    if config.epochs is not None:
        epochs = config.epochs
    elif default is not None:  # not the user's: said as the kind's default, not "(given)"
        epochs = default[0]
    elif config.max_steps is not None:  # --max-steps alone: the epochs do not cut it short
        epochs = max(DEFAULT_EPOCHS, math.ceil(config.max_steps / steps))
    else:
        epochs = epochs_for(steps, None, steps_floor)
        chosen.append("epochs")
    patience = config.patience
    holds = "epochs" in chosen and epochs > epochs_for(steps, None)  # the floor lengthened it
    if patience is None and selection and "epochs" in chosen and not holds:
        patience = patience_for(epochs)
        chosen.append("patience")
    momentum = None
    spec = config.model_spec
    name, args = (spec.text, spec.init_args) if spec is not None else (None, {})
    if name in BATCHNORM_MODELS and "momentum" not in args and not holds:
        momentum = round(bn_momentum(steps), 3)
        if momentum >= DEFAULT_MOMENTUM:
            momentum = None
        else:
            chosen.append("momentum")
    changes: dict[str, Any] = {"epochs": epochs, "patience": patience}
    if momentum is not None:
        changes["model"] = {"class_path": name, "init_args": {**args, "momentum": momentum}}
    limited = (
        limit[1] if limit and batch_chosen and choose_batch(rows) > config.batch_size else None
    )
    budget = Budget(rows, config.batch_size, epochs, steps, patience, momentum, chosen,
                    config.max_steps, config.epochs is not None or default is not None, limited,
                    epochs_default=None if default is None else default[1],
                    epoch_flops=cost[0] if cost else None,
                    matmul_rate=cost[1] if cost else None, floor=steps_floor,
                    floor_why=floor_why, floor_holds=holds)  # fmt: skip
    return dataclasses.replace(config, **changes), budget


class ResumableEarlyStopping(EarlyStopping):
    """:class:`~jaxfeed.train.callbacks.EarlyStopping` whose state (best value, epochs waited)
    is replayed from the trainer's history when a fit starts, so that ``--resume`` continues it
    exactly rather than from scratch (a run that had stopped early stays stopped, unless a larger
    ``--patience`` lets it go on)."""

    def on_fit_start(self, trainer: Any) -> None:
        super().on_fit_start(trainer)
        for row in list(getattr(trainer, "history", []) or []):
            if self.monitor in row:
                super().on_epoch_end(trainer, row)
        trainer.stop_training = self.wait > self.patience
        if not trainer.stop_training:
            self.stopped_epoch = None

    def state(self) -> dict[str, Any]:
        """``{"best", "best_epoch", "wait", "stopped_epoch"}``, for the summary."""
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "wait": self.wait,
            "stopped_epoch": self.stopped_epoch,
        }


def divergence_warning(history: Any, threshold: float = 0.3) -> str | None:
    """A warning when train and validation accuracy part sharply in the first half of the run
    (evaluation statistics that lag training, or a model that memorises).

    >>> divergence_warning([{"epoch": 1, "train_accuracy": 0.93, "eval_accuracy": 0.42},
    ...                     {"epoch": 2, "train_accuracy": 0.95, "eval_accuracy": 0.9}])
    'warning: train and validation accuracy diverge early (epoch 1: train 0.93, validation 0.42): evaluation-mode statistics (BatchNorm) or memorising; a longer run, --model.init_args.momentum or more data may help'
    """
    rows = [r for r in history if "train_accuracy" in r and "eval_accuracy" in r]
    for row in rows[: max(1, (len(rows) + 1) // 2)]:
        train, held = float(row["train_accuracy"]), float(row["eval_accuracy"])
        if train - held > threshold:
            return (
                f"warning: train and validation accuracy diverge early (epoch {row.get('epoch')}: "
                f"train {train:.2f}, validation {held:.2f}): evaluation-mode statistics "
                "(BatchNorm) or memorising; a longer run, --model.init_args.momentum or more data "
                "may help"
            )
    return None
