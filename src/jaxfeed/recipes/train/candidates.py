"""A run's baselines and the choice of its model (issue 64: on small data the default models
lost to a linear model, and nothing said so).

At the end of the plan, :func:`fit_baselines` fits two baselines on the same inputs as the run's
model: the majority class (a regression: the train mean) and a linear model, the input kind's
:meth:`~jaxfeed.recipes.kinds.base.Kind.baseline` (``linear`` on the pixels or a table's encoded
row, ``ngram`` on a text's tokens), by full-batch L-BFGS with its L2 penalty chosen on the
validation split (:func:`jaxfeed.train.linear_fit.fit_on_validation`), in seconds, on the train
rows the budget allows (:func:`~jaxfeed.recipes.config.budget.baseline_rows`). Their figures on
the validation rows the run selects on are said at once and recorded (``config.json``'s
``baselines``; :func:`record_baselines` writes them to ``metrics.jsonl`` as the run finishes).
A run without a validation split fits none (nothing to compare them on), and an input kind
without a linear model (a language model, token ids given as they are) has none. The test split
is never read for them: it is read once, at the end, by the run's chosen model alone.

A run that leaves ``--model`` to the kind also compares its model with the linear one
(:func:`choose`, as it finishes): on the validation accuracy of the best checkpoint against the
linear model's (fitted on every train row), the validation loss when they tie (a regression: the
loss); the linear model is kept when it does better, or as well on both (the simpler model wins
ties). It then is the run's model: its weights
are checkpointed (the default's checkpoints kept in ``candidates/NAME/checkpoints``, its spec in
``choice``'s ``kept_model``), exported to
``model/``, evaluated on the test split and served by eval and predict, and ``config.json``
records it as the run's ``--model`` and the choice (``choice``), which ``--resume`` and eval
rebuild from.

>>> _compared("classification"), _compared("regression")
(('eval_accuracy', True), ('eval_loss', False))
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from jaxfeed import DataLoader
from jaxfeed._base.files import atomic_write
from jaxfeed.recipes.config import budget as budgetmod
from jaxfeed.recipes.kinds.base import Baseline
from jaxfeed.recipes.kinds.builtins import BUILTINS
from jaxfeed.recipes.run import CHOSEN, open_checkpoints, settle_choice
from jaxfeed.recipes.spec import TARGETS
from jaxfeed.recipes.train.record import Run
from jaxfeed.recipes.train.trainer import build_trainer
from jaxfeed.train.linear_fit import Design, LinearFit, figures, fit_on_validation

FEATURE_BATCH = 256  # rows a batch when the baselines' features are computed


@dataclass
class Candidate:
    """The linear model as fitted: the kind's :class:`Baseline`, its model (holding the fitted
    weights) and the fit."""

    baseline: Baseline
    model: Any
    fit: LinearFit


def _compared(task: str) -> tuple[str, bool]:
    """The validation figure the choice compares, and whether higher is better."""
    return ("eval_accuracy", True) if task == "classification" else ("eval_loss", False)


# ---------------------------------------------------------------------------------- plan
def fit_baselines(run: Run) -> None:
    """The baselines of a new run (and the linear model's weights of a resumed run whose choice
    is still to be made), their line, and whether the run's model is compared with the linear
    one (``run.choice``)."""
    prep, kind = run.prep, run.kind
    assert prep is not None and kind is not None
    recorded = run.record.resolved.get("choice") if run.record is not None else None
    if run.record is not None and (not isinstance(recorded, dict) or "chosen" in recorded):
        return  # a resumed run: its baselines as recorded, its choice made (or none due)
    if run.loaders[1] is None:
        return  # no validation rows to compare on: no baselines, no choice, no read of train
    baseline = kind.baseline(prep)
    if baseline is None or run.task not in ("classification", "regression"):
        return
    if jax.process_count() > 1:
        run.say("baselines: not fitted in a run of several processes")
        return
    from flax import nnx  # import cost: flax, when the baselines are fitted

    builtin = BUILTINS[baseline.model]
    model = builtin.build(builtin, kind, prep, run.outputs, dict(baseline.init_args), nnx.Rngs(0))
    train, rows = _train_rows(run, model)
    x, y = _design(run, model, _loader(run, train))
    held = _design(run, model, run.loaders[1])
    fit = fit_on_validation(
        x, y, *held, task=run.task, classes=run.outputs,
        class_weights=run.class_weights,
    )  # fmt: skip
    model.set_weights(fit.weights, fit.bias)
    run.candidate = Candidate(baseline, model, fit)
    found = {
        "majority": _majority(run, held),
        "linear": {
            "model": baseline.model, "init_args": dict(baseline.init_args),
            "reads": baseline.reads, "rows": rows, "l2": fit.l2,
            "seconds": round(fit.seconds, 2), **_named(run, fit.figures, "eval"),
        },
    }  # fmt: skip
    if run.baselines is None:  # a resumed run keeps the figures it recorded
        run.baselines = found
    if run.record is None and _compares(run, rows):
        run.choice = {"candidates": [run.config.model_spec.text, baseline.model]}
    run.say(_line(run, found))


def _compares(run: Run, rows: int) -> bool:
    """Whether the run's model is compared with the linear one: a built-in chosen by the kind
    (no ``--model``, no ``--api linen``), a validation split to compare on, its checkpoint
    selected by the lowest validation loss (a ``--monitor`` or ``--monitor-mode`` of the user's
    selects by a figure the comparison does not read: the best checkpoint as it ranks them is
    kept), and the linear model fitted on every train row."""
    return (
        not run.model_given
        and run.config.api == "nnx"
        and run.selection
        and (run.best_metric, run.best_mode) == ("eval_loss", "min")
        and rows == run.splits.train.num_rows
    )


def _train_rows(run: Run, model: Any) -> tuple[Any, int]:
    """The train rows the linear model is fitted on: all of them, or a seeded sample of as
    many as the budget allows."""
    train, prep = run.splits.train, run.prep
    kernel = getattr(model, "kernel", None)  # a linear model's, else a bag of n-grams'
    width = kernel.shape[0] if kernel is not None else model.n * int(prep.input_shape[0])
    rows = budgetmod.baseline_rows(train.num_rows, width, run.outputs)
    if rows < train.num_rows:
        picked = np.random.default_rng(run.config.seed).choice(train.num_rows, rows, replace=False)
        train = train.select(np.sort(picked))
    return train, rows


def _loader(run: Run, ds: Any) -> Any:
    """The rows of ``ds`` as the run's evaluation reads them (its transform, padding, row
    transform), in order."""
    prep, kind = run.prep, run.kind
    batches = -(-ds.num_rows // FEATURE_BATCH)
    return DataLoader(
        kind.prepare(prep, ds), FEATURE_BATCH, transform=prep,
        num_workers=run.config.num_workers, **kind.held_options(prep, batches),
    )  # fmt: skip


def _design(run: Run, model: Any, loader: Any) -> tuple[Design, np.ndarray]:
    """The linear model's features of the rows ``loader`` gives (computed on the host, by the
    model's own :meth:`features` after the run's on-device conversion), and their targets."""
    prep, kind = run.prep, run.kind
    inputs = kind.model_inputs(prep, model)
    convert = kind.trainer_options(run.config, prep, None)["preprocess"]
    parts, targets = [], []
    for batch in loader:
        batch = {k: np.asarray(v) for k, v in batch.items()}
        batch = convert(batch) if convert is not None else batch
        if isinstance(inputs, str):
            parts.append(model.features(batch[inputs]))
        else:
            parts.append(model.features(**{a: batch[c] for a, c in inputs.items()}))
        targets.append(batch[TARGETS])
    y = np.concatenate(targets)
    kept = y >= 0 if run.task == "classification" else np.ones(len(y), bool)  # -1: no label
    if not isinstance(parts[0], tuple):
        return Design.dense(np.concatenate(parts)[kept]), y[kept]
    k = max(p[0].shape[1] for p in parts)  # batches padded to different lengths: zeros added
    index = np.concatenate([np.pad(p[0], ((0, 0), (0, k - p[0].shape[1]))) for p in parts])
    value = np.concatenate([np.pad(p[1], ((0, 0), (0, k - p[1].shape[1]))) for p in parts])
    return Design.sparse(index[kept], value[kept], model.buckets), y[kept]


def _majority(run: Run, held: tuple[Design, np.ndarray]) -> dict[str, Any]:
    """The majority class's figures (the train split's class frequencies as its prediction),
    or the train mean's (a regression: 0 on the standardised target)."""
    prior = _prior(run)
    if run.task != "classification":
        return {"predicts": "the train mean", **_named_split(run, held, prior, "eval")}
    label = run.data.labels[int(prior.argmax())]
    return {"predicts": repr(label), **_named_split(run, held, prior, "eval")}


