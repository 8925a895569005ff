"""``jaxfeed export RUN --format hf``: a run fine-tuned from a Hub checkpoint (``--model
hf:ORG/NAME`` or ``./folder``, :mod:`jaxfeed.recipes.hub_checkpoint`) as a Hub-format folder that
``transformers`` loads with the same logits. Only the model's weights are restored: no optimizer,
schedule or metrics are rebuilt, so every run with a checkpoint exports, whatever its schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub import save_pretrained
from jaxfeed.recipes.config import ConfigError, RunRecord, read_run
from jaxfeed.recipes.hub_checkpoint import check_unchanged, hub_model, open_checkpoint
from jaxfeed.recipes.models import build_model
from jaxfeed.recipes.run import (
    checkpoint_step,
    open_checkpoints,
    outputs_of,
    preprocessing_of,
    selects,
)
from jaxfeed.recipes.tokenizer import TOKENIZER_FILE
from jaxfeed.train.checkpoint import CheckpointError, restore_weights


def export_hf(run: str | Path, out: str | Path | None, which: str = "best") -> Path:
    """``jaxfeed export RUN --format hf``: the run's ``which`` checkpoint as a Hub-format folder
    (``config.json`` with the run's class names, ``model.safetensors``, the tokenizer or
    preprocessor files) that ``transformers`` loads with the same logits."""
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
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"--out {target}: the folder exists and is not empty")
    checkpoint = open_checkpoint(str(saved["model"]))  # the architecture is rebuilt from it
    check_unchanged(saved, checkpoint)
    model = _run_weights(record, run, which)
    labels = record.resolved.get("labels") or []
    id2label = dict(enumerate(labels)) if record.resolved.get("task") == "classification" else None
    save_pretrained(hub_model(model), target, source=checkpoint.folder, id2label=id2label)
    tokenizer = run / TOKENIZER_FILE  # the run's copy of the checkpoint's (the same bytes)
    if tokenizer.is_file():
        atomic_write(target / TOKENIZER_FILE, tokenizer.read_bytes())
    return target


def _run_weights(record: RunRecord, run: Path, which: str) -> Any:
    """The run's model (built as for training) holding the weights of its checkpoint ``which``
    (``best``, ``last`` or a step; a run without a validation split's best is its last)."""
    manager = open_checkpoints(run, record)  # first: a run without checkpoints stops here
    try:
        step = checkpoint_step(
            manager, "last" if which == "best" and not selects(record) else which
        )
        prep = preprocessing_of(record, str(run / "config.json"))
        outputs = outputs_of(record.resolved["task"], record.resolved["labels"])
        model = build_model(record.options, prep, outputs, record.options.seed)
        restore_weights(manager, model, step)
    except CheckpointError as err:
        raise ConfigError(f"{run}: {err}") from err
    finally:
        manager.close()
    return model
