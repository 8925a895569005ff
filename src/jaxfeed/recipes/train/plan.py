"""Stage 2 of a run: plan it. The data loaded and described, its preprocessing planned (or a
resumed run's reopened), the options resolved, the loaders made over the run's mesh, the budget
(batch size, epochs, patience), a fine-tuning's defaults and the class weights: everything
``config.json`` records."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxfeed.recipes import audio as audiomod
from jaxfeed.recipes import budget as budgetmod
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes import pretrained, text
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.models import resolve_class_weights
from jaxfeed.recipes.preprocess import Augmented, TableOptions, prepare
from jaxfeed.recipes.preprocess import plan as plan_table
from jaxfeed.recipes.run import load_run_data, preprocessing_of
from jaxfeed.recipes.spec import TEXT_KINDS, Preprocessing
from jaxfeed.recipes.train.loaders import data_devices, make_loaders, mesh_of
from jaxfeed.recipes.train.record import CARRIED_KEYS, Run
from jaxfeed.train.monitor import monitor_mode


def plan(run: Run) -> None:
    """Fill in ``run``'s data, preprocessing, resolved options and values, mesh and loaders
    (each said in a line as it is decided)."""
    _load(run)
    _preprocess(run)
    _resolve(run)
    _loaders(run)
    _fine_tuning(run)
    _class_weights(run)


def _load(run: Run) -> None:
    """The run's data: detected, split, checked against the flags and the checkpoint."""
    config, record, checkpoint, say = run.config, run.record, run.checkpoint, run.say
    labels = (
        record.resolved["labels"]
        if record and record.resolved["task"] == "classification"
        else None
    )
    run.run_data = data = load_run_data(config, labels)
    columns = data.columns
    say(f"data {data.source.path}: detected {data.source.kind}")
    if data.splits.note:
        say(data.splits.note)
    audiomod.check_flags(columns.kind, config.sample_rate, config.clip_seconds, config.image_size)
    for note in data.notes:
        say(note)
    if checkpoint is not None:
        pretrained.check_data(checkpoint, columns.kind)
        if record is None and columns.kind == "image":  # the checkpoint's size, RGB
            run.config = pretrained.image_options(checkpoint, config)


def _preprocess(run: Run) -> None:
    """The preprocessing (planned on the train split, or as the resumed run saved it), the
    augmentations, and the line of sizes, inputs and target."""
    config = run.config
    if run.record is not None:
        prep, notes = _reopen(run)
    else:
        prep, notes = _plan_new(run)
    if config.augment:
        if prep.kind != "image" and not (prep.kind == "array" and len(prep.input_shape) in (2, 3)):
            raise ConfigError(
                f"--augment {','.join(config.augment)}: augmentations are for image inputs; this "
                f"run's inputs are {prep.kind} data"
            )
        notes.append(Augmented(prep, config.augment).describe())
    for note in notes:
        run.say(note)
    run.prep = prep
    run.say(_sizes(run, prep))


def _reopen(run: Run) -> tuple[Preprocessing, list[str]]:
    """A resumed run's preprocessing, as its ``config.json`` saved it."""
    assert run.record is not None
    prep = preprocessing_of(run.record, str(run.out / "config.json"))
    if prep.kind == "audio":
        audiomod.scan_splits(run.data.source.data, prep.input_columns[0])
    if text.is_text(prep):
        text.attach_tokenizer(prep, run.out)
    return prep, ["preprocessing: as saved in the run"]


def _plan_new(run: Run) -> tuple[Preprocessing, list[str]]:
    """A new run's preprocessing, planned on its train split, with the lines that say so."""
    config, checkpoint, data = run.config, run.checkpoint, run.data
    splits, columns, task = data.splits, data.columns, data.task
    if columns.kind == "audio" and checkpoint is not None:  # the checkpoint's front end
        return pretrained.plan_audio(
            checkpoint, data.source.data, columns.inputs[0], columns.label, task, config
        )
    if columns.kind == "audio":
        return audiomod.plan_audio(
            data.source.data, columns.inputs[0], columns.label, task, config.sample_rate,
            config.clip_seconds,
        )  # fmt: skip
    if columns.kind in TEXT_KINDS and checkpoint is not None:
        return pretrained.plan_text(
            checkpoint, splits.train, columns.inputs[0], columns.label, task, config
        )
    if columns.kind in TEXT_KINDS:
        prep, notes = text.plan_text(splits.train, columns.inputs[0], columns.label, task, config)
        if columns.excluded:
            notes.append(
                f"excluded: {', '.join(c for c, _ in columns.excluded)} (the text column is the input)"
            )
        return prep, notes
    table = TableOptions(
        given=columns.given,
        categorical=config.categorical_columns,
        impute=config.missing == "impute",
        excluded=columns.excluded,
    )
    return plan_table(
        splits.train, columns.inputs, columns.label, columns.kind, task, config.image_hw(),
        table, config.image_mode,
    )  # fmt: skip


def _unit(run: Run) -> str:
    """What an epoch counts: rows (an LM's epochs count packed rows of texts)."""
    return "texts" if run.task == "lm" else "rows"


