"""Stage 4 of a run: fit. The trainer's fit (or nothing, for a run already complete), a Ctrl-C
or a failed checkpoint answered with the line that resumes the run, and the early-stopping state
recorded in ``config.json`` as the run ended (:mod:`jaxfeed.recipes.train`'s example runs
every stage, this one included)."""

from __future__ import annotations

import shlex
import sys
import time
from typing import Any

from jaxfeed.recipes.config import budget as budgetmod
from jaxfeed.recipes.run import BEST_METRIC
from jaxfeed.recipes.train.record import Run
from jaxfeed.train.checkpoint import CheckpointError
from jaxfeed.train.schedule import Schedule

# An epoch that is not the best so far is checkpointed once this many seconds have passed since
# the last save: a small folder's default run of 200 epochs of 5 steps spent as long saving
# checkpoints (about 0.1 s each) as training. The best epoch, the last one, --checkpoint-every's
# steps and a SIGTERM's stop are always saved.
EPOCH_SAVE_INTERVAL = 30.0


def fit(run: Run, trainer: Any) -> tuple[Any, float]:
    """Train to the run's epochs or steps; returns the history and the seconds it took."""
    config, out, say = run.config, run.out, run.say
    trainer.resume_hint = shlex.join(["jaxfeed", "train", "--out", str(out), "--resume"])
    if config.tensorboard:
        say(f"TensorBoard: {shlex.join(['tensorboard', '--logdir', str(out / 'tensorboard')])}")
    start = time.perf_counter()
    schedule = {"epochs": config.epochs, "max_steps": config.max_steps}
    try:
        if Schedule.make(**schedule).finished(trainer.step, trainer.epoch):
            say(
                f"the run is already complete ({trainer.epoch} epochs, {trainer.step} steps); "
                "--epochs or --max-steps continue it"
            )
            history = trainer.history
        else:  # a resumed trainer holds its checkpoint's state (restored when built)
            history = trainer.fit(
                run.loaders[0], run.loaders[1], **schedule, log_every=config.log_every,
                eval_every=config.eval_every, checkpoint_every=config.checkpoint_every,
                checkpoint_dir=out / "checkpoints",
                checkpoint_options={
                    "best_metric": run.best_metric or BEST_METRIC, "best_mode": run.best_mode,
                    "min_save_interval": EPOCH_SAVE_INTERVAL,
                },
            )  # fmt: skip
    except KeyboardInterrupt as stop:
        done = trainer.epoch
        print(
            f"\ninterrupted during epoch {done + 1}: checkpoints up to epoch {done} are in "
            f"{out / 'checkpoints'}; resume with: {trainer.resume_hint}",
            file=sys.stderr,
        )
        stop.reported = True  # type: ignore[attr-defined]  # the command adds nothing
        raise
    except CheckpointError as err:  # a save that failed (a full disk): the earlier steps stay
        raise CheckpointError(
            f"{err}; once it can be written, resume with: {trainer.resume_hint}"
        ) from None
    seconds = time.perf_counter() - start
    _early_stopping(run, trainer)
    if (warning := budgetmod.divergence_warning(history)) is not None:
        say(warning)
    return history, seconds


def _early_stopping(run: Run, trainer: Any) -> None:
    """The early-stopping state as the run ended, recorded beside its budget; its line."""
    stopping = next(
        (c for c in trainer.callbacks if isinstance(c, budgetmod.ResumableEarlyStopping)), None
    )
    if stopping is None:
        return
    run.early_stopping = stopping.state()
    run.write_record()
    if stopping.stopped_epoch is not None:
        run.say(
            f"early stopping: no better {stopping.monitor} for {stopping.patience} epochs after "
            f"epoch {stopping.best_epoch}; stopped after epoch {stopping.stopped_epoch}"
        )
