"""``jaxfeed export RUN --format hf``: a run fine-tuned from a Hub checkpoint (``--model
hf:ORG/NAME`` or ``./folder``, :mod:`jaxfeed.recipes.sources.hub`) as a Hub-format folder that
``transformers`` loads with the same logits. The checkpoint is the one the run recorded (reopened
at its commit, its files checked against the run's hashes); only the model's weights are
restored: no optimizer, schedule or metrics are rebuilt, so every run with a checkpoint exports,
whatever its schedule."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub import save_pretrained
from jaxfeed.recipes.config import ConfigError, read_run
from jaxfeed.recipes.run import checkpoint_step, open_checkpoints, selects
from jaxfeed.recipes.serving.saved import SavedRun, read_saved
from jaxfeed.recipes.sources.hub import hub_model
from jaxfeed.recipes.text.tokenizer import TOKENIZER_FILE
from jaxfeed.recipes.train.trainer import build_model
from jaxfeed.train.checkpoint import CheckpointError, restore_weights


def export_hf(
    run: str | Path, out: str | Path | None, which: str = "best", merge: bool = False
) -> Path:
    """``jaxfeed export RUN --format hf``: the run's ``which`` checkpoint as a Hub-format folder
    (``config.json`` with the run's class names, ``model.safetensors``, the tokenizer or
    preprocessor files) that ``transformers`` loads with the same logits. A ``--lora`` run writes
    its PEFT adapter folder (``adapter_config.json``, ``adapter_model.safetensors``), or with
    ``merge`` the checkpoint with the adapters merged in."""
    run = Path(run)
    record = read_run(run)
    saved = record.resolved.get("pretrained")
    if not isinstance(saved, dict):
        raise ConfigError(
            f"{run / 'model'} already is this run's export (StableHLO + safetensors, with its "
            "preprocessing: jaxfeed predict and jaxfeed.load_exported use it); --format hf "
            f"writes the Hub's format, only for a run fine-tuned from a Hub model (--model "
            f"hf:ORG/NAME or a checkpoint folder), which {run} was not"
        )
    if out is None:
        raise ConfigError("--format hf needs --out FOLDER (a new or empty folder to write)")
    target = Path(out)
    _check_target(target)
    run_read = read_saved(run, record=record, verify_source=True)
    checkpoint = run_read.model_source.checkpoint  # at its recorded commit, files checked
    model = _run_weights(run_read, which)
    labels = record.resolved.get("labels") or []
    id2label = dict(enumerate(labels)) if record.resolved.get("task") == "classification" else None
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        save_pretrained(hub_model(model), staging, source=checkpoint.folder, id2label=id2label,
                        merge=merge)  # fmt: skip
        tokenizer = run / TOKENIZER_FILE  # the run's copy of the checkpoint's (the same bytes)
        if tokenizer.is_file():
            atomic_write(staging / TOKENIZER_FILE, tokenizer.read_bytes())
        _check_target(target)
        os.rename(staging, target)  # atomic; refused when another export filled it meanwhile
    except OSError as err:
        if target.is_dir() and any(target.iterdir()):
            raise ConfigError(
                f"--out {target}: another export wrote into the folder meanwhile; it is kept as "
                "it is: export again into another --out"
            ) from None
        raise ConfigError(f"--out {target}: the export could not be put there: {err}") from None
    except ConfigError:
        raise
    except ValueError as err:  # a checkpoint file refused (a link leading outside its folder)
        raise ConfigError(f"--format hf: {err}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _check_target(target: Path) -> None:
    """``--out`` of an export: a new folder or an empty one."""
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--out {target} is a file; give a new or empty folder for the export")
    if target.is_dir() and any(target.iterdir()):
        raise ConfigError(
            f"--out {target}: the folder exists and is not empty; give a new or empty folder"
        )


def _run_weights(saved: SavedRun, which: str) -> Any:
    """The run's model (built as for training) holding the weights of its checkpoint ``which``
    (``best``, ``last`` or a step; a run without a validation split's best is its last)."""
    run, record = saved.out, saved.record
    manager = open_checkpoints(run, record)  # first: a run without checkpoints stops here
    try:
        step = checkpoint_step(
            manager, "last" if which == "best" and not selects(record) else which
        )
        model = build_model(saved)
        restore_weights(manager, model, step)
    except CheckpointError as err:
        raise ConfigError(f"{run}: {err}") from err
    finally:
        manager.close()
    return model
