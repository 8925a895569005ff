"""What train, eval and predict share: a run's data and splits, its folder, its trainer."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from jaxfeed._base.files import FolderLock, LockedError, atomic_write
from jaxfeed.data.dataset import DatasetDict
from jaxfeed.data.load.builtin import BUILTIN
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes.config import ConfigError, RunConfig, RunRecord, read_run
from jaxfeed.recipes.config.model_spec import parse_model
from jaxfeed.recipes.corpus import CONCAT
from jaxfeed.recipes.kinds.registry import kind_for
from jaxfeed.recipes.run_data import RunData as RunData
from jaxfeed.recipes.spec import Preprocessing

BEST_METRIC = (
    "eval_loss"  # the default --monitor (jaxfeed.train.monitor: min, the earliest on ties)
)


def load_run_data(config: RunConfig, labels: list[str] | None = None) -> RunData:
    """Detect and load ``config.data``; pick columns and task (the input kind's checks of its
    rows: empty texts left out); encode class labels; split."""
    corpus = config.sample_by or (CONCAT if config.task in (None, "lm") else "line")
    source = datamod.detect(config.data, config.data_dir, corpus)
    train_raw = datamod.select_split(source.data, config.split_train, "--split-train")
    columns = datamod.choose_columns(
        train_raw, config.input_columns, config.label_column, config.text_column, config.task
    )
    kind = kind_for(columns.kind, config.task, None)
    data, notes = kind.clean(dict(source.data), columns)
    task = kind.task or datamod.infer_task(train_raw, columns.label, config.task)
    if task == "classification":
        given = labels is not None
        data, labels = datamod.encode_labels(data, columns.label, labels, vocabulary=train_raw)
        if not given and len(labels) < 2:
            found = f"one class ({labels[0]!r})" if labels else "no class"
            raise ConfigError(
                f"--data {config.data}: the label column {columns.label!r} has {found}; a "
                "classifier needs two or more (an image folder: one subfolder per class)"
            )
    else:
        labels = []
    splits = datamod.choose_splits(
        DatasetDict(data),
        config.split_train,
        config.split_eval,
        config.val_split,
        columns.label if task == "classification" else None,
        config.seed,
        in_order=task == "lm" and corpus == CONCAT,  # a corpus end to end keeps its order
    )
    return RunData(source, splits, columns, task, list(labels), notes)


def outputs_of(task: str, labels: list[str]) -> int:
    return len(labels) if task == "classification" else 1


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


def open_checkpoints(run: Path, record: RunRecord, *, read_only: bool = True) -> Any:
    """The run's checkpoint manager, ranking steps as the run did."""
    from jaxfeed.train.checkpoint import CheckpointManager  # import cost: JAX, checkpoints only

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


def build_run_trainer(
    record: RunRecord, run: Path, *, verbose: int = 0, trust_code: bool = False
) -> tuple[Any, Preprocessing]:
    """The trainer of a saved run (for eval and predict), before its weights are restored; a
    model file of the user's is imported only with ``trust_code``."""
    from jaxfeed.recipes.models import CodePolicy, build_trainer  # import cost: JAX, optax, flax

    prep = preprocessing_of(record, str(run / "config.json"))
    outputs = outputs_of(record.resolved["task"], record.resolved["labels"])
    policy = CodePolicy(named_by_run=True, copy=model_copy(record, run), trust=trust_code)
    trainer = build_trainer(
        record.options,
        prep,
        outputs,
        1,
        None,
        verbose=verbose,
        policy=policy,
        class_weights=record.resolved.get("class_weights"),
        log_lr=bool(record.resolved.get("lr_logged", False)),  # as the run's optimizer state
    )
    return trainer, prep


# ---------------------------------------------------------------------------------- portability
CODE_DIR = "code"  # the run's copy of a user's model file, for reference


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
    model = out.get("model")
    text = model.get("class_path") if isinstance(model, dict) else model
    spec = parse_model(text) if isinstance(text, str) else None
    if spec is None or (spec.source == "file" and is_url(spec.text)):
        return out
    if spec.source == "hub" and spec.path is not None and "/" in spec.path:  # a checkpoint folder
        local = Path(spec.path).expanduser()
        if local.is_dir():
            out["model"] = (
                {**model, "class_path": str(local.resolve())}
                if isinstance(model, dict)
                else str(local.resolve())
            )
    elif spec.source == "file":
        local = Path(spec.path).expanduser()
        if local.is_file():
            resolved = f"{local.resolve()}:{spec.name}"
            out["model"] = (
                {**model, "class_path": resolved} if isinstance(model, dict) else resolved
            )
    return out


def copy_model_code(config: RunConfig, out: Path) -> dict[str, Any] | None:
    """Keep a copy of a user's model file in ``out/code/`` (for reference: imported only with
    ``--trust-code``); returns what ``config.json`` records of it."""
    spec = config.model_spec
    if spec is None or spec.source != "file":  # no file: a built-in, a module or a Hub model
        return None
    source = Path(spec.path)
    data = source.read_bytes()
    target = out / CODE_DIR / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
    return {
        "file": f"{CODE_DIR}/{source.name}",
        "source": str(source),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


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
