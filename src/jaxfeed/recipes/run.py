"""What train, eval and predict share: a run's data and splits, its folder, its trainer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jaxfeed._base.files import FolderLock, LockedError, atomic_write
from jaxfeed.data.load.builtin import BUILTIN
from jaxfeed.recipes.config import ConfigError, RunRecord, read_run
from jaxfeed.recipes.sources.registry import absolute_model
from jaxfeed.recipes.spec import Preprocessing

BEST_METRIC = (
    "eval_loss"  # the default --monitor (jaxfeed.train.monitor: min, the earliest on ties)
)


def is_run_folder(folder: Path) -> bool:
    """A folder holding a ``config.json`` that jaxfeed train wrote (this or the first version)."""
    try:
        read_run(folder)
    except ConfigError:
        return False
    return True


def check_out_folder(out: Path, resume: bool) -> None:
    """Refuse, before anything is written, a folder that is neither empty nor a jaxfeed run; a run
    with checkpoints without ``--resume``; ``--resume`` of a folder that is not a run."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the run")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if resume:
        if not (out / "config.json").is_file():
            raise ConfigError(
                f"--resume: {out} has no config.json of an earlier run; give the run's --out"
            )
        read_run(out)  # a clear error for a damaged or foreign config.json
        return
    if not entries:
        return
    if not is_run_folder(out):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ConfigError(
            f"--out {out} holds files that are not a jaxfeed run ({shown}); jaxfeed writes only into an "
            "empty folder or a run of its own: pick another --out"
        )
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir()):
        raise ConfigError(
            f"{out} already holds a run; add --resume to continue it, or pick another --out"
        )


RUN_LOCK_RETRIES = 5  # a run folder removed between its creation and its lock: made again


def lock_run_folder(out: Path, resume: bool) -> FolderLock:
    """Create ``out`` and take an OS lock on the folder itself (``flock``: nothing is written, and
    the kernel releases it when the process ends, crashed or not), then check the folder again:
    of two ``jaxfeed train --out SAME`` started together, the second is refused before it writes
    a byte. The caller releases the lock when training ends. A folder removed meanwhile (a run
    refused at its start removes the empty folder it made, still locked) is made and locked
    again: the lock is always on the folder at ``out``."""
    for _ in range(RUN_LOCK_RETRIES + 1):
        try:
            out.mkdir(parents=True, exist_ok=True)
            lock = FolderLock(out, "run folder")
        except LockedError as err:
            raise ConfigError(f"--out {out}: {err}") from None
        except FileNotFoundError:  # removed between the two
            continue
        try:
            if lock.fd is not None and os.stat(out).st_ino == os.fstat(lock.fd).st_ino:
                break
        except FileNotFoundError:
            pass
        lock.release()  # the lock of a folder removed meanwhile: lock the one there now
    else:
        raise ConfigError(f"--out {out}: the folder keeps being removed while it is locked")
    try:
        check_out_folder(out, resume)  # what the other process may have written meanwhile
    except BaseException:
        lock.release()
        raise
    return lock


CHOSEN = "checkpoints.chosen"  # a model chosen at the end of a run, before it is checkpoints/


def settle_choice(run: Path, record: RunRecord) -> None:
    """Complete the model choice ``config.json`` records (its ``choice`` keeps the model
    chosen and ``kept``, where the other model's checkpoints go): ``checkpoints.chosen/`` takes
    the place of ``checkpoints/``, which moves to ``kept``. A run cut short between the two
    renames is completed by the next reader; one cut short before ``config.json`` recorded the
    choice keeps its checkpoints (the stale folder is replaced when the run finishes again)."""
    staged, current = run / CHOSEN, run / "checkpoints"
    choice = record.resolved.get("choice")
    if not staged.is_dir() or not isinstance(choice, dict) or not choice.get("kept"):
        return
    kept = run / str(choice["kept"])
    if not kept.resolve().is_relative_to(run.resolve()):
        raise ConfigError(f"{run}/config.json: choice.kept {choice['kept']!r} is outside the run")
    if current.is_dir() and not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        current.rename(kept)
    if not current.exists():
        staged.rename(current)


