"""The training recipe: a :class:`RunConfig` in, a run folder out.

Long because it is the one place that orders a run's steps (checks before any write, data,
budget, pretrained checkpoint, resume, fit, selection, export, summary); each step's logic lives
in its own module (``budget``, ``pretrained``, ``preprocess``, ``evaluate``, ``report``).

>>> import tempfile
>>> config = RunConfig(epochs=1, out=tempfile.mkdtemp() + "/run")
>>> result = train(config, say=lambda *a, **k: None, verbose=0)
>>> result.best["epoch"], sorted(p.name for p in result.out.iterdir())[:3]
(1, ['checkpoints', 'config.json', 'curves.png'])
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxfeed import DataLoader
from jaxfeed._base.files import atomic_write
from jaxfeed.recipes import audio as audiomod
from jaxfeed.recipes import budget as budgetmod
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes import lr_finder, pretrained, text
from jaxfeed.recipes.config import (
    ConfigError,
    RunConfig,
    RunRecord,
    did_you_mean,
    parse_mesh_text,
    read_run,
)
from jaxfeed.recipes.configure import paths_of
from jaxfeed.recipes.models import CodePolicy, build_trainer, model_file, resolve_class_weights
from jaxfeed.recipes.preprocess import Augmented, TableOptions, plan, prepare
from jaxfeed.recipes.run import (
    BEST_METRIC,
    absolute_paths,
    check_out_folder,
    copy_model_code,
    load_run_data,
    lock_run_folder,
    model_copy,
    open_checkpoints,
    outputs_of,
    preprocessing_of,
    umask_mode,
)
from jaxfeed.recipes.spec import TEXT_KINDS, Preprocessing
from jaxfeed.runtime import distributed
from jaxfeed.serve.export import export
from jaxfeed.train.checkpoint import CheckpointError
from jaxfeed.train.monitor import monitor_mode
from jaxfeed.train.schedule import Schedule
from jaxfeed.train.sharding import data_axis, default_mesh, make_mesh


@dataclass
class TrainResult:
    """A finished run: its folder, history, the chosen checkpoint's validation figures (``best``:
    ``step``, ``epoch``, ``eval_*``) and the test split's figures on that checkpoint (``test``:
    ``test_*``; None without a test split)."""

    out: Path
    history: Any
    best: dict[str, Any] | None
    seconds: float
    test: dict[str, Any] | None = None


def _default_out(config: RunConfig) -> Path:
    name = Path(config.data).name or "data"
    model = config.component("model")[0] or "auto"
    if pretrained.is_hub_model(model):
        model = Path(model.removeprefix(pretrained.HUB_PREFIX)).name
    elif ":" in model:
        model = model.rpartition(":")[2]
    return Path("runs") / f"{name}-{model}-{datetime.now():%Y%m%d-%H%M%S}"


def train(config: RunConfig, *, say: Callable[..., None] = print, verbose: int = 1) -> TrainResult:
    """Train the run described by ``config`` (``config.resume``: continue it). ``say`` prints the
    recipe's lines, ``verbose`` the trainer's (0: silent, 1: a line per epoch and a progress bar)."""
    try:
        distributed.initialize(config.coordinator, config.num_processes, config.process_id)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    primary = jax.process_index() == 0
    if not primary:
        say = _silent
    out = Path(config.out) if config.out else _default_out(config)
    config = config.replace(absolute_paths(paths_of(config)), "the run's options")
    if config.tensorboard and importlib.util.find_spec("tensorboardX") is None:
        raise ConfigError(
            "--tensorboard needs tensorboardX, an optional part: pip install 'jaxfeed[tensorboard]'"
        )
    text.check_options(config)
    if config.mesh is not None:
        _mesh(config)  # a --mesh the devices cannot make is refused before any data is read
    check_out_folder(out, config.resume)
    created = not out.exists()
    lock = lock_run_folder(out, config.resume) if primary else None
    try:
        return _train(config, out, primary, say, verbose)
    except (ConfigError, ImportError) as err:
        if created and lock is not None and not any(out.iterdir()):
            out.rmdir()  # refused before anything was written: leave no empty run folder
        if isinstance(err, ImportError):  # an optional part missing (tokenizers): say which
            raise ConfigError(str(err)) from err
        raise
    finally:
        if lock is not None:
            lock.release()


def _train(
    config: RunConfig, out: Path, primary: bool, say: Callable[..., None], verbose: int
) -> TrainResult:
    """The body of :func:`train`, run while the run folder is locked."""
    record = read_run(out) if config.resume else None
    policy = CodePolicy(
        copy=None if record is None else model_copy(record, out), trust=config.trust_code
    )
    model_spec = config.component("model")[0] or ""
    checkpoint = None
    if pretrained.is_hub_model(model_spec):  # resolved, hashed and checked before any write
        checkpoint = pretrained.open_checkpoint(model_spec)
        if record is not None:
            pretrained.check_unchanged(record.resolved.get("pretrained") or {}, checkpoint)
    elif ":" in model_spec:
        model_file(model_spec, policy)  # a missing file or copy is refused before any work
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
    audiomod.check_flags(columns.kind, config.sample_rate, config.clip_seconds, config.image_size)
    for note in run_data.notes:
        say(note)
    if checkpoint is not None:
        pretrained.check_data(checkpoint, columns.kind)
        if record is None and columns.kind == "image":  # the checkpoint's size, RGB
            config = pretrained.image_options(checkpoint, config)
    if record is not None:
        prep = preprocessing_of(record, str(out / "config.json"))
        notes = ["preprocessing: as saved in the run"]
        if prep.kind == "audio":
            audiomod.scan_splits(run_data.source.data, prep.input_columns[0])
        if text.is_text(prep):
            text.attach_tokenizer(prep, out)
    elif columns.kind == "audio" and checkpoint is not None:  # the checkpoint's front end
        prep, notes = pretrained.plan_audio(
            checkpoint, run_data.source.data, columns.inputs[0], columns.label, run_data.task,
            config,
        )  # fmt: skip
    elif columns.kind == "audio":
        prep, notes = audiomod.plan_audio(
            run_data.source.data, columns.inputs[0], columns.label, run_data.task, config.sample_rate,
            config.clip_seconds,
        )  # fmt: skip
    elif columns.kind in TEXT_KINDS and checkpoint is not None:
        prep, notes = pretrained.plan_text(
            checkpoint, splits.train, columns.inputs[0], columns.label, run_data.task, config
        )
    elif columns.kind in TEXT_KINDS:
        prep, notes = text.plan_text(
            splits.train, columns.inputs[0], columns.label, run_data.task, config
        )
        if columns.excluded:
            notes.append(
                f"excluded: {', '.join(c for c, _ in columns.excluded)} (the text column is the input)"
            )
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
    if config.augment:
        if prep.kind != "image" and not (prep.kind == "array" and len(prep.input_shape) in (2, 3)):
            raise ConfigError(
                f"--augment {','.join(config.augment)}: augmentations are for image inputs; this "
                f"run's inputs are {prep.kind} data"
            )
        notes.append(Augmented(prep, config.augment).describe())
    for note in notes:
        say(note)
    target = (
        f"label {columns.label!r} ({len(run_data.labels)} classes)"
        if run_data.task == "classification"
        else f"target {columns.label!r} (regression)"
    )
    shown = text.describe_inputs(prep) if text.is_text(prep) else f"inputs {prep.input_shape}"
    if run_data.task == "lm":
        shown, target = shown.split(", target: ")[0], "target: the next token"
    sizes = [f"{splits.train.num_rows:,} train"]
    if splits.eval is not None:
        sizes.append(f"{splits.eval.num_rows:,} {splits.eval_name}")
    if splits.test is not None:
        sizes.append(f"{splits.test.num_rows:,} {splits.test_name} (held out)")
    unit = "texts" if run_data.task == "lm" else "rows"  # an LM's epochs count packed rows
    say(f"{' / '.join(sizes)} {unit}; {shown}, {target}")
    model = config.model or (
        "transformer"
        if text.is_text(prep)
        else {"table": "mlp", "audio": "audio_cnn"}.get(prep.kind, "cnn")
    )
    config = _resolved_options(config, model, columns, run_data.task, prep)
    selection = splits.eval is not None
    if config.patience is not None and not selection:
        raise ConfigError("--patience needs a validation split to watch; drop --val-split 0")
    resolved = {
        "task": run_data.task,
        "labels": run_data.labels,
        "preprocess": prep.to_dict(),
        "best_metric": config.monitor if selection else None,
        "best_mode": monitor_mode(config.monitor, config.monitor_mode) if selection else None,
        "data_kind": run_data.source.kind,
        "eval_split": splits.eval_name,
        "test_split": splits.test_name,
        "processes": jax.process_count(),
        "devices": jax.device_count(),
        "data_fingerprint": (
            record.resolved.get("data_fingerprint")
            if record is not None
            else datamod.data_fingerprint(config.data)
        ),  # --resume --data NEWPATH: the same files, moved
    }
    if record is not None and "best_metric" in record.resolved and selection:
        resolved["best_metric"] = record.resolved["best_metric"]
        resolved["best_mode"] = record.resolved.get("best_mode") or monitor_mode(
            resolved["best_metric"]
        )
    if record is not None and "model_code" in record.resolved:
        resolved["model_code"] = record.resolved["model_code"]
    held = {
        splits.eval_name or "validation": prepare(prep, splits.eval) if selection else None,
        splits.test_name or "test": None if splits.test is None else prepare(prep, splits.test),
    }
    mesh = _mesh(config)
    batch_chosen = config.batch_size is None
    devices = mesh.shape[data_axis(mesh)] if mesh is not None and mesh.size > 1 else 1
    config = budgetmod.auto_batch(config, splits.train.num_rows, devices)
    loaders = _loaders(prepare(prep, splits.train), held, prep, config, say, mesh)
    if record is None:  # a resumed run keeps the budget its config.json saved
        config, budget = budgetmod.resolve(
            config, batch_chosen, splits.train.num_rows, len(loaders[0]), selection
        )
        resolved["budget"] = budget.to_dict()
        say(budget.describe(config.monitor, unit))
    else:
        for key in ("budget", "early_stopping"):
            if key in record.resolved:
                resolved[key] = record.resolved[key]
    if checkpoint is not None:
        if record is None:  # a resumed run keeps the options it recorded
            config, line = pretrained.fine_tune_defaults(config, len(loaders[0]))
            say(line)
        resolved["pretrained"] = (
            record.resolved["pretrained"] if record is not None else checkpoint.record()
        )
        where_from = checkpoint.repo_id or str(checkpoint.folder)
        commit = f" at {checkpoint.commit[:12]}" if checkpoint.commit else ""
        say(f"pretrained: {checkpoint.model_type} from {where_from}{commit}")
    if record is not None:
        resolved["class_weights"] = record.resolved.get("class_weights")
        resolved["lr_logged"] = bool(record.resolved.get("lr_logged", False))
    else:
        resolved["class_weights"] = (
            resolve_class_weights(
                config.class_weights,
                np.asarray(splits.train.with_format("numpy")[columns.label]),
                len(run_data.labels),
            )
            if run_data.task == "classification"
            else config.class_weights
        )
        resolved["lr_logged"] = True  # the learning rate is in the optimizer state, logged
    if resolved["class_weights"] is not None:
        say(f"class weights: {resolved['class_weights']}")

    def build(config: RunConfig, out: Path | None = out, verbose: int = verbose) -> Any:
        return build_trainer(
            config, prep, outputs_of(run_data.task, run_data.labels), len(loaders[0]), out,
            verbose, policy, class_weights=resolved["class_weights"],
            log_lr=resolved["lr_logged"], mesh=mesh, sharding=config.sharding,
        )  # fmt: skip

    config, found = lr_finder.resolve(
        config, lambda c: build(c, None, 0),
        lambda: _loaders(prepare(prep, splits.train), {}, prep, config, say, mesh)[0], say,
    )  # fmt: skip
    if found is not None:
        resolved["lr_finder"] = {k: v for k, v in found.items() if k != "curve"}
    trainer = build(config)
    monitors = {"eval_loss"} | {f"eval_{m}" for m in (*trainer.metrics, *trainer.split_metrics)}
    if selection and resolved["best_metric"] not in monitors:
        raise ConfigError(
            f"--monitor {resolved['best_metric']}: not among this run's validation metrics "
            f"{sorted(monitors)}{did_you_mean(resolved['best_metric'], monitors)}; --metrics adds some"
        )
    metric, mode = resolved["best_metric"], resolved["best_mode"]
    if record is not None:  # the checkpoint and the loader's position checked before any write
        _resume(trainer, out, config, RunRecord(config, resolved), loaders[0], primary, say)
    if checkpoint is not None and run_data.task == "lm":  # the pretrained model's perplexity
        before = pretrained.before_fine_tuning(trainer, loaders[1], splits.eval_name, record, say)
        if before is not None:
            resolved["pretrained_eval"] = before
    if primary:
        out.mkdir(parents=True, exist_ok=True)
        if record is None and (code := copy_model_code(config, out)) is not None:
            resolved["model_code"] = code
        if record is None and text.is_text(prep):
            text.write_tokenizer(prep, out)
        if record is None and checkpoint is not None:  # its preprocessor config, as data
            pretrained.copy_preprocessor(checkpoint, out)
        atomic_write(out / "config.json", RunRecord(config, resolved).to_json())
        if found is not None:
            atomic_write(out / "lr_finder.json", json.dumps(found, indent=1))
    where = (
        f"{jax.device_count()} devices in {jax.process_count()} "
        f"process{'es' if jax.process_count() > 1 else ''}"
        if jax.device_count() > 1
        else str(jax.devices()[0])
    )
    if mesh is not None:
        axes = ",".join(f"{k}={v}" for k, v in mesh.shape.items())
        where += f" (mesh {axes}, sharding {json.dumps(config.sharding)})"
        unused = unused_axes(mesh, config.sharding)
        if unused:
            say(
                f"note: mesh axis {', '.join(f'{a}={mesh.shape[a]}' for a in unused)} is used by "
                f"nothing: sharding {json.dumps(config.sharding)} splits batches (and FSDP "
                f"weights) over {data_axis(mesh)!r} only; its devices hold copies (name the axis in "
                "--sharding rules, or leave it out of --mesh)"
            )
    model_path, model_args = config.component("model")
    optimizer_name, optimizer_args = config.component("optimizer")
    schedule_name, schedule_args = config.component("schedule")
    say(
        f"model {model_path}{_args(model_args)} ({config.api}), {config.epochs} epochs, batch "
        f"{config.batch_size}, {optimizer_name}{_args(optimizer_args)} lr {config.lr:g} "
        f"({schedule_name}{_args(schedule_args)}), on {where}; run folder {out}"
    )
    trainer.resume_hint = shlex.join(["jaxfeed", "train", "--out", str(out), "--resume"])
    if config.tensorboard:
        say(f"TensorBoard: {shlex.join(['tensorboard', '--logdir', str(out / 'tensorboard')])}")
    start = time.perf_counter()
    schedule = {"epochs": config.epochs, "max_steps": config.max_steps}
    try:
        if Schedule.make(**schedule).finished(trainer.step, trainer.epoch):
            say(
                f"the run is already complete ({trainer.epoch} epochs, {trainer.step} steps); "
                "--epochs or --max-steps continue it"
            )
            history = trainer.history
        else:  # a resumed trainer holds its checkpoint's state (restored above)
            history = trainer.fit(
                loaders[0], loaders[1], **schedule, log_every=config.log_every,
                eval_every=config.eval_every, checkpoint_every=config.checkpoint_every,
                checkpoint_dir=out / "checkpoints",
                checkpoint_options={"best_metric": metric or BEST_METRIC, "best_mode": mode},
            )  # fmt: skip
    except KeyboardInterrupt as stop:
        done = trainer.epoch
        print(
            f"\ninterrupted during epoch {done + 1}: checkpoints up to epoch {done} are in "
            f"{out / 'checkpoints'}; resume with: {trainer.resume_hint}",
            file=sys.stderr,
        )
        stop.reported = True  # type: ignore[attr-defined]  # the command adds nothing
        raise
    except CheckpointError as err:  # a save that failed (a full disk): the earlier steps stay
        raise CheckpointError(
            f"{err}; once it can be written, resume with: {trainer.resume_hint}"
        ) from None
    seconds = time.perf_counter() - start
    stopping = next(
        (c for c in trainer.callbacks if isinstance(c, budgetmod.ResumableEarlyStopping)), None
    )
    if stopping is not None:
        resolved["early_stopping"] = stopping.state()
        if primary:  # the early-stopping state as the run ended, beside its budget
            atomic_write(out / "config.json", RunRecord(config, resolved).to_json())
        if stopping.stopped_epoch is not None:
            say(
                f"early stopping: no better {stopping.monitor} for {stopping.patience} epochs after "
                f"epoch {stopping.best_epoch}; stopped after epoch {stopping.stopped_epoch}"
            )
    if (warning := budgetmod.divergence_warning(history)) is not None:
        say(warning)
    memory = trainer.state_bytes_per_device()  # as trained (the export below gathers)
    best = _export_best(trainer, out, config, run_data, prep, resolved, primary, say)
    test = None
    if best is not None and loaders[2] is not None:
        test = _test_once(trainer, loaders[2], best, out, primary)
    if best is not None:
        state = (
            ""
            if mesh is None
            else f"{_size(memory)} per device (sharding {json.dumps(config.sharding)})"
        )
        _summary(say, history, best, test, seconds, run_data.task, out, splits, resolved, state)
    return TrainResult(out, history, best, seconds, test)


def _resume(
    trainer: Any,
    out: Path,
    config: RunConfig,
    record: RunRecord,
    loader: Any,
    primary: bool,
    say: Callable[..., None],
) -> None:
    """Restore the run's latest checkpoint (or ``--resume-step``) into ``trainer`` and the
    train loader's position, before anything in the run folder is written: a damaged step, data
    that changed since the checkpoint or a position this loader cannot take is refused here.
    Steps after ``--resume-step`` are set aside (``RUN/set-aside/``), since this run replaces
    them. No checkpoint yet: the run starts from the beginning."""
    folder = out / "checkpoints"
    if not folder.is_dir() or not any(p.name.isdigit() for p in folder.iterdir()):
        if config.resume_step is not None:
            raise ConfigError(f"--resume-step {config.resume_step}: {out} has no checkpoints yet")
        return
    manager = open_checkpoints(out, record)
    steps: list[int] = []
    try:
        steps = manager.all_steps
        step = steps[-1] if config.resume_step is None else config.resume_step
        if step not in steps:
            raise ConfigError(
                f"--resume-step {step}: no such checkpoint in {folder}; steps: {steps}"
            )
        meta = manager.meta(step)
        _check_loader_state(meta.get("loader"), loader, step)
        trainer.restore_checkpoint(manager, step, _ElasticLoader(loader))
    except CheckpointError as err:
        earlier = [s for s in steps if s < step]
        hint = (
            f"; resume from step {earlier[-1]} with --resume-step {earlier[-1]}" if earlier else ""
        )
        raise ConfigError(f"--resume: {err}{hint}") from None
    finally:
        manager.close()
    later = [s for s in steps if s > step]
    if later and primary:
        aside = out / "set-aside"
        aside.mkdir(exist_ok=True)
        for s in later:
            target = aside / f"checkpoint-{s}"
            if target.exists():
                shutil.rmtree(target)
            (folder / str(s)).rename(target)
        say(
            f"resuming from step {step}: steps {later} set aside in {aside} (this run replaces them)"
        )


def _check_loader_state(saved: Any, loader: Any, step: int) -> None:
    """The data the checkpoint was trained on is the data here: the same rows, the same content."""
    if not isinstance(saved, dict) or not hasattr(loader, "state_dict"):
        return
    mine = loader.state_dict()
    if saved.get("num_rows") != mine["num_rows"]:
        change = f"train rows {saved.get('num_rows')} -> {mine['num_rows']}"
    elif saved.get("dataset") != mine["dataset"]:
        change = (
            f"the train rows' content (fingerprint {str(saved.get('dataset'))[:16]} -> "
            f"{str(mine['dataset'])[:16]})"
        )
    else:
        return
    raise ConfigError(
        f"--resume: the run's data changed since its checkpoint (step {step}): {change}; resume "
        "with the data the run was trained on, or start a new run (another --out)"
    )


class _ElasticLoader:
    """The train loader as a restore sees it: a position saved on another device count (whose
    train loader kept or dropped the last short batch: several devices drop it) is taken over;
    the order of the rows does not depend on it."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        drop = getattr(self.loader, "drop_last", None)
        if isinstance(state, dict) and state.get("packing") and state.get("drop_last") != drop:
            raise ConfigError(
                "--resume: this language model was trained on several devices with a jaxfeed "
                "that dropped each epoch's last packed batch there; resume it on several devices"
            )
        if isinstance(state, dict) and drop is not None and state.get("drop_last") != drop:
            rows, size = int(state["num_rows"]), int(state["batch_size"])
            saved_total = rows // size if state["drop_last"] else -(-rows // size)
            total = rows // size if drop else -(-rows // size)
            position = int(state["batches_consumed"])
            position = total if position >= saved_total else min(position, total)
            state = {**state, "drop_last": drop, "batches_consumed": position}
        try:
            self.loader.load_state_dict(state)
        except ValueError as err:
            raise ConfigError(f"--resume: {err}") from None


