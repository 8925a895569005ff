"""``jaxfeed export RUN --format hf``: a run fine-tuned from a Hub checkpoint (``--model
hf:ORG/NAME`` or ``./folder``, :mod:`jaxfeed.recipes.sources.hub`) as a Hub-format folder that
``transformers`` loads with the same logits. The checkpoint is the one the run recorded (reopened
at its commit, its files checked against the run's hashes); only the model's weights are
restored: no optimizer, schedule or metrics are rebuilt, so every run with a checkpoint exports,
whatever its schedule."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from jaxfeed._base.extras import require
from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub import save_pretrained
from jaxfeed.models.hub.files import checkpoint_file, read_checkpoint_json
from jaxfeed.recipes.config import ConfigError, read_run
from jaxfeed.recipes.run import checkpoint_step, open_checkpoints, selects
from jaxfeed.recipes.serving.saved import SavedRun, read_saved
from jaxfeed.recipes.sources.hub import hub_model
from jaxfeed.recipes.text.tokenizer import TOKENIZER_FILE
from jaxfeed.recipes.train.trainer import build_model
from jaxfeed.train.checkpoint import CheckpointError, restore_weights

# what AutoTokenizer reads beside tokenizer.json: its class, special tokens, chat template
TOKENIZER_SETTINGS = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


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
            tokenizer_settings(staging, checkpoint.folder)
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


def tokenizer_settings(folder: Path, checkpoint: Path) -> list[str]:
    """Beside ``folder``'s ``tokenizer.json``, the files that tell ``transformers``'
    ``AutoTokenizer`` its special tokens (an adapter folder had none: it loaded without eos or
    pad): the checkpoint's :data:`TOKENIZER_SETTINGS` it has, and a ``tokenizer_config.json``
    made from its ``config.json``'s ``bos``/``eos``/``pad_token_id`` when it has none. Returns
    the names written.

    >>> import json, tempfile, tokenizers
    >>> ckpt, out = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    >>> vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "hi": 3}
    >>> tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    >>> tok.save(str(out / "tokenizer.json"))
    >>> _ = (ckpt / "config.json").write_text(json.dumps({"eos_token_id": 2, "pad_token_id": 0}))
    >>> tokenizer_settings(out, ckpt)
    ['tokenizer_config.json']
    >>> json.loads((out / "tokenizer_config.json").read_text())
    {'tokenizer_class': 'PreTrainedTokenizerFast', 'eos_token': '</s>', 'pad_token': '<pad>'}
    """
    written = []
    for name in TOKENIZER_SETTINGS:
        found = checkpoint_file(checkpoint, name)  # a link leading out of the folder: refused
        if found is not None and not (folder / name).exists():
            atomic_write(folder / name, found.read_bytes())
            written.append(name)
    if (folder / "tokenizer_config.json").exists():
        return written
    config = read_checkpoint_json(checkpoint, "config.json", "model config") or {}
    tokenizers = require("tokenizers", "text", "the export's tokenizer")
    tokenizer = tokenizers.Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    settings: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    for token in ("bos", "eos", "pad"):
        ids = config.get(f"{token}_token_id")
        first = ids[0] if isinstance(ids, list) and ids else ids  # Llama 3: a list of eos ids
        name = tokenizer.id_to_token(first) if type(first) is int and first >= 0 else None
        if name is not None:
            settings[f"{token}_token"] = name
    atomic_write(folder / "tokenizer_config.json", json.dumps(settings, indent=2) + "\n")
    return [*written, "tokenizer_config.json"]


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