def _prior(run: Run) -> np.ndarray:
    """The majority baseline's outputs: the log of the train split's class frequencies (each
    count plus one: never 0 for a class unseen), or 0 (the standardised train mean)."""
    if run.task != "classification":
        return np.zeros(1)
    labels = np.asarray(run.splits.train.with_format("numpy")[run.data.columns.label])
    counts = np.bincount(labels[labels >= 0].astype(np.int64), minlength=run.outputs)
    return np.log((counts + 1) / (counts.sum() + run.outputs))


def _named_split(run: Run, held: tuple[Design, np.ndarray], row: np.ndarray,
                 split: str) -> dict[str, float]:  # fmt: skip
    """The figures of a constant prediction ``row`` on ``held``'s targets."""
    outputs = np.broadcast_to(row, (len(held[1]), len(row)))
    return _named(run, figures(outputs, held[1], run.task, _weights(run)), split)


def _weights(run: Run) -> np.ndarray | None:
    return None if run.class_weights is None else np.asarray(run.class_weights)


def _named(run: Run, found: dict[str, float], split: str) -> dict[str, float]:
    """A fit's figures named as the run's metrics are (``eval_loss``, ``eval_accuracy``; a
    regression's RMSE in the label's units, from the loss before it is rounded: a near-perfect
    fit's loss of 5e-7 on the standardised target is an RMSE of 0.07 in prices of ~100), to 6
    significant digits.

    >>> _significant(5.07e-07), _significant(113.70668512)
    (5.07e-07, 113.707)
    """
    out = {f"{split}_{k}": _significant(v) for k, v in found.items()}
    if run.task == "regression" and "loss" in found:
        scale = float(run.prep.target_std or 1.0)
        out[f"{split}_rmse"] = _significant(np.sqrt(float(found["loss"])) * scale)
    return out


