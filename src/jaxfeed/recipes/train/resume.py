"""A resumed run's checkpoint restored into its trainer, with the train loader's position: the
data checked against the checkpoint's (:func:`check_loader_state`), a position saved on another
device count taken over (:class:`ElasticLoader`).

>>> check_loader_state(None, object(), 0)  # a checkpoint without a loader position: nothing to check
>>> import tempfile  # a run without checkpoints yet starts from the beginning
>>> restore(None, Path(tempfile.mkdtemp()), RunConfig(), None, None, True, print) is None
True
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxfeed.recipes.config import ConfigError, RunConfig, RunRecord
from jaxfeed.recipes.run import open_checkpoints, settle_choice
from jaxfeed.train.checkpoint import CheckpointError


def restore(
    trainer: Any,
    out: Path,
    config: RunConfig,
    record: RunRecord | None,
    loader: Any,
    primary: bool,
    say: Callable[..., None],
) -> None:
    """Restore the run's latest checkpoint (or ``--resume-step``) into ``trainer`` and the
    train loader's position, before anything in the run folder is written: a damaged step, data
    that changed since the checkpoint or a position this loader cannot take is refused here.
    Steps after ``--resume-step`` are set aside (``RUN/set-aside/``), since this run replaces
    them. No checkpoint yet: the run starts from the beginning."""
    folder = out / "checkpoints"
    if record is not None:  # a new run has no record, nor a choice to complete
        settle_choice(out, record)  # a choice of model cut short: completed
    if not folder.is_dir() or not any(p.name.isdigit() for p in folder.iterdir()):
        if config.resume_step is not None:
            raise ConfigError(f"--resume-step {config.resume_step}: {out} has no checkpoints yet")
        return
    manager = open_checkpoints(out, record)
    steps: list[int] = []
    try:
        steps = manager.all_steps
        step = steps[-1] if config.resume_step is None else config.resume_step
        if step not in steps:
            raise ConfigError(
                f"--resume-step {step}: no such checkpoint in {folder}; steps: {steps}"
            )
        meta = manager.meta(step)
        check_loader_state(meta.get("loader"), loader, step)
        trainer.restore_checkpoint(manager, step, ElasticLoader(loader))
    except CheckpointError as err:
        earlier = [s for s in steps if s < step]
        hint = (
            f"; resume from step {earlier[-1]} with --resume-step {earlier[-1]}" if earlier else ""
        )
        raise ConfigError(f"--resume: {err}{hint}") from None
    finally:
        manager.close()
    later = [s for s in steps if s > step]
    if later and primary:
        aside = out / "set-aside"
        aside.mkdir(exist_ok=True)
        for s in later:
            target = aside / f"checkpoint-{s}"
            if target.exists():
                shutil.rmtree(target)
            (folder / str(s)).rename(target)
        say(
            f"resuming from step {step}: steps {later} set aside in {aside} (this run replaces them)"
        )


def check_loader_state(saved: Any, loader: Any, step: int) -> None:
    """The data the checkpoint was trained on is the data here: the same rows, the same content."""
    if not isinstance(saved, dict) or not hasattr(loader, "state_dict"):
        return
    mine = loader.state_dict()
    if saved.get("num_rows") != mine["num_rows"]:
        change = f"train rows {saved.get('num_rows')} -> {mine['num_rows']}"
    elif saved.get("dataset") != mine["dataset"]:
        change = (
            f"the train rows' content (fingerprint {str(saved.get('dataset'))[:16]} -> "
            f"{str(mine['dataset'])[:16]})"
        )
    else:
        return
    raise ConfigError(
        f"--resume: the run's data changed since its checkpoint (step {step}): {change}; resume "
        "with the data the run was trained on, or start a new run (another --out)"
    )


class ElasticLoader:
    """The train loader as a restore sees it: a position saved on another device count (whose
    train loader kept or dropped the last short batch: several devices drop it) is taken over;
    the order of the rows does not depend on it."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        drop = getattr(self.loader, "drop_last", None)
        if isinstance(state, dict) and state.get("packing") and state.get("drop_last") != drop:
            raise ConfigError(
                "--resume: this language model was trained on several devices with a jaxfeed "
                "that dropped each epoch's last packed batch there; resume it on several devices"
            )
        if isinstance(state, dict) and drop is not None and state.get("drop_last") != drop:
            rows, size = int(state["num_rows"]), int(state["batch_size"])
            saved_total = rows // size if state["drop_last"] else -(-rows // size)
            total = rows // size if drop else -(-rows // size)
            position = int(state["batches_consumed"])
            position = total if position >= saved_total else min(position, total)
            state = {**state, "drop_last": drop, "batches_consumed": position}
        try:
            self.loader.load_state_dict(state)
        except ValueError as err:
            raise ConfigError(f"--resume: {err}") from None