def _args(values: dict[str, Any]) -> str:
    """``(width=64, b1=0.9)`` of init_args, or nothing."""
    return "(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")" if values else ""


def _silent(*args: Any, **kwargs: Any) -> None:
    pass


def _size(n: int) -> str:
    """Bytes for people: ``_size(1536)`` is ``'1.5 KB'``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def unused_axes(mesh: Any, sharding: Any) -> list[str]:
    """The axes of ``mesh`` (of more than one device) that neither the batches (the data axis),
    FSDP nor a sharding rule use.

    >>> mesh = make_mesh({"data": -1, "model": 2})
    >>> unused_axes(mesh, "fsdp"), unused_axes(mesh, {"mlp": "model"})
    (['model'], [])
    """
    used = {data_axis(mesh)}
    if isinstance(sharding, dict):
        for key, entry in sharding.items():
            if key != "fsdp" and entry is not None:
                used.update([entry] if isinstance(entry, str) else list(entry))
    return [str(a) for a in mesh.axis_names if a not in used and mesh.shape[a] > 1]


def _mesh(config: RunConfig) -> Any:
    """The run's device mesh: ``--mesh``, else one ``data`` axis over every device when there
    are several (or a sharding other than replicate asks for one); None for one device."""
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
    size = f"{prep.image_size[0]}x{prep.image_size[1]}" if prep.image_size else config.image_size
    audio = prep.audio if prep.kind == "audio" else {}
    return dataclasses.replace(
        config,
        model=model,
        input_columns=list(prep.input_columns),
        label_column=columns.label or None,
        task=task,
        text_column=prep.text["column"] if prep.text else config.text_column,
        image_size=size if prep.kind == "image" else config.image_size,
        sample_rate=audio.get("sample_rate", config.sample_rate),
        clip_seconds=audio.get("clip_seconds", config.clip_seconds),
    )


def _loaders(
    train: Any,
    held: dict[str, Any],
    prep: Preprocessing,
    config: RunConfig,
    say: Callable,
    mesh: Any = None,
) -> tuple:
    """Loaders for one device, or split over the data axis of the mesh (every device of every
    process by default): the train loader, then one per ``held`` split (``{name: dataset or
    None}``; None stays None)."""
    kwargs: dict[str, Any] = {"num_workers": config.num_workers, "transform": prep}
    count = 1
    if mesh is not None and mesh.size > 1:
        axis = data_axis(mesh)
        count = mesh.shape[axis]
        if config.batch_size % count:
            raise ConfigError(
                f"--batch-size {config.batch_size} must be a multiple of the {count} devices"
                + (f" of the mesh's data axis {axis!r}" if len(mesh.shape) > 1 else "")
            )
        kwargs["sharding"] = NamedSharding(mesh, PartitionSpec(axis))
    if train.num_rows < config.batch_size and count > 1:
        raise ConfigError(
            f"--batch-size {config.batch_size} is larger than the {train.num_rows} train rows"
        )
    lengths = text.loader_options(prep) if text.is_text(prep) else {}  # buckets or packing
    # several devices cannot split a last short batch; a packed one is completed with empty rows
    drop_last = count > 1 and "packing" not in lengths
    train_kwargs = dict(kwargs)
    if config.augment:  # the train batches only: evaluation sees the images as they are
        train_kwargs["transform"] = Augmented(prep, config.augment)
    train_loader = DataLoader(
        train, config.batch_size, shuffle=True, seed=config.seed, drop_last=drop_last,
        **train_kwargs, **audiomod.loader_options(prep, train=True), **lengths,
    )  # fmt: skip
    held_lengths = {k: v for k, v in lengths.items() if k != "bucket_by_length"}

    # one eval batch size for every held-out split (the trainer pads to its first eval batch)
    rows = [ds.num_rows for ds in held.values() if ds is not None]
    size = min([config.batch_size, *rows])
    size = max(count, size - size % count)

    def held_loader(name: str, ds: Any) -> Any:
        if ds is None:
            return None
        if ds.num_rows < count:  # not one row per device: the split would evaluate nothing
            raise ConfigError(
                f"the {name} split has {ds.num_rows} rows, fewer than the {count} devices that "
                "each evaluation batch is split over: give it more rows (--val-split) or run "
                "on fewer devices"
            )
        drop = count > 1 and (ds.num_rows % size) % count != 0
        if drop:
            say(
                f"note: the last {ds.num_rows % size} {name} rows do not split over "
                f"{count} devices and are skipped"
            )
        return DataLoader(
            ds, size, drop_last=drop, **kwargs, **audiomod.loader_options(prep, train=False),
            **held_lengths,
        )  # fmt: skip

    return (train_loader, *(held_loader(name, ds) for name, ds in held.items()))


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
    manager = open_checkpoints(out, RunRecord(config, resolved))
    try:
        step = manager.best_step if resolved["best_metric"] else manager.latest_step
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
    if not primary:
        return best
    extra = {
        "labels": run_data.labels,
        "task": run_data.task,
        "preprocess": prep.to_dict(),
        "checkpoint_step": step,
        "checkpoint_epoch": best["epoch"],
    }
    if text.is_text(prep):  # token ids in (RUN/tokenizer.json makes them): no declared spec
        extra["text"] = {**prep.text, "inputs": dict(trainer.inputs)}
    try:
        if text.is_text(prep):  # strings in: the spec and tokenizer.json travel in model/
            spec = prep.serving(run_data.labels)
            spec = dataclasses.replace(spec, text=prep.serving_text(dict(trainer.inputs)))
            export(trainer, out / "model", text.export_example(prep, trainer.inputs), extra=extra,
                   preprocessing=spec, tokenizer=prep.tokenizer)  # fmt: skip
        else:
            export(trainer, out / "model", extra=extra, preprocessing=prep.serving(run_data.labels))
    except Exception as err:
        if ":" not in (config.component("model")[0] or ""):
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


def _figure(value: float, task: str) -> str:
    """A summary figure: accuracy and perplexity to 4 decimals (``0.7500``, ``1.0000``), an RMSE
    in the label's units to 4 significant digits.

    >>> _figure(0.75, "classification"), _figure(1, "classification"), _figure(5.96496, "regression")
    ('0.7500', '1.0000', '5.965')
    """
    return f"{value:.4g}" if task == "regression" else f"{value:.4f}"


def _summary(
    say: Callable,
    history: Any,
    best: dict,
    test: dict | None,
    seconds: float,
    task: str,
    out: Path,
    splits: Any,
    resolved: dict,
    state: str = "",
) -> None:
    """The chosen checkpoint, and each figure with the split it comes from."""
    epochs = [h for h in history if "seconds" in h and "rows_per_second" in h]
    rows = sum(h["rows_per_second"] * h["seconds"] for h in epochs) / max(
        sum(h["seconds"] for h in epochs), 1e-9
    )
    figure, shown = {
        "classification": ("accuracy", "accuracy"),
        "lm": ("perplexity", "perplexity"),
    }.get(task, ("rmse", "RMSE"))
    for row in (best, test or {}):  # label units (mse per example in the label's units)
        for split in ("eval", "test"):
            if f"{split}_mse" in row and f"{split}_rmse" not in row:
                row[f"{split}_rmse"] = row[f"{split}_mse"] ** 0.5
    shown_epoch = f"{best['epoch']}"
    if "epoch_in_progress" in best:  # a checkpoint inside an epoch: where the run stopped
        shown_epoch = f"{best['epoch_in_progress']} (part)"
    columns = [("best epoch" if resolved["best_metric"] else "last epoch", shown_epoch)]
    columns.append(("step", f"{best['step']}"))
    if splits.eval is not None:
        loss = "loss (standardised)" if task == "regression" else "loss"
        columns.append((f"{splits.eval_name} {loss}", f"{best['eval_loss']:.4f}"))
        if f"eval_{figure}" in best:
            columns.append((f"{splits.eval_name} {shown}", _figure(best[f"eval_{figure}"], task)))
        monitored = resolved.get("best_metric")
        if monitored and monitored not in ("eval_loss", f"eval_{figure}") and monitored in best:
            name = monitored.removeprefix("eval_").replace("_", " ")
            columns.append((f"{splits.eval_name} {name}", f"{best[monitored]:.4f}"))
    else:
        columns.append(("train loss", f"{best.get('train_loss', float('nan')):.4f}"))
    if test is not None:
        if f"test_{figure}" in test:
            columns.append((f"{splits.test_name} {shown}", _figure(test[f"test_{figure}"], task)))
        else:
            columns.append((f"{splits.test_name} loss", f"{test['test_loss']:.4f}"))
    if resolved.get("class_weights") is not None:  # the loss as trained and selected on: say so
        columns = [(f"{h} (class-weighted)" if h.endswith(" loss") else h, v) for h, v in columns]
    columns += [("time", f"{seconds:.1f}")] + ([("rows/s", f"{rows:,.0f}")] if epochs else [])
    widths = [max(len(h), len(v)) + 2 for h, v in columns]
    say("\n" + "".join(f"{h:<{w}}" for (h, _), w in zip(columns, widths, strict=True)).rstrip())
    say("".join(f"{v:<{w}}" for (_, v), w in zip(columns, widths, strict=True)).rstrip())
    if resolved["best_metric"]:
        metric, mode = resolved["best_metric"], resolved["best_mode"]
        what = (
            f"(best: the checkpoint of {'lowest' if mode == 'min' else 'highest'} {metric} on the "
            f"{splits.eval_name} split, the earliest on ties"
        )
    else:
        what = "(no validation split: the last checkpoint is kept"
    if test is not None:
        what += f"; {splits.test_name} was read once, on it"
    say(what + "; eval and predict use it)")
    before = resolved.get("pretrained_eval")  # a fine-tuned language model: what it gained
    if (line := pretrained.perplexity_line(before, best, splits.eval_name)) is not None:
        say(line)
    if state:
        say(f"model and optimizer state: {state}")
    if "epoch_in_progress" in best:
        say(
            f"(the run stopped at step {best['step']}, inside epoch {best['epoch_in_progress']}: "
            "its last state was evaluated and is a candidate like each epoch's end)"
        )
    files = ("config.json", "metrics.jsonl", "history.csv", "curves.png", "checkpoints", "model")
    found = [f"{n}/" if (out / n).is_dir() else n for n in files if (out / n).exists()]
    say(f"\nrun folder: {out}  ({', '.join(found)})")
    quoted = shlex.join([str(out)])  # pasted into a shell: spaces and quotes survive
    use = (
        f"generate:   jaxfeed generate {quoted} PROMPT"
        if task == "lm"
        else f"predict:    jaxfeed predict {quoted} FILE..."
    )
    say(f"evaluate:   jaxfeed eval {quoted} --json\n{use}")