def _significant(value: float) -> float:
    return float(f"{float(value):.6g}")


def _line(run: Run, found: dict[str, Any]) -> str:
    """What the baselines score on validation, and whether the run's model is compared."""
    key, _ = _compared(run.task)
    if run.task == "regression":
        key = "eval_rmse"
    shown = key.removeprefix("eval_").replace("rmse", "RMSE")
    majority, linear = found["majority"], found["linear"]
    what = "logistic regression" if run.task == "classification" else "least squares"
    name = run.splits.eval_name or "validation"
    fitted = f"{linear['rows']:,} train rows" + (
        "" if linear["rows"] == run.splits.train.num_rows else " (a sample: the budget's)"
    )
    line = (
        f"baselines ({name} {shown}): majority {_shown(majority.get(key))} (predicts "
        f"{majority['predicts']}); linear {_shown(linear.get(key))} ({what} on {linear['reads']}; "
        f"L2 {linear['l2']:g} chosen on {name}; {fitted}; {linear['seconds']:.1f} s)"
    )
    if run.choice is not None:
        default = run.choice["candidates"][0]
        line += (
            f"; the {default} is compared with the linear model on {name} at the end, and the "
            f"linear model kept if it does as well (--model {default} trains the {default} "
            "alone)"
        )
    return line


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


# ---------------------------------------------------------------------------------- finish
def choose(run: Run, trainer: Any) -> Any:
    """The run's model, chosen on validation between the trainer's best checkpoint and the
    linear model (when the run compares them: see the module docstring): the trainer, or the
    linear model's, whose checkpoint then takes the place of the default's. Says why."""
    choice, candidate = run.choice, run.candidate
    if choice is None or "chosen" in choice or candidate is None or run.baselines is None:
        return trainer
    manager = open_checkpoints(run.out, run.to_record())
    try:
        step = manager.best_step
        theirs = {} if step is None else manager.metrics(step)
    finally:
        manager.close()
    mine = run.baselines["linear"]
    default, linear = choice["candidates"]
    decided = _decide(run.task, mine, theirs)
    if decided is None:
        return trainer
    wins, key = decided
    choice.update(
        chosen=linear if wins else default, by=key,
        figures={default: theirs.get(key), linear: mine.get(key)},
    )  # fmt: skip
    said = _said(run, key, mine, theirs, default, wins)
    if not wins:
        run.write_record()
        run.say(f"model: {default}, chosen on {said}")
        return trainer
    choice["kept"] = f"candidates/{default}/checkpoints"
    choice["kept_model"] = run.config.saved()["model"]  # the trained model's spec, as recorded
    chosen = _install(run, trainer, candidate)
    run.say(
        f"model: {linear}, chosen on {said}: it is the run's model (checkpoints/, model/, eval, "
        f"predict); the {default}'s checkpoints are kept in {choice['kept']}"
    )
    return chosen