def open_checkpoints(run: Path, record: RunRecord, *, read_only: bool = True) -> Any:
    """The run's checkpoint manager, ranking steps as the run did."""
    from jaxfeed.train.checkpoint import CheckpointManager  # import cost: JAX, checkpoints only

    settle_choice(run, record)
    metric = record.resolved.get("best_metric", BEST_METRIC) or BEST_METRIC
    folder = run / "checkpoints"
    if not folder.is_dir() or not any(p.name.isdigit() for p in folder.iterdir()):
        raise ConfigError(f"{run} has no checkpoints yet (checkpoints/ is empty); train it first")
    return CheckpointManager(
        folder, best_metric=metric, best_mode=record.resolved.get("best_mode"), async_save=False
    )


def selects(record: RunRecord) -> bool:
    """Whether the run chose its best checkpoint on a validation split (``--val-split 0``: no,
    its "best" is its last)."""
    return "best_metric" not in record.resolved or record.resolved["best_metric"] is not None


def checkpoint_step(manager: Any, which: str) -> int:
    """``best``, ``last`` (or ``latest``) or a step number -> a step of ``manager``."""
    from jaxfeed.train.checkpoint import CheckpointError  # import cost: JAX, checkpoints only

    name = "latest" if which in ("last", "latest") else which
    try:
        return manager.resolve(name if name in ("best", "latest") else int(name))
    except CheckpointError as err:
        raise ConfigError(f"--checkpoint {which}: {err}") from err


def restore(trainer: Any, run: Path, record: RunRecord, which: str) -> dict[str, Any]:
    """Load the model of checkpoint ``which`` of the run into ``trainer`` (its weights only: the
    optimizer state, which a rebuilt optimizer may not match, is never read); returns its
    metadata."""
    from jaxfeed.train.checkpoint import CheckpointError  # import cost: JAX, checkpoints only

    manager = open_checkpoints(run, record)
    try:
        step = checkpoint_step(
            manager, "last" if which == "best" and not selects(record) else which
        )
        return trainer.restore_weights(manager, step)
    except CheckpointError as err:
        raise ConfigError(f"{run}: {err}") from err
    finally:
        manager.close()


def preprocessing_of(record: RunRecord, where: str) -> Preprocessing:
    return Preprocessing.from_dict(record.resolved["preprocess"], where)


# ---------------------------------------------------------------------------------- portability


def is_url(text: str) -> bool:
    return "://" in text


def absolute_paths(values: dict[str, Any]) -> dict[str, Any]:
    """``data``, ``data_dir`` and a ``FILE.py:Class`` model that name existing local paths, as
    absolute paths (a built-in name, a Hub id and a URL stay as given), so that the run folder
    works from any directory.

    >>> absolute_paths({"data": "digits", "model": "cnn"})
    {'data': 'digits', 'model': 'cnn'}
    """
    out = dict(values)
    for key in ("data", "data_dir", "tokenizer"):
        text = out.get(key)
        if isinstance(text, str) and not is_url(text) and text not in BUILTIN:
            local = Path(text).expanduser()
            if local.exists():
                out[key] = str(local.resolve())
    if out.get("model") is not None:  # a model file, a checkpoint folder: its model source's
        out["model"] = absolute_model(out["model"])
    return out


def model_copy(record: RunRecord, run: Path) -> Path | None:
    """The run's copy of its model file, when it has one."""
    code = record.resolved.get("model_code")
    if not isinstance(code, dict) or not isinstance(code.get("file"), str):
        return None
    path = (run / code["file"]).resolve()
    if not path.is_relative_to(run.resolve()):
        return None  # a config.json pointing outside its folder names no copy
    return path


def write_json(path: Path, payload: Any) -> None:
    atomic_write(path, json.dumps(payload, indent=2))


def umask_mode(mode: int = 0o666) -> int:
    """``mode`` as the process umask would create it."""
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask
