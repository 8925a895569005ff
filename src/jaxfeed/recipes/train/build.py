"""Stage 3 of a run: build its trainer. ``--lr auto``'s range test, the trainer (its model made by
the run's model source), ``--monitor`` checked against its metrics, a resumed run's checkpoint
restored, a pretrained language model's perplexity before fine-tuning, the run folder's files
(``config.json``, a model file's copy, the tokenizer, a checkpoint's preprocessor), and the line
that says what trains where.

>>> import tempfile
>>> from jaxfeed.recipes.config import RunConfig
>>> from jaxfeed.recipes.train.opening import open_run
>>> from jaxfeed.recipes.train.plan import plan
>>> with open_run(RunConfig(out=tempfile.mkdtemp() + "/run"), lambda *a: None, 0) as run:
...     plan(run)
...     trainer = build(run)
>>> trainer.step, sorted(p.name for p in run.out.iterdir())
(0, ['config.json'])
>>> _args({"width": 64}), _args({})
('(width=64)', '')
"""

from __future__ import annotations

import json
from typing import Any

import jax

from jaxfeed._base.files import atomic_write
from jaxfeed.recipes.config import ConfigError, did_you_mean
from jaxfeed.recipes.config.budget import epoch_count
from jaxfeed.recipes.train import lr_finder
from jaxfeed.recipes.train.loaders import make_loaders
from jaxfeed.recipes.train.record import Run
from jaxfeed.recipes.train.resume import restore
from jaxfeed.recipes.train.trainer import build_trainer
from jaxfeed.runtime.devices import describe_devices
from jaxfeed.runtime.sharding import ShardingPlan, data_axis


def build(run: Run) -> Any:
    """The run's trainer, restored to a resumed run's checkpoint, with the run folder written:
    everything checked that can be before the folder holds anything new."""
    found = _find_lr(run)
    trainer = build_trainer(run, out=run.out, verbose=run.verbose)
    # the initialisers compiled a program per parameter shape (~25 for the text transformer, about
    # 50 MB held in JAX's caches) that nothing runs again: dropped before the steps compile, where
    # the process is the run's alone (a caller's process keeps its own functions' programs; a
    # test worker emptied them for every later test: 10-30% more CPU in the files after it)
    if run.own_process:
        jax.clear_caches()
    monitors = {"eval_loss"} | {f"eval_{m}" for m in (*trainer.metrics, *trainer.split_metrics)}
    if run.selection and run.best_metric not in monitors:
        raise ConfigError(
            f"--monitor {run.best_metric}: not among this run's validation metrics "
            f"{sorted(monitors)}{did_you_mean(run.best_metric, monitors)}; --metrics adds some"
        )
    if run.record is not None:  # the checkpoint and the loader's position checked before any write
        restore(trainer, run.out, run.config, run.to_record(), run.loaders[0], run.primary, run.say)
    assert run.model_source is not None  # a language model's perplexity before fine-tuning
    before = run.model_source.before_fine_tuning(
        trainer, run.loaders[1], run.splits.eval_name, run.record, run.say
    )
    if before is not None:
        run.pretrained_eval = before
    if run.primary:
        _write_folder(run, found)
    _say_setup(run)
    for line in run.model_source.model_lines(trainer.model):  # LoRA and int8: what trains
        run.say(line)
    return trainer


def _find_lr(run: Run) -> dict[str, Any] | None:
    """``--lr auto``: the range test's record (its rate set in ``run.config``); else None."""
    prep, kind, config = run.prep, run.kind, run.config
    assert prep is not None and kind is not None

    def loader() -> Any:
        train = kind.prepare(prep, run.splits.train)
        return make_loaders(train, {}, prep, kind, config, run.say, run.mesh)[0]

    assert run.model_source is not None
    default = (run.model_source.default_lr(), run.model_source.default_whose())
    run.config, found = lr_finder.resolve(
        config, lambda probe: build_trainer(run, probe), loader, run.say, default
    )
    if found is not None:
        run.lr_finder = {k: v for k, v in found.items() if k != "curve"}
    return found


def _write_folder(run: Run, found: dict[str, Any] | None) -> None:
    """A new run's files (a model file's copy, the kind's: a tokenizer, a checkpoint's
    preprocessor config), ``config.json`` and ``lr_finder.json``."""
    out, record, prep, kind = run.out, run.record, run.prep, run.kind
    assert prep is not None and kind is not None
    out.mkdir(parents=True, exist_ok=True)
    if record is None:
        assert run.model_source is not None
        if (code := run.model_source.copy_code(out)) is not None:
            run.model_code = code
        kind.write_files(prep, out)
        run.model_source.write_files(out)
    run.write_record()
    if found is not None:
        atomic_write(out / "lr_finder.json", json.dumps(found, indent=1))


def _say_setup(run: Run) -> None:
    """The model, the budget and the devices in one line (a mesh axis nothing uses: a note)."""
    config, mesh = run.config, run.mesh
    where = describe_devices()
    if mesh is not None:
        axes = ",".join(f"{k}={v}" for k, v in mesh.shape.items())
        where += f" (mesh {axes}, sharding {json.dumps(config.sharding)})"
        unused = ShardingPlan.parse(config.sharding).unused_axes(mesh)
        if unused:
            run.say(
                f"note: mesh axis {', '.join(f'{a}={mesh.shape[a]}' for a in unused)} is used by "
                f"nothing: sharding {json.dumps(config.sharding)} splits batches (and FSDP "
                f"weights) over {data_axis(mesh)!r} only; its devices hold copies (name the axis in "
                "--sharding rules, or leave it out of --mesh)"
            )
    model = config.model_spec
    assert model is not None  # resolved: the kind's default when --model named none
    optimizer_name, optimizer_args = config.component("optimizer")
    schedule_name, schedule_args = config.component("schedule")
    run.say(
        f"model {model.text}{_args(model.init_args)} ({config.api}), {epoch_count(config.epochs)}"
        f"{'' if config.max_steps is None else f' (at most {config.max_steps} steps)'}, batch "
        f"{config.batch_size}, {optimizer_name}{_args(optimizer_args)} lr {config.lr:g} "
        f"({schedule_name}{_args(schedule_args)}), on {where}; run folder {run.out}"
    )


def _args(values: dict[str, Any]) -> str:
    """``(width=64, b1=0.9)`` of init_args, or nothing."""
    return "(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")" if values else ""
