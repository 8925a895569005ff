"""``jaxfeed export RUN --format hf``: a run fine-tuned from a Hub checkpoint (``--model
hf:ORG/NAME`` or ``./folder``, :mod:`jaxfeed.recipes.pretrained`) as a Hub-format folder that
``transformers`` loads with the same logits."""

from __future__ import annotations

from pathlib import Path

from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub import save_pretrained
from jaxfeed.recipes import text
from jaxfeed.recipes.config import ConfigError, read_run
from jaxfeed.recipes.pretrained import check_unchanged, hub_model, open_checkpoint
from jaxfeed.recipes.run import build_run_trainer, restore


def export_hf(run: str | Path, out: str | Path, which: str = "best") -> Path:
    """``jaxfeed export RUN --format hf``: the run's ``which`` checkpoint as a Hub-format folder
    (``config.json`` with the run's class names, ``model.safetensors``, the tokenizer or
    preprocessor files) that ``transformers`` loads with the same logits."""
    run = Path(run)
    record = read_run(run)
    saved = record.resolved.get("pretrained")
    if not isinstance(saved, dict):
        raise ConfigError(
            f"--format hf: {run} was not fine-tuned from a Hub model (--model hf:ORG/NAME or a "
            "checkpoint folder); only such runs export to the Hub's format"
        )
    target = Path(out)
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"--out {target}: the folder exists and is not empty")
    checkpoint = open_checkpoint(str(saved["model"]))  # the architecture is rebuilt from it
    check_unchanged(saved, checkpoint)
    trainer, _ = build_run_trainer(record, run)
    restore(trainer, run, record, which)
    labels = record.resolved.get("labels") or []
    id2label = dict(enumerate(labels)) if record.resolved.get("task") == "classification" else None
    model = hub_model(trainer.model)
    save_pretrained(model, target, source=checkpoint.folder, id2label=id2label)
    tokenizer = run / text.TOKENIZER_FILE  # the run's copy of the checkpoint's (the same bytes)
    if tokenizer.is_file():
        atomic_write(target / text.TOKENIZER_FILE, tokenizer.read_bytes())
    return target
