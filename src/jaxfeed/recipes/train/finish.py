"""Stage 5 of a run: finish. The run's model chosen (its own, or the linear baseline when that
does as well on validation: :mod:`~jaxfeed.recipes.train.candidates`), the chosen checkpoint
restored and exported to ``model/``, the test split read once on it (by the chosen model alone;
the baselines' validation figures written beside), and
the summary (:mod:`jaxfeed.recipes.train`'s example runs every
stage, this one included)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax

from jaxfeed._base.files import atomic_write
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.run import open_checkpoints, umask_mode
from jaxfeed.recipes.sources.base import ModelSource
from jaxfeed.recipes.train import candidates
from jaxfeed.recipes.train.record import Run, TrainResult
from jaxfeed.recipes.train.summary import size_text, summary
from jaxfeed.train.checkpoint import CheckpointError


def finish(run: Run, trainer: Any, history: Any, seconds: float) -> TrainResult:
    """Choose the run's model (its own or the linear baseline, on validation), export its
    chosen checkpoint, evaluate the test split on it (only: model selection never reads the test
    split), record the baselines' validation figures, say the summary;
    ``curves.png`` is drawn by another process meanwhile (the trainer's fit left it out: see
    :func:`~jaxfeed.recipes.train.trainer.build_trainer`), and waited for before the summary."""
    curves = None if trainer.plot_curves else trainer.draw_curves(background=True)
    try:
        trainer = candidates.choose(run, trainer)
        memory = trainer.state_bytes_per_device()  # as trained (the export below gathers)
        best = export_best(run, trainer)
        test = None
        candidates.record_baselines(run)
        if best is not None and run.loaders[2] is not None:
            test = _test_once(trainer, run.loaders[2], best, run.out, run.primary)
    except BaseException:
        if curves is not None:
            curves.cancel()
        raise
    if curves is not None:
        try:
            curves.result()
        except Exception as err:  # matplotlib failed: the run itself is done and exported
            run.say(f"note: curves.png not written ({type(err).__name__}: {err})")
    if best is not None:
        state = (
            ""
            if run.mesh is None
            else f"{size_text(memory)} per device (sharding {json.dumps(run.config.sharding)})"
        )
        summary(run, history, best, test, seconds, state)
    return TrainResult(run.out, history, best, seconds, test)


def export_best(run: Run, trainer: Any) -> dict[str, Any] | None:
    """Restore the best checkpoint (as eval and predict will pick it) and write it to ``model/``
    (:func:`jaxfeed.export`: safetensors, JSON and StableHLO) for serving. Every process
    restores (a collective read); process 0 writes. Returns ``{"step", "epoch", **metrics}``."""
    out = run.out
    manager = open_checkpoints(out, run.to_record())
    try:
        step = manager.best_step if run.best_metric else manager.latest_step
        if step is None:
            return None
        meta = manager.meta(step)
        best = {**manager.metrics(step), "step": step, "epoch": meta["epoch"]}
        if meta.get("progress"):  # the run stopped inside an epoch: its last state, evaluated
            best["epoch_in_progress"] = meta["progress"]["epoch"]
        trainer.restore_checkpoint(manager, step)
    except CheckpointError as err:
        raise ConfigError(f"{out}: {err}") from err
    finally:
        manager.close()
    if jax.process_count() > 1:  # a state split over processes, whole on each (a collective)
        trainer.gather()
    if not run.primary:
        return best
    try:
        _export(run, trainer, step, best["epoch"])
    except Exception as err:
        if not may_skip_export(run.model_source):
            raise
        run.say(
            f"note: model/ not written ({type(err).__name__}: {err}); eval and predict use checkpoints/"
        )
        return best
    follow_umask(out / "model")
    return best


def _export(run: Run, trainer: Any, step: int, epoch: int) -> None:
    """``RUN/model/``: the trainer's state with the preprocessing it declares, as the inputs'
    kind exports it (text: strings in, with its tokenizer)."""
    prep, kind, data = run.prep, run.kind, run.data
    assert prep is not None and kind is not None
    extra = {
        "labels": data.labels,
        "task": data.task,
        "preprocess": prep.to_dict(),
        "checkpoint_step": step,
        "checkpoint_epoch": epoch,
    }
    kind.export(trainer, run.out / "model", prep, data.labels, extra)


def may_skip_export(source: ModelSource | None) -> bool:
    """Whether a failed export leaves a note instead of failing the run: a model of your own (a
    file or a module) that ``jax.export`` cannot trace; eval and predict use the checkpoints.

    >>> from jaxfeed.recipes.config.model_spec import parse_model
    >>> from jaxfeed.recipes.sources.registry import source_for
    >>> [may_skip_export(source_for(parse_model(m))) for m in ("net.py:Net", "pkg.Net", "hf:o/b")]
    [True, True, False]
    """
    return source is not None and source.runs_code


def follow_umask(folder: Path) -> None:
    """Give ``folder`` and its files the modes the process umask gives new files (writers built
    on ``tempfile`` create them 0700 / 0600)."""
    folder.chmod(umask_mode(0o777))
    for path in folder.rglob("*"):
        path.chmod(umask_mode(0o777 if path.is_dir() else 0o666))


def _test_once(
    trainer: Any, loader: Any, best: dict[str, Any], out: Path, primary: bool
) -> dict[str, Any]:
    """The test split, read once, on the chosen checkpoint (restored into ``trainer``); the row
    also goes to ``metrics.jsonl`` (``"kind": "test"``)."""
    result = {f"test_{k}": v for k, v in trainer.evaluate(loader).items()}
    row = {"kind": "test", "step": best["step"], "epoch": best["epoch"], **result}
    if primary:  # one test row: a resumed run's final evaluation replaces the earlier one
        path = out / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        kept = [line for line in lines if '"kind": "test"' not in line]
        atomic_write(path, "".join(f"{line}\n" for line in [*kept, json.dumps(row)]))
    return result