def _sizes(run: Run, prep: Preprocessing) -> str:
    """``1,293 train / 144 validation / 360 test (held out) rows; inputs [8, 8], label ...``."""
    data, splits = run.data, run.splits
    target = (
        f"label {data.columns.label!r} ({len(data.labels)} classes)"
        if data.task == "classification"
        else f"target {data.columns.label!r} (regression)"
    )
    shown = text.describe_inputs(prep) if text.is_text(prep) else f"inputs {prep.input_shape}"
    if data.task == "lm":
        shown, target = shown.split(", target: ")[0], "target: the next token"
    sizes = [f"{splits.train.num_rows:,} train"]
    if splits.eval is not None:
        sizes.append(f"{splits.eval.num_rows:,} {splits.eval_name}")
    if splits.test is not None:
        sizes.append(f"{splits.test.num_rows:,} {splits.test_name} (held out)")
    return f"{' / '.join(sizes)} {_unit(run)}; {shown}, {target}"


def _default_model(prep: Preprocessing) -> str:
    """The built-in model for the run's inputs when ``--model`` names none."""
    if text.is_text(prep):
        return "transformer"
    return {"table": "mlp", "audio": "audio_cnn"}.get(prep.kind, "cnn")


def _resolve(run: Run) -> None:
    """The options as the run resolved them, and the values ``config.json`` records beside
    them (a resumed run keeps its monitor, fingerprint, model code, budget and stopping state)."""
    prep, record, data = run.prep, run.record, run.data
    assert prep is not None
    config = _resolved_options(run.config, run.config.model or _default_model(prep), data, prep)
    run.config = config
    if config.patience is not None and not run.selection:
        raise ConfigError("--patience needs a validation split to watch; drop --val-split 0")
    run.preprocess = prep.to_dict()
    if run.selection:
        run.best_metric = config.monitor
        run.best_mode = monitor_mode(config.monitor, config.monitor_mode)
    if record is None:
        run.data_fingerprint = datamod.data_fingerprint(config.data)
        return
    # --resume --data NEWPATH: the same files, moved
    run.data_fingerprint = record.resolved.get("data_fingerprint")
    if "best_metric" in record.resolved and run.selection:
        run.best_metric = record.resolved["best_metric"]
        run.best_mode = record.resolved.get("best_mode") or monitor_mode(run.best_metric)
    run.carried = tuple(key for key in CARRIED_KEYS if key in record.resolved)
    for key in run.carried:
        setattr(run, key, record.resolved[key])


def _resolved_options(config: RunConfig, model: str, data: Any, prep: Preprocessing) -> RunConfig:
    """The options as the run resolved them (columns, task, model, image size), so that the saved
    ``config.json`` reproduces the run and a resume can compare flags with what was used."""
    size = f"{prep.image_size[0]}x{prep.image_size[1]}" if prep.image_size else config.image_size
    audio = prep.audio if prep.kind == "audio" else {}
    return dataclasses.replace(
        config,
        model=model,
        input_columns=list(prep.input_columns),
        label_column=data.columns.label or None,
        task=data.task,
        text_column=prep.text["column"] if prep.text else config.text_column,
        image_size=size if prep.kind == "image" else config.image_size,
        sample_rate=audio.get("sample_rate", config.sample_rate),
        clip_seconds=audio.get("clip_seconds", config.clip_seconds),
    )


def _loaders(run: Run) -> None:
    """The mesh, the batch size, the loaders, and a new run's budget (a resumed run keeps the
    budget its ``config.json`` saved)."""
    prep, splits, selection = run.prep, run.splits, run.selection
    assert prep is not None
    held = {
        splits.eval_name or "validation": prepare(prep, splits.eval) if selection else None,
        splits.test_name or "test": None if splits.test is None else prepare(prep, splits.test),
    }
    run.mesh = mesh_of(run.config)
    batch_chosen = run.config.batch_size is None
    config = budgetmod.auto_batch(run.config, splits.train.num_rows, data_devices(run.mesh))
    run.config = config
    run.loaders = make_loaders(prepare(prep, splits.train), held, prep, config, run.say, run.mesh)
    if run.record is None:
        run.config, budget = budgetmod.resolve(
            config, batch_chosen, splits.train.num_rows, len(run.loaders[0]), selection
        )
        run.budget = budget.to_dict()
        run.say(budget.describe(run.config.monitor, _unit(run)))


def _fine_tuning(run: Run) -> None:
    """A pretrained checkpoint's fine-tuning defaults (a new run's), its record and its line."""
    checkpoint, record = run.checkpoint, run.record
    if checkpoint is None:
        return
    if record is None:  # a resumed run keeps the options it recorded
        run.config, line = pretrained.fine_tune_defaults(run.config, len(run.loaders[0]))
        run.say(line)
    run.pretrained = record.resolved["pretrained"] if record is not None else checkpoint.record()
    where_from = checkpoint.repo_id or str(checkpoint.folder)
    commit = f" at {checkpoint.commit[:12]}" if checkpoint.commit else ""
    run.say(f"pretrained: {checkpoint.model_type} from {where_from}{commit}")


def _class_weights(run: Run) -> None:
    """The loss's class weights (``--class-weights``; a resumed run's as recorded)."""
    record, data = run.record, run.data
    if record is not None:
        run.class_weights = record.resolved.get("class_weights")
        run.lr_logged = bool(record.resolved.get("lr_logged", False))
    elif data.task == "classification":
        labels = np.asarray(data.splits.train.with_format("numpy")[data.columns.label])
        run.class_weights = resolve_class_weights(
            run.config.class_weights, labels, len(data.labels)
        )
    else:
        run.class_weights = run.config.class_weights
    if run.class_weights is not None:
        run.say(f"class weights: {run.class_weights}")
