"""Stage 2 of a run: plan it. The data loaded and described, its input kind chosen
(:mod:`jaxfeed.recipes.kinds`), its preprocessing planned by the kind (or a resumed run's
reopened), the options resolved, the loaders made over the run's mesh, the budget (batch size,
epochs, patience), a fine-tuning's defaults and the class weights: everything ``config.json``
records.

>>> import tempfile
>>> from jaxfeed.recipes.config import RunConfig
>>> from jaxfeed.recipes.train.opening import open_run
>>> with open_run(RunConfig(out=tempfile.mkdtemp() + "/run"), lambda *a: None, 0) as run:
...     plan(run)
>>> run.kind, run.config.model_spec.name, run.best_metric, len(run.loaders), list(run.resolved())[-3:]
(ArrayKind('array'), 'cnn', 'eval_loss', 3, ['budget', 'class_weights', 'lr_logged'])
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxfeed.recipes import budget as budgetmod
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.hub import HubKind
from jaxfeed.recipes.kinds.image import (
    DEFAULT_AUGMENT,
    SMALL_IMAGE_FOLDER,
    Augmented,
    augmented_floor,
)
from jaxfeed.recipes.kinds.registry import kind_for, kind_of
from jaxfeed.recipes.kinds.table import CellError, check_cells
from jaxfeed.recipes.models import resolve_class_weights
from jaxfeed.recipes.run import load_run_data, preprocessing_of
from jaxfeed.recipes.train.loaders import data_devices, make_loaders, mesh_of
from jaxfeed.recipes.train.record import CARRIED_KEYS, Run
from jaxfeed.train.monitor import monitor_mode


def plan(run: Run) -> None:
    """Fill in ``run``'s data, kind, preprocessing, resolved options and values, mesh and
    loaders (each said in a line as it is decided)."""
    kind = _load(run)
    _preprocess(run, kind)
    _resolve(run)
    _loaders(run)
    _fine_tuning(run)
    _class_weights(run)


def _load(run: Run) -> Kind:
    """The run's data (detected, split) and the kind of its input columns, which checks the
    flags (and a pretrained checkpoint) against it."""
    config, record, say = run.config, run.record, run.say
    labels = (
        record.resolved["labels"]
        if record and record.resolved["task"] == "classification"
        else None
    )
    run.run_data = data = load_run_data(config, labels)
    say(f"data {data.source.path}: detected {data.source.kind}")
    if data.splits.note:
        say(data.splits.note)
    kind = kind_for(data.columns.kind, data.task, config.model_spec, run.checkpoint)
    kind.check(config)
    for note in data.notes:
        say(note)
    run.config = kind.before_plan(config, resumed=record is not None)
    return kind


def _preprocess(run: Run, kind: Kind) -> None:
    """The preprocessing (planned by ``kind`` on the train split, or as the resumed run saved
    it), the kind of its inputs, the augmentations, and the line of sizes, inputs and target."""
    config, data = run.config, run.data
    if run.record is not None:
        prep = preprocessing_of(run.record, str(run.out / "config.json"))
        notes = ["preprocessing: as saved in the run"]
    else:
        try:
            prep, notes = kind.plan(data, config)
        except CellError as err:  # named by its row in the data, not in the shuffled train part
            raise ConfigError(err.template.format(where=data.splits.data_row(err.row))) from None
        if prep.kind == "table" and data.splits.eval is not None:
            try:
                check_cells(data.splits.eval, prep)
            except CellError as err:
                where = data.splits.data_row(err.row, "eval")
                raise ConfigError(err.template.format(where=where)) from None
    run.prep, run.kind = prep, kind_of(prep, run.checkpoint)
    defaulted = False
    if run.record is not None:
        run.kind.reopen(prep, data, run.out)  # its tokenizer attached, its clips checked
    elif (
        config.augment is None
        and prep.kind == "image"
        and run.checkpoint is None
        and data.splits.train.num_rows < SMALL_IMAGE_FOLDER
    ):  # a small image folder of a built-in model: augmented
        run.config = config = dataclasses.replace(config, augment=list(DEFAULT_AUGMENT))
        defaulted = True
    if config.augment:
        if not run.kind.augments(prep):
            raise ConfigError(
                f"--augment {','.join(config.augment)}: augmentations are for image inputs; this "
                f"run's inputs are {prep.kind} data"
            )
        line = Augmented(prep, config.augment).describe()
        if defaulted:
            line = line.replace(
                "(--augment)",
                f"(by default: fewer than {SMALL_IMAGE_FOLDER:,} training images; --augment none "
                "turns it off)",
            )
        notes.append(line)
    for note in notes:
        run.say(note)
    splits = data.splits
    sizes = [f"{splits.train.num_rows:,} train"]
    if splits.eval is not None:
        sizes.append(f"{splits.eval.num_rows:,} {splits.eval_name}")
    if splits.test is not None:
        sizes.append(f"{splits.test.num_rows:,} {splits.test_name} (held out)")
    run.say(f"{' / '.join(sizes)} {run.kind.unit}; {run.kind.describe(prep, data)}")


def _resolve(run: Run) -> None:
    """The options as the run resolved them (so that the saved ``config.json`` reproduces the
    run and a resume can compare flags with what was used), and the values ``config.json``
    records beside them (a resumed run keeps its monitor, fingerprint, model code, budget and
    stopping state)."""
    prep, kind, record = run.prep, run.kind, run.record
    assert prep is not None and kind is not None
    run.config = config = kind.resolved_options(run.config, prep, run.data)
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


def _loaders(run: Run) -> None:
    """The mesh, the batch size, the loaders, and a new run's budget (a resumed run keeps the
    budget its ``config.json`` saved)."""
    prep, kind, splits, selection = run.prep, run.kind, run.splits, run.selection
    assert prep is not None and kind is not None
    held = {
        splits.eval_name or "validation": kind.prepare(prep, splits.eval) if selection else None,
        splits.test_name or "test": None
        if splits.test is None
        else kind.prepare(prep, splits.test),
    }
    run.mesh = mesh_of(run.config)
    batch_chosen = run.config.batch_size is None
    limit = kind.max_batch(prep)
    config = budgetmod.auto_batch(run.config, splits.train.num_rows, data_devices(run.mesh), limit)
    run.config = config
    train = kind.prepare(prep, splits.train)
    run.loaders = make_loaders(train, held, prep, kind, config, run.say, run.mesh)
    if run.record is None:
        floor = augmented_floor(config.batch_size, config.grad_accum) if config.augment else None
        flops = kind.epoch_flops(prep, config, train, next(iter(held.values()), None))
        cost = None if flops is None else (flops, budgetmod.matmul_rate())
        run.config, budget = budgetmod.resolve(
            config, batch_chosen, splits.train.num_rows, len(run.loaders[0]), selection, limit,
            kind.default_epochs(), cost, floor,
        )  # fmt: skip
        run.budget = budget.to_dict()
        run.say(budget.describe(run.config.monitor, kind.unit))


def _fine_tuning(run: Run) -> None:
    """A pretrained checkpoint's fine-tuning defaults (a new run's), its record and its line."""
    kind = run.kind
    if not isinstance(kind, HubKind):  # no pretrained checkpoint
        return
    if run.record is None:  # a resumed run keeps the options it recorded
        run.config, line = kind.fine_tune_defaults(run.config, len(run.loaders[0]))
        run.say(line)
    run.pretrained = run.record.resolved["pretrained"] if run.record else kind.record()
    run.say(kind.source_line())


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
