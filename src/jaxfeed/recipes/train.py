"""The training recipe: a :class:`RunConfig` in, a run folder out.

>>> import tempfile
>>> config = RunConfig(epochs=1, out=tempfile.mkdtemp() + "/run")
>>> result = train(config, say=lambda *a, **k: None, verbose=0)
>>> result.best["epoch"], sorted(p.name for p in result.out.iterdir())[:3]
(1, ['checkpoints', 'config.json', 'curves.png'])
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jaxfeed.recipes.config import (
    ConfigError,
    RunConfig,
    RunRecord,
    read_config_file,
    read_run,
)
from jaxfeed.recipes.models import CodePolicy, model_file
from jaxfeed.recipes.preprocess import Preprocessing, TableOptions, plan
from jaxfeed.recipes.run import (
    BEST_METRIC,
    absolute_paths,
    check_out_folder,
    copy_model_code,
    load_run_data,
    lock_run_folder,
    model_copy,
    outputs_of,
    preprocessing_of,
)


def configure(flags: dict[str, Any], config_file: str | None = None) -> RunConfig:
    """The run's options: defaults, then ``config_file``, then ``flags`` (the options given on the
    command line); with ``resume`` the run's own ``config.json`` replaces the defaults and the
    file, and a flag that contradicts it is refused (only ``resumable`` options may change)."""
    import dataclasses

    config = RunConfig()
    if flags.get("resume"):
        if config_file is not None:
            raise ConfigError("--resume reads the run's own config.json; drop --config")
        if not flags.get("out"):
            raise ConfigError("--resume needs --out RUN (the run folder to continue)")
        out = Path(flags["out"])
        check_out_folder(out, resume=True)
        saved = read_run(out).options
        saved = saved.replace(absolute_paths(_paths_of(saved)), str(out / "config.json"))
        wanted = saved.replace(absolute_paths(flags), "command line")
        fields = {f.name: f for f in dataclasses.fields(RunConfig)}
        for name in wanted.differences(saved):
            if not fields[name].metadata["resumable"]:
                flag = "--" + name.replace("_", "-")
                allowed = ", ".join(
                    "--" + f.name.replace("_", "-")
                    for f in fields.values()
                    if f.metadata["resumable"]
                )
                raise ConfigError(
                    f"--resume: {flag} {getattr(wanted, name)!r} contradicts the run's saved {name} "
                    f"{getattr(saved, name)!r} ({out / 'config.json'}); a resumed run keeps its "
                    f"configuration (only {allowed} may change)"
                )
        return wanted
    if config_file is not None:
        config = config.replace(read_config_file(config_file), f"--config {config_file}")
    config = config.replace(flags, "command line")
    return config.replace(absolute_paths(_paths_of(config)), "command line")


def _paths_of(config: RunConfig) -> dict[str, Any]:
    return {"data": config.data, "data_dir": config.data_dir, "model": config.model}


@dataclass
class TrainResult:
    out: Path
    history: Any
    best: dict[str, Any] | None
    seconds: float


def _default_out(config: RunConfig) -> Path:
    name = Path(config.data).name or "data"
    model = config.model or "auto"
    if ":" in model:
        model = model.rpartition(":")[2]
    return Path("runs") / f"{name}-{model}-{datetime.now():%Y%m%d-%H%M%S}"


def train(config: RunConfig, *, say: Callable[..., None] = print, verbose: int = 1) -> TrainResult:
    """Train the run described by ``config`` (``config.resume``: continue it). ``say`` prints the
    recipe's lines, ``verbose`` the trainer's (0: silent, 1: a line per epoch and a progress bar)."""
    import jax

    from jaxfeed import distributed

    try:
        distributed.initialize(config.coordinator, config.num_processes, config.process_id)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    primary = jax.process_index() == 0
    if not primary:
        say = _silent
    out = Path(config.out) if config.out else _default_out(config)
    config = config.replace(absolute_paths(_paths_of(config)), "the run's options")
    if config.tensorboard and importlib.util.find_spec("tensorboardX") is None:
        raise ConfigError(
            "--tensorboard needs tensorboardX, an optional part: pip install 'jaxfeed[tensorboard]'"
        )
    check_out_folder(out, config.resume)
    lock = lock_run_folder(out, config.resume) if primary else None
    try:
        return _train(config, out, primary, say, verbose)
    finally:
        if lock is not None:
            lock.release()


def _train(
    config: RunConfig, out: Path, primary: bool, say: Callable[..., None], verbose: int
) -> TrainResult:
    """The body of :func:`train`, run while the run folder is locked."""
    import jax

    record = read_run(out) if config.resume else None
    policy = CodePolicy(
        copy=None if record is None else model_copy(record, out), trust=config.trust_code
    )
    if ":" in (config.model or ""):
        model_file(config.model, policy)  # a missing file or copy is refused before any work
    labels = (
        record.resolved["labels"]
        if record and record.resolved["task"] == "classification"
        else None
    )
    run_data = load_run_data(config, labels)
    splits, columns = run_data.splits, run_data.columns
    say(f"data {run_data.source.path}: detected {run_data.source.kind}")
    if splits.note:
        say(splits.note)
    if record is not None:
        prep = preprocessing_of(record, str(out / "config.json"))
        notes = ["preprocessing: as saved in the run"]
    else:
        table = TableOptions(
            given=columns.given,
            categorical=config.categorical_columns,
            impute=config.missing == "impute",
            excluded=columns.excluded,
        )
        prep, notes = plan(
            splits.train,
            columns.inputs,
            columns.label,
            columns.kind,
            run_data.task,
            config.image_hw(),
            table,
            config.image_mode,
        )
    for note in notes:
        say(note)
    target = (
        f"label {columns.label!r} ({len(run_data.labels)} classes)"
        if run_data.task == "classification"
        else f"target {columns.label!r} (regression)"
    )
    say(
        f"{splits.train.num_rows:,} train / {splits.eval.num_rows:,} {splits.eval_name} rows; "
        f"inputs {prep.input_shape}, {target}"
    )
    model = config.model or ("mlp" if prep.kind == "table" else "cnn")
    config = _resolved_options(config, model, columns, run_data.task, prep)
    resolved = {
        "task": run_data.task,
        "labels": run_data.labels,
        "preprocess": prep.to_dict(),
        "best_metric": BEST_METRIC,
        "data_kind": run_data.source.kind,
        "eval_split": splits.eval_name,
        "processes": jax.process_count(),
        "devices": jax.device_count(),
    }
    if record is not None:
        resolved["best_metric"] = record.resolved.get("best_metric", BEST_METRIC)
        if "model_code" in record.resolved:
            resolved["model_code"] = record.resolved["model_code"]
    train_ds, eval_ds = prep.prepare(splits.train), prep.prepare(splits.eval)
    mesh = _mesh(config)
    loaders = _loaders(train_ds, eval_ds, prep, config, say, mesh)
    from jaxfeed.recipes.models import build_trainer

    outputs = outputs_of(run_data.task, run_data.labels)
    trainer = build_trainer(config, prep, outputs, len(loaders[0]), out, verbose, policy,
                            mesh=mesh, sharding=config.sharding)  # fmt: skip
    if primary:
        from jaxfeed.files import atomic_write

        out.mkdir(parents=True, exist_ok=True)
        if record is None and (code := copy_model_code(config, out)) is not None:
            resolved["model_code"] = code
        atomic_write(out / "config.json", RunRecord(config, resolved).to_json())
    where = (
        f"{jax.device_count()} devices in {jax.process_count()} processes"
        if jax.device_count() > 1
        else str(jax.devices()[0])
    )
    if mesh is not None:
        axes = ",".join(f"{k}={v}" for k, v in mesh.shape.items())
        where += f" (mesh {axes}, sharding {json.dumps(config.sharding)})"
    say(
        f"model {model} ({config.api}), {config.epochs} epochs, batch {config.batch_size}, "
        f"{config.optimizer} lr {config.lr:g} ({config.schedule}), on {where}; run folder {out}"
    )
    metric = resolved["best_metric"]
    trainer.resume_hint = f"jaxfeed train --out {out} --resume"
    if config.tensorboard:
        say(f"TensorBoard: tensorboard --logdir {out / 'tensorboard'}")
    start = time.perf_counter()
    try:
        history = trainer.fit(
            loaders[0],
            loaders[1],
            epochs=config.epochs,
            max_steps=config.max_steps,
            eval_every=config.eval_every,
            checkpoint_every=config.checkpoint_every,
            checkpoint_dir=out / "checkpoints",
            resume=config.resume,
            checkpoint_options={
                "best_metric": metric,
                "best_mode": "min" if "loss" in metric else "max",
            },
        )
    except KeyboardInterrupt:
        done = trainer.epoch
        print(
            f"\ninterrupted during epoch {done + 1}: checkpoints up to epoch {done} are in "
            f"{out / 'checkpoints'}; resume with: jaxfeed train --out {out} --resume",
            file=sys.stderr,
        )
        raise
    seconds = time.perf_counter() - start
    memory = trainer.state_bytes_per_device()  # as trained (the export below gathers)
    best = _export_best(trainer, out, config, run_data, prep, resolved, primary, say)
    if best is not None:
        state = (
            ""
            if mesh is None
            else f"{_size(memory)} per device (sharding {json.dumps(config.sharding)})"
        )
        _summary(say, history, best, seconds, run_data.task, prep, out, splits.eval_name, state)
    return TrainResult(out, history, best, seconds)


def _silent(*args: Any, **kwargs: Any) -> None:
    pass


def _size(n: int) -> str:
    """Bytes for people: ``_size(1536)`` is ``'1.5 KB'``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _mesh(config: RunConfig) -> Any:
    """The run's device mesh: ``--mesh``, else one ``data`` axis over every device when there
    are several (or a sharding other than replicate asks for one); None for one device."""
    import jax

    from jaxfeed.recipes.config import parse_mesh_text
    from jaxfeed.train.sharding import default_mesh, make_mesh

    if config.mesh is not None:
        try:
            return make_mesh(parse_mesh_text(config.mesh))
        except ValueError as err:
            raise ConfigError(f"--mesh {config.mesh}: {err}") from None
    if jax.device_count() > 1 or config.sharding != "replicate":
        return default_mesh()
    return None