def _decide(task: str, mine: dict[str, Any], theirs: dict[str, Any]) -> tuple[bool, str] | None:
    """Whether the linear model (``mine``) is chosen over the default (``theirs``), and the
    figure that decided: a classifier's validation accuracy, the loss when the accuracies tie
    (a regression: the loss); the linear model when the losses tie too (None: a figure missing).

    >>> _decide("classification", {"eval_accuracy": 0.9, "eval_loss": 0.3},
    ...         {"eval_accuracy": 0.9, "eval_loss": 0.2})
    (False, 'eval_loss')
    >>> _decide("classification", {"eval_accuracy": 0.91, "eval_loss": 0.3},
    ...         {"eval_accuracy": 0.9, "eval_loss": 0.2})
    (True, 'eval_accuracy')
    """
    key, higher = _compared(task)
    if mine.get(key) is None or theirs.get(key) is None:
        return None
    a, b = float(mine[key]), float(theirs[key])
    if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6):
        return (a > b if higher else a < b), key
    if key != "eval_loss" and mine.get("eval_loss") is not None and "eval_loss" in theirs:
        a, b = float(mine["eval_loss"]), float(theirs["eval_loss"])
        if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6):
            return a < b, "eval_loss"
    return True, key


def _said(run: Run, key: str, mine: dict[str, Any], theirs: dict[str, Any], default: str,
          wins: bool) -> str:  # fmt: skip
    """Why the choice fell as it did, for its line."""
    name = run.splits.eval_name
    shown = key.removeprefix("eval_").replace("_", " ")
    figures_ = (
        f"{_shown(mine.get(key))} for the linear model, {_shown(theirs.get(key))} for the {default}"
    )
    compared, _ = _compared(run.task)
    if key != compared:  # the accuracies tied
        tie = compared.removeprefix("eval_")
        return f"{name} {shown}, the {tie} tied at {_shown(mine.get(compared))} ({figures_})"
    tied = math.isclose(float(mine[key]), float(theirs[key]), rel_tol=1e-6, abs_tol=1e-6)
    return f"{name} {shown} ({figures_}{'; the simpler model wins ties' if tied and wins else ''})"


def _install(run: Run, trainer: Any, candidate: Candidate) -> Any:
    """The linear model as the run's: a trainer of it (at the step and epoch the run ended),
    its checkpoint (the validation figures its trainer measures) staged in ``checkpoints.chosen``,
    ``config.json`` naming it the run's model (the one write that decides), then the folders
    settled (:func:`~jaxfeed.recipes.run.settle_choice`)."""
    baseline = candidate.baseline
    config = dataclasses.replace(
        run.config, model={"class_path": baseline.model, "init_args": dict(baseline.init_args)}
    )
    chosen = build_trainer(run, config, out=run.out, verbose=0, model=candidate.model)
    chosen.step, chosen.epoch, chosen.history = trainer.step, trainer.epoch, trainer.history
    metrics = {f"eval_{k}": v for k, v in chosen.evaluate(run.loaders[1]).items()}
    staged = run.out / CHOSEN
    if run.primary:
        from jaxfeed.train.checkpoint import CheckpointManager  # import cost: orbax, when chosen

        shutil.rmtree(staged, ignore_errors=True)  # an earlier attempt's, cut short
        manager = CheckpointManager(
            staged, best_metric=run.best_metric, best_mode=run.best_mode, async_save=False
        )
        try:
            chosen.save_checkpoint(manager, None, metrics)
        finally:
            manager.close()
    run.config = config
    run.write_record()
    if run.primary:
        settle_choice(run.out, run.to_record())
    return chosen


def record_baselines(run: Run) -> None:
    """The baselines' validation figures written to ``metrics.jsonl`` as the run finishes (a
    ``"kind": "baselines"`` row, before the test row; a resumed run's replaces the earlier one),
    and ``config.json`` with them. The test split is not read here: only the chosen model reads
    it, once (:func:`~jaxfeed.recipes.train.finish.finish`)."""
    found = run.baselines
    if found is None:
        return
    run.write_record()
    if run.primary:
        path = run.out / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        kept = [line for line in lines if '"kind": "baselines"' not in line]
        row = json.dumps({"kind": "baselines", **found})
        atomic_write(path, "".join(f"{line}\n" for line in [*kept, row]))


def summary_rows(run: Run) -> list[tuple[str, dict[str, float]]]:
    """The baselines' figures as the summary table shows them: ``(label, figures)``."""
    found = run.baselines or {}
    return [(f"baseline ({name})", found[name]) for name in ("majority", "linear") if name in found]


def chosen_linear(run: Run) -> str | None:
    """The linear model's name when it is the run's model, chosen on validation (else None)."""
    choice = run.choice or {}
    linear = (choice.get("candidates") or [None, None])[1]
    return linear if "kept" in choice and choice.get("chosen") == linear else None
