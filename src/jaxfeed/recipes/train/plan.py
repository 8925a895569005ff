"""Stage 2 of a run: plan it. The data loaded and described, its input kind chosen
(:mod:`jaxfeed.recipes.kinds`: the one place a new run's kind is), its preprocessing planned by the
kind with what the model source hands it (or a resumed run's reopened), the options resolved, the
loaders made over the run's mesh, the model source's defaults (at one moment: the steps of an
epoch known), the budget (batch size, epochs, patience), the class weights and the baselines
(:mod:`~jaxfeed.recipes.train.candidates`): everything ``config.json`` records.

>>> import tempfile
>>> from jaxfeed.recipes.config import RunConfig
>>> from jaxfeed.recipes.train.opening import open_run
>>> with open_run(RunConfig(out=tempfile.mkdtemp() + "/run"), lambda *a: None, 0) as run:
...     plan(run)
>>> run.kind, run.config.model_spec.name, run.best_metric, len(run.loaders), list(run.resolved())[-3:]
(ArrayKind('array'), 'cnn', 'eval_loss', 3, ['lr_logged', 'baselines', 'choice'])
>>> run.choice, sorted(run.baselines)  # the cnn compared with the linear model as it finishes
({'candidates': ['cnn', 'linear']}, ['linear', 'majority'])
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxfeed.recipes import data as datamod
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.config import budget as budgetmod
from jaxfeed.recipes.config.rate_cache import cached_rate
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.image import (
    DEFAULT_AUGMENT,
    SMALL_IMAGE_FOLDER,
    Augmented,
    augmented_floor,
)
from jaxfeed.recipes.kinds.registry import kind_for, kind_of
from jaxfeed.recipes.kinds.table import CellError, check_cells
from jaxfeed.recipes.run import preprocessing_of
from jaxfeed.recipes.run_data import load_run_data
from jaxfeed.recipes.sources.base import DEFAULTED, given_options
from jaxfeed.recipes.train import candidates
from jaxfeed.recipes.train.loaders import data_devices, make_loaders, mesh_of
from jaxfeed.recipes.train.record import CARRIED_KEYS, Run
from jaxfeed.recipes.train.trainer import resolve_class_weights
from jaxfeed.train.monitor import monitor_mode


def plan(run: Run) -> None:
    """Fill in ``run``'s data, kind, preprocessing, resolved options and values, mesh and
    loaders, and its baselines (each said in a line as it is decided)."""
    run.model_given = run.config.model is not None or run.config.api != "nnx"
    kind = _load(run)
    _preprocess(run, kind)
    _resolve(run)
    _loaders(run)
    _source(run)
    _class_weights(run)
    candidates.fit_baselines(run)


def _load(run: Run) -> Kind:
    """The run's data (detected, split) and the kind of its input columns (chosen here), which
    checks the flags; the model source takes the kind (a Hub checkpoint: the data's kind checked
    against it, its image size)."""
    config, record, say = run.config, run.record, run.say
    labels = (
        record.resolved["labels"]
        if record and record.resolved["task"] == "classification"
        else None
    )
    run.run_data = data = load_run_data(config, labels, kind_for)
    say(f"data {data.source.path}: detected {data.source.kind}")
    if data.splits.note:
        say(data.splits.note)
    kind = kind_for(data.columns.kind, data.task)
    kind.check(config)
    for note in data.notes:
        say(note)
    assert run.model_source is not None
    run.config = run.model_source.before_plan(kind, config, resumed=record is not None)
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
            prep, notes = kind.plan(data, config, run.model_source.inputs())
        except CellError as err:  # named by its row in the data, not in the shuffled train part
            raise ConfigError(err.template.format(where=data.splits.data_row(err.row))) from None
        if prep.kind == "table" and data.splits.eval is not None:
            try:
                check_cells(data.splits.eval, prep)
            except CellError as err:
                where = data.splits.data_row(err.row, "eval")
                raise ConfigError(err.template.format(where=where)) from None
    run.prep, run.kind = prep, kind if prep.kind == kind.name else kind_of(prep)
    defaulted = False
    if run.record is not None:
        run.kind.reopen(prep, data, run.out)  # its tokenizer attached, its clips checked
    elif (
        config.augment is None
        and prep.kind == "image"
        and run.model_source.inputs() is None  # a Hub model's images are its own size
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
    """The mesh, the batch size, the loaders, and a new run's model-source defaults and budget (a
    resumed run keeps the options and budget its ``config.json`` saved)."""
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
        source = run.model_source
        given = given_options(config)
        config, lines = source.defaults(config, given, len(run.loaders[0]))
        floor = augmented_floor(config.batch_size, config.grad_accum) if config.augment else None
        flops = kind.epoch_flops(prep, config, train, next(iter(held.values()), None))
        cost = None if flops is None else (flops, cached_rate(budgetmod.matmul_rate))
        run.config, budget = budgetmod.resolve(
            config, batch_chosen, splits.train.num_rows, len(run.loaders[0]), selection, limit,
            None if "epochs" in given else source.default_epochs(), cost, floor,
        )  # fmt: skip
        run.budget = budget.to_dict()
        run.say(budget.describe(run.config.monitor, kind.unit))
        for line in lines:
            run.say(line)
    else:  # a resumed run: what its options leave out, as the run recorded it
        saved = run.record.options
        left = {k: getattr(saved, k) for k in DEFAULTED if getattr(config, k) is None}
        run.config = dataclasses.replace(config, **left)


def _source(run: Run) -> None:
    """What ``config.json`` records of the model source (a Hub checkpoint: its id, commit and
    hashes; a resumed run's as recorded) and its line."""
    source = run.model_source
    assert source is not None
    recorded = run.record.resolved.get("pretrained") if run.record else source.record()
    run.pretrained = recorded
    for line in source.lines():
        run.say(line)


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