def _resolved_options(
    config: RunConfig, model: str, columns: Any, task: str, prep: Preprocessing
) -> RunConfig:
    """The options as the run resolved them (columns, task, model, image size), so that the saved
    ``config.json`` reproduces the run and a resume can compare flags with what was used."""
    import dataclasses

    size = f"{prep.image_size[0]}x{prep.image_size[1]}" if prep.image_size else config.image_size
    return dataclasses.replace(
        config,
        model=model,
        input_columns=list(prep.input_columns),
        label_column=columns.label,
        task=task,
        image_size=size if prep.kind == "image" else config.image_size,
    )


def _loaders(train: Any, test: Any, prep: Preprocessing, config: RunConfig, say: Callable,
             mesh: Any = None) -> tuple:  # fmt: skip
    """Loaders for one device, or split over the data axis of the mesh (every device of every
    process by default)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from jaxfeed import DataLoader
    from jaxfeed.train.sharding import data_axis

    kwargs: dict[str, Any] = {"num_workers": config.num_workers, "transform": prep}
    drop_eval = False
    if mesh is not None and mesh.size > 1:
        axis = data_axis(mesh)
        count = mesh.shape[axis]
        if config.batch_size % count:
            raise ConfigError(
                f"--batch-size {config.batch_size} must be a multiple of the {count} devices"
                + (f" of the mesh's data axis {axis!r}" if len(mesh.shape) > 1 else "")
            )
        kwargs["sharding"] = NamedSharding(mesh, PartitionSpec(axis))
        drop_eval = (test.num_rows % config.batch_size) % count != 0
        if drop_eval:
            say(
                f"note: the last {test.num_rows % config.batch_size} eval rows do not split over {count} devices and are skipped"
            )
    if train.num_rows < config.batch_size and jax.device_count() > 1:
        raise ConfigError(
            f"--batch-size {config.batch_size} is larger than the {train.num_rows} train rows"
        )
    train_loader = DataLoader(
        train,
        config.batch_size,
        shuffle=True,
        seed=config.seed,
        drop_last=jax.device_count() > 1,
        **kwargs,
    )
    return train_loader, DataLoader(test, config.batch_size, drop_last=drop_eval, **kwargs)


def _export_best(
    trainer: Any,
    out: Path,
    config: RunConfig,
    run_data: Any,
    prep: Preprocessing,
    resolved: dict,
    primary: bool,
    say: Callable[..., None],
) -> dict[str, Any] | None:
    """Restore the best checkpoint (as eval and predict will pick it) and write it to ``model/``
    (:func:`jaxfeed.export`: safetensors, JSON and StableHLO) for serving. Every process
    restores (a collective read); process 0 writes. Returns ``{"step", "epoch", **metrics}``."""
    import jax

    from jaxfeed.checkpoint import CheckpointError
    from jaxfeed.export import export
    from jaxfeed.recipes.run import open_checkpoints

    manager = open_checkpoints(out, RunRecord(config, resolved))
    try:
        step = manager.best_step
        if step is None:
            return None
        best = {**manager.metrics(step), "step": step, "epoch": manager.meta(step)["epoch"]}
        trainer.restore_checkpoint(manager, step)
    except CheckpointError as err:
        raise ConfigError(f"{out}: {err}") from err
    finally:
        manager.close()
    if jax.process_count() > 1:  # a state split over processes, whole on each (a collective)
        trainer.gather()
    if not primary:
        return best
    extra = {
        "labels": run_data.labels,
        "task": run_data.task,
        "preprocess": prep.to_dict(),
        "checkpoint_step": step,
        "checkpoint_epoch": best["epoch"],
    }
    try:
        export(trainer, out / "model", extra=extra, preprocessing=prep.serving(run_data.labels))
    except Exception as err:
        if ":" not in (config.model or ""):
            raise
        # a model of your own that jax.export cannot trace: eval and predict use the checkpoints
        say(
            f"note: model/ not written ({type(err).__name__}: {err}); eval and predict use checkpoints/"
        )
        return best
    follow_umask(out / "model")
    return best


def follow_umask(folder: Path) -> None:
    """Give ``folder`` and its files the modes the process umask gives new files (writers built
    on ``tempfile`` create them 0700 / 0600)."""
    from jaxfeed.recipes.run import umask_mode

    folder.chmod(umask_mode(0o777))
    for path in folder.rglob("*"):
        path.chmod(umask_mode(0o777 if path.is_dir() else 0o666))


def _summary(say: Callable, history: Any, best: dict, seconds: float, task: str, prep: Preprocessing,
             out: Path, eval_name: str, state: str = "") -> None:  # fmt: skip
    epochs = [h for h in history if "seconds" in h and "rows_per_second" in h]
    rows = sum(h["rows_per_second"] * h["seconds"] for h in epochs) / max(
        sum(h["seconds"] for h in epochs), 1e-9
    )
    if task == "classification":
        head, value = f"{eval_name} accuracy", f"{best.get('eval_accuracy', float('nan')):.4f}"
    else:
        rmse = (best["eval_loss"] ** 0.5) * prep.target_std
        head, value = f"{eval_name} RMSE", f"{rmse:.4g}"
    say(f"\n{'best epoch':<12}{'step':<8}{'eval loss':<12}{head:<22}{'time':<10}{'rows/s':<10}")
    say(
        f"{best['epoch']:<12}{best['step']:<8}{best['eval_loss']:<12.4f}{value:<22}"
        f"{seconds:<10.1f}{rows:<10,.0f}"
    )
    say("(best: the checkpoint of lowest eval loss, the earliest on ties; eval and predict use it)")
    if state:
        say(f"model and optimizer state: {state}")
    say(
        f"\nrun folder: {out}  (config.json, metrics.jsonl, history.csv, curves.png, checkpoints/, model/)"
    )
    say(f"evaluate:   jaxfeed eval {out} --json\npredict:    jaxfeed predict {out} FILE...")
