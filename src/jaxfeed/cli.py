"""The ``jaxfeed`` command: train, eval, predict, info, bench.

Usage errors (a wrong dataset name, a missing column, a bad flag value) print one line on stderr
and exit with 2; failures exit with 1. ``--debug`` shows the Python traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jaxfeed

EXAMPLES = {
    "train": "examples:\n  jaxfeed train\n  jaxfeed train --data mnist --data-dir ~/mnist --epochs 5 --out runs/mnist\n"
    "  jaxfeed train --data ./my_images --model mlp --batch-size 128\n  jaxfeed train --out runs/mnist --resume",
    "eval": "examples:\n  jaxfeed eval runs/digits-cnn\n  jaxfeed eval runs/digits-cnn --checkpoint latest --split train",
    "predict": "examples:\n  jaxfeed predict runs/digits-cnn digit.png\n  ls *.png | jaxfeed predict runs/digits-cnn - --json",
    "info": "examples:\n  jaxfeed info digits\n  jaxfeed info ./data --split train",
    "bench": "examples:\n  jaxfeed bench loader --quick\n  jaxfeed bench all",
    "launch": "examples:\n  jaxfeed launch --num-processes 2 --devices-per-process 4 -- jaxfeed train --batch-size 64",
}


class UsageError(Exception):
    """A wrong name, path, column or flag value: exit status 2."""


# ---------------------------------------------------------------------------------- data
def load_data(name: str, data_dir: str | None) -> Any:
    from jaxfeed import DatasetDict, load_dataset

    try:
        data = load_dataset(name, data_dir=data_dir)
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err).splitlines()[0]) from err
    if not isinstance(data, DatasetDict):
        data = DatasetDict({"train": data})
    return data


def detect_columns(ds: Any, input_column: str | None, label_column: str | None) -> tuple[str, str]:
    """The first Image/ArrayND column and the first ClassLabel, unless given."""
    from jaxfeed import ClassLabel, Image
    from jaxfeed.features.array import ARRAY_TYPES

    features = ds.features
    for given, flag in ((input_column, "--input-column"), (label_column, "--label-column")):
        if given is not None and given not in features:
            raise UsageError(f"{flag} {given!r} is not a column; the columns are {list(features)}")
    if input_column is None:
        input_column = next(
            (
                c
                for c, f in features.items()
                if isinstance(f, Image) or type(f).__name__ in ARRAY_TYPES
            ),
            None,
        )
        if input_column is None:
            raise UsageError(
                f"no Image or ArrayND column to train on among {list(features)}; give --input-column"
            )
    if label_column is None:
        label_column = next((c for c, f in features.items() if isinstance(f, ClassLabel)), None)
        if label_column is None:
            raise UsageError(f"no ClassLabel column among {list(features)}; give --label-column")
    if not isinstance(features[label_column], ClassLabel):
        raise UsageError(
            f"--label-column {label_column!r} must be a ClassLabel column, not {features[label_column]!r}"
        )
    return input_column, label_column


def prepare_split(
    ds: Any, input_column: str, label_column: str, mode: str | None
) -> tuple[Any, tuple[int, ...], str | None]:
    """Keep the two columns, fix the image mode, and return ``(dataset, input_shape, mode)``."""
    from jaxfeed import Image

    ds = ds.select_columns([input_column, label_column])
    feature = ds.features[input_column]
    if isinstance(feature, Image):
        if mode is None:
            first = ds[0][input_column]
            mode = "L" if first.mode in ("L", "1", "P", "I;16") else "RGB"
        if feature.mode != mode:
            ds = ds.cast_column(input_column, Image(mode=mode))
    sample = ds.with_format("numpy")[0][input_column]
    return ds, tuple(int(d) for d in sample.shape), mode


# ---------------------------------------------------------------------------------- models
def build_trainer(config: dict[str, Any], out_dir: Path | None, verbose: int = 1) -> Any:
    import numpy as np
    import optax
    from flax import nnx

    from jaxfeed import Trainer
    from jaxfeed.models import CNN, MLP, LinenCNN
    from jaxfeed.train import scale_images

    num_classes, shape = len(config["labels"]), tuple(config["input_shape"])
    column = config["input_column"]
    integer_input = config["input_dtype"].startswith(("uint", "int"))

    def preprocess(batch):
        batch = {"image": batch[column], "label": batch[config["label_column"]]}
        return scale_images(batch) if integer_input else batch

    tx = optax.adamw(config["lr"], weight_decay=config["weight_decay"])
    common = {
        "preprocess": preprocess,
        "seed": config["seed"],
        "verbose": verbose,
        "out_dir": out_dir,
        "deterministic": config["deterministic"],
    }
    if config["api"] == "linen":
        if config["model"] != "cnn":
            raise UsageError("--api linen supports --model cnn only")
        example = np.zeros((1, *shape), dtype=np.float32)
        return Trainer.from_linen(
            LinenCNN(num_classes), tx, example, inputs="image", targets="label", **common
        )
    rngs = nnx.Rngs(config["seed"])
    image_shape = shape if len(shape) == 3 else (*shape, 1)
    if config["model"] == "cnn":
        if image_shape[0] < 4 or image_shape[1] < 4:
            raise UsageError(
                f"--model cnn needs images of at least 4x4, the data has {shape}; try --model mlp"
            )
        model = CNN(num_classes, input_shape=image_shape, rngs=rngs)
    else:
        model = MLP(num_classes, input_shape=shape, rngs=rngs)
    return Trainer(model, tx, inputs="image", targets="label", **common)


# ---------------------------------------------------------------------------------- train
def _say(*args: Any, **kwargs: Any) -> None:
    """Print in process 0 only (every process of a multi-process run executes the command)."""
    import jax

    if jax.process_index() == 0:
        print(*args, **kwargs)


def _loaders(train: Any, test: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """Loaders for one device, or split over every device of every process (data parallel)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from jaxfeed import DataLoader
    from jaxfeed.distributed import data_mesh

    kwargs: dict[str, Any] = {"num_workers": args.num_workers}
    drop_eval = False
    if jax.device_count() > 1:
        count = jax.device_count()
        if args.batch_size % count:
            raise UsageError(
                f"--batch-size {args.batch_size} must be a multiple of the {count} devices"
            )
        kwargs["sharding"] = NamedSharding(data_mesh(), PartitionSpec("data"))
        drop_eval = (test.num_rows % args.batch_size) % count != 0
        if drop_eval:
            _say(
                f"note: the last {test.num_rows % args.batch_size} eval rows do not split over {count} devices and are skipped"
            )
    train_loader = DataLoader(
        train,
        args.batch_size,
        shuffle=True,
        seed=args.seed,
        drop_last=jax.device_count() > 1,
        **kwargs,
    )
    return train_loader, DataLoader(test, args.batch_size, drop_last=drop_eval, **kwargs)


def cmd_train(args: argparse.Namespace) -> int:
    import jax

    from jaxfeed import distributed
    from jaxfeed.checkpoint import export
    from jaxfeed.files import atomic_write

    try:
        distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    except ValueError as err:
        raise UsageError(str(err)) from err
    primary = jax.process_index() == 0

    out = (
        Path(args.out)
        if args.out
        else Path("runs") / f"{Path(args.data).name}-{args.model}-{datetime.now():%Y%m%d-%H%M%S}"
    )
    config_file = out / "config.json"
    if args.resume and not config_file.is_file():
        raise UsageError(
            f"--resume: {out} has no config.json from an earlier run; give the run's --out"
        )
    if not args.resume and (out / "checkpoints").is_dir() and any((out / "checkpoints").iterdir()):
        raise UsageError(
            f"{out} already holds a run; add --resume to continue it, or pick another --out"
        )
    data = load_data(args.data, args.data_dir)
    for split, flag in ((args.split_train, "--split-train"), (args.split_eval, "--split-eval")):
        if split not in data:
            raise UsageError(
                f"{flag} {split!r} is not a split of {args.data!r}; splits: {sorted(data)}"
            )
    input_column, label_column = detect_columns(
        data[args.split_train], args.input_column, args.label_column
    )
    train, shape, mode = prepare_split(data[args.split_train], input_column, label_column, None)
    test, test_shape, _ = prepare_split(data[args.split_eval], input_column, label_column, mode)
    if test_shape != shape:
        raise UsageError(
            f"train inputs have shape {shape} but {args.split_eval} inputs {test_shape}"
        )
    labels = train.features[label_column].names
    dtype = str(train.with_format("numpy")[0][input_column].dtype)
    config = {
        "data": args.data, "data_dir": args.data_dir, "split_train": args.split_train, "split_eval": args.split_eval,
        "input_column": input_column, "label_column": label_column, "input_shape": list(shape), "input_dtype": dtype,
        "image_mode": mode, "labels": labels, "model": args.model, "api": args.api, "epochs": args.epochs,
        "batch_size": args.batch_size, "lr": args.lr, "weight_decay": args.weight_decay, "seed": args.seed,
        "deterministic": args.deterministic, "num_workers": args.num_workers, "jaxfeed": jaxfeed.__version__,
    }  # fmt: skip
    config["processes"], config["devices"] = jax.process_count(), jax.device_count()
    if primary:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(config_file, json.dumps(config, indent=2))
    _say(f"data {args.data}: {train.num_rows:,} train / {test.num_rows:,} {args.split_eval} rows; "
          f"input {input_column!r} {shape} {dtype}, label {label_column!r} ({len(labels)} classes)")  # fmt: skip
    where = (
        f"{jax.device_count()} devices in {jax.process_count()} processes"
        if jax.device_count() > 1
        else str(jax.devices()[0])
    )
    _say(
        f"model {args.model} ({args.api}), {args.epochs} epochs, batch {args.batch_size}, AdamW lr {args.lr}, on {where}; run folder {out}"
    )
    trainer = build_trainer(config, out, verbose=1)
    trainer.resume_hint = f"jaxfeed train --out {out} --resume (and the same flags)"
    train_loader, eval_loader = _loaders(train, test, args)
    start = time.perf_counter()
    try:
        history = trainer.fit(
            train_loader,
            eval_loader,
            epochs=args.epochs,
            checkpoint_dir=out / "checkpoints",
            resume=args.resume,
        )
    except KeyboardInterrupt:
        done = trainer.epoch
        print(f"\ninterrupted during epoch {done + 1}: checkpoints up to epoch {done} are in {out / 'checkpoints'}; "
              f"resume with: jaxfeed train --out {out} --resume ... (the same flags)", file=sys.stderr)  # fmt: skip
        return 130
    seconds = time.perf_counter() - start
    extra = {"labels": labels, "input_shape": list(shape), "input_column": input_column, "image_mode": mode,
             "scale": dtype.startswith(("uint", "int"))}  # fmt: skip
    if primary and args.api == "linen":
        export(trainer.model, out / "model", variables=trainer.variables, extra=extra)
    elif primary:
        export(trainer.model, out / "model", extra=extra)
    if not primary:
        return 0
    best = history.best("eval_accuracy")
    rows = sum(h["rows_per_second"] * h["seconds"] for h in history) / max(
        sum(h["seconds"] for h in history), 1e-9
    )
    print(f"\n{'best epoch':<16}{'test accuracy':<16}{'time':<12}{'rows/s':<10}")
    print(f"{best['epoch']:<16}{history[-1]['eval_accuracy']:<16.4f}{seconds:<12.1f}{rows:<10,.0f}")
    print(
        f"\nrun folder: {out}  (config.json, metrics.jsonl, history.csv, curves.png, checkpoints/, model/)"
    )
    print(f"evaluate:   jaxfeed eval {out}\npredict:    jaxfeed predict {out} IMAGE.png")
    return 0


# ---------------------------------------------------------------------------------- eval
def load_run(run_dir: str) -> tuple[Path, dict[str, Any]]:
    run = Path(run_dir)
    config_file = run / "config.json"
    if not config_file.is_file():
        raise UsageError(
            f"{run} is not a jaxfeed run folder (no config.json); train one with: jaxfeed train --out {run}"
        )
    try:
        return run, json.loads(config_file.read_text())
    except ValueError as err:
        raise UsageError(f"{config_file} is not valid JSON: {err}") from err


def cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from jaxfeed import DataLoader
    from jaxfeed.checkpoint import CheckpointError, CheckpointManager

    run, config = load_run(args.run_dir)
    data = load_data(args.data or config["data"], args.data_dir or config.get("data_dir"))
    split = args.split or config["split_eval"]
    if split not in data:
        raise UsageError(f"--split {split!r} is not a split; splits: {sorted(data)}")
    ds, shape, _ = prepare_split(
        data[split], config["input_column"], config["label_column"], config.get("image_mode")
    )
    if list(shape) != list(config["input_shape"]):
        raise UsageError(
            f"the data has inputs of shape {shape}, the model was trained on {tuple(config['input_shape'])}"
        )
    trainer = build_trainer(config, None, verbose=0)
    manager = CheckpointManager(run / "checkpoints")
    step = args.checkpoint if args.checkpoint in ("best", "latest") else int(args.checkpoint)
    try:
        meta = trainer.restore_checkpoint(manager, step)
    except CheckpointError as err:
        raise UsageError(str(err)) from err
    finally:
        manager.close()
    loader = DataLoader(ds, config["batch_size"])
    result = trainer.evaluate(loader)
    predicted = np.asarray(trainer.predict(loader)).argmax(-1)
    truth = np.asarray(ds.with_format("numpy")[config["label_column"]])
    labels = config["labels"]
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(matrix, (truth, predicted), 1)
    print(
        f"checkpoint step {meta['step']} (epoch {meta['epoch']}), split {split!r}, {len(truth):,} rows"
    )
    print(f"loss {result['loss']:.4f}  accuracy {result['accuracy']:.4f}\n")
    width = max(5, max(len(str(n)) for n in labels) + 1)
    print("confusion matrix (rows: true, columns: predicted)")
    print(" " * width + "".join(f"{n[: width - 1]:>{width}}" for n in labels))
    for name, row in zip(labels, matrix, strict=True):
        print(f"{name[: width - 1]:>{width}}" + "".join(f"{v:>{width}}" for v in row))
    try:
        path = plot_confusion(
            matrix,
            labels,
            run / f"confusion-{split}.png",
            f"{run.name}: {split}, accuracy {result['accuracy']:.4f}",
        )
    except OSError as err:  # a read-only run folder: the report above is the result
        print(f"\nnot writing the confusion matrix PNG into {run}: {err.strerror or err}")
        return 0
    print(f"\nwrote {path}")
    return 0


def plot_confusion(matrix: Any, labels: list[str], path: Path, title: str) -> Path:
    import io

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from jaxfeed.files import atomic_write

    size = max(4.5, 0.45 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    top = matrix.max() or 1
    for i in range(len(labels)):
        for j in range(len(labels)):
            if matrix[i, j]:
                ax.text(
                    j,
                    i,
                    str(matrix[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if matrix[i, j] > top / 2 else "black",
                )
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, buffer.getvalue())
    return path


# ---------------------------------------------------------------------------------- predict
def cmd_predict(args: argparse.Namespace) -> int:
    import jax
    import numpy as np
    import PIL.Image

    from jaxfeed.checkpoint import CheckpointError, load_exported

    run, _ = load_run(args.run_dir)
    try:
        model, config = load_exported(run / "model")
    except CheckpointError as err:
        raise UsageError(f"{run} has no exported model ({err}); train it to the end first") from err
    inputs = list(args.inputs)
    if inputs == ["-"]:
        inputs = [line.strip() for line in sys.stdin if line.strip()]
    if not inputs:
        raise UsageError("no input images given")
    shape = tuple(config["input_shape"])
    mode = config.get("image_mode") or ("L" if len(shape) == 2 or shape[-1] == 1 else "RGB")
    arrays = []
    for path in inputs:
        try:
            with PIL.Image.open(path) as image:
                image = image.convert(mode)
                if image.size != (shape[1], shape[0]):
                    image = image.resize((shape[1], shape[0]), PIL.Image.BILINEAR)
                array = np.asarray(image)
        except (OSError, ValueError) as err:
            raise UsageError(f"cannot read image {path}: {err}") from err
        arrays.append(array.reshape(shape))
    x = np.stack(arrays)
    x = x.astype(np.float32) / 255.0 if config.get("scale") else x.astype(np.float32)
    probabilities = np.asarray(jax.nn.softmax(model(x), axis=-1))
    labels = config["labels"]
    k = min(args.top_k, len(labels))
    results = []
    for path, p in zip(inputs, probabilities, strict=True):
        top = np.argsort(-p)[:k]
        results.append(
            {
                "input": path,
                "top": [
                    {"class": int(i), "label": labels[i], "probability": float(p[i])} for i in top
                ],
            }
        )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(
                f"{r['input']}: "
                + ", ".join(f"{t['label']} ({t['probability']:.3f})" for t in r["top"])
            )
    return 0


# ---------------------------------------------------------------------------------- info
def cmd_info(args: argparse.Namespace) -> int:
    import numpy as np

    data = load_data(args.dataset, args.data_dir)
    local = Path(args.dataset)
    if local.exists():
        files = [local] if local.is_file() else [p for p in local.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        where = f"{size / 2**20:.1f} MiB on disk in {len(files)} files"
    else:
        size = sum(split.data.nbytes for split in data.values())
        where = f"{size / 2**20:.1f} MiB in Arrow"
    print(f"dataset {args.dataset}: {len(data)} splits, {where}")
    for name, split in data.items():
        if args.split and name != args.split:
            continue
        print(f"\nsplit {name}: {split.num_rows:,} rows")
        for column, feature in split.features.items():
            print(f"  {column}: {feature!r}")
        rows = split.with_format("numpy")[: min(args.rows, split.num_rows)]
        for i in range(min(args.rows, split.num_rows)):
            shown = {}
            for column, values in rows.items():
                value = values[i]
                shown[column] = (
                    f"array{tuple(value.shape)} {value.dtype}"
                    if isinstance(value, np.ndarray) and value.ndim
                    else value
                )
            print(f"  row {i}: {shown}")
    return 0


# ---------------------------------------------------------------------------------- bench
BENCHES = {
    "formatting": ("formatting.py", ["--rows", "12000", "--repeats", "1"]),
    "media": ("media.py", ["--rows", "2000", "--repeats", "1"]),
    "loader": ("loader.py", ["--quick"]),
    "train": ("train_step.py", ["--quick"]),
    "checkpoint": ("checkpoint.py", ["--repeats", "2"]),
}


def cmd_bench(args: argparse.Namespace) -> int:
    folder = Path(jaxfeed.__file__).resolve().parents[2] / "benchmarks"
    if not folder.is_dir():
        raise UsageError(
            "the benchmarks live in jaxfeed's source checkout (benchmarks/); run jaxfeed bench from there"
        )
    names = list(BENCHES) if args.which == "all" else [args.which]
    try:
        import datasets  # noqa: F401
        import grain  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        print("note: the peers (datasets, torch, grain) are not all installed: their rows are skipped; "
              "pip install -e '.[bench]' (or make bench) adds them")  # fmt: skip
    status = 0
    for name in names:
        script, quick = BENCHES[name]
        print(
            f"\n=== {name}: benchmarks/{script} {' '.join(quick if args.quick else [])}", flush=True
        )
        status |= subprocess.call(
            [sys.executable, str(folder / script), *(quick if args.quick else [])],
            cwd=folder.parent,
        )
    return 1 if status else 0


# ---------------------------------------------------------------------------------- launch
def cmd_launch(args: argparse.Namespace) -> int:
    """Run ``cmd`` as processes 0..N-1 of one job on 127.0.0.1; prefix their output; stop all if one fails."""
    import selectors
    import socket

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError(
            "give the command to launch after --, e.g. jaxfeed launch --num-processes 2 -- jaxfeed train"
        )
    if cmd[0] == "jaxfeed":
        cmd = [sys.executable, "-m", "jaxfeed.cli", *cmd[1:]]
    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    procs = []
    for i in range(args.num_processes):
        env = {
            **os.environ,
            "JAXFEED_COORDINATOR": f"127.0.0.1:{port}",
            "JAXFEED_NUM_PROCESSES": str(args.num_processes),
            "JAXFEED_PROCESS_ID": str(i),
            "PYTHONUNBUFFERED": "1",
        }
        if args.devices_per_process:
            flag = f"--xla_force_host_platform_device_count={args.devices_per_process}"
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
            env.setdefault("JAX_PLATFORMS", "cpu")
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    pids = " ".join(str(p.pid) for p in procs)
    print(
        f"launched {args.num_processes} processes (pids {pids}), coordinator 127.0.0.1:{port}",
        flush=True,
    )
    selector = selectors.DefaultSelector()
    for i, proc in enumerate(procs):
        selector.register(proc.stdout, selectors.EVENT_READ, i)
    failed = False
    streams = len(procs)
    while streams:
        for key, _ in selector.select(timeout=0.5):
            line = key.fileobj.readline()
            if not line:
                selector.unregister(key.fileobj)
                streams -= 1
                continue
            print(f"[{key.data}] {line}", end="", flush=True)
        for i, proc in enumerate(procs):
            code = proc.poll()
            if code not in (None, 0) and not failed:
                failed = True
                print(f"jaxfeed launch: process {i} (pid {proc.pid}) exited with status {code}; stopping the others",
                      file=sys.stderr, flush=True)  # fmt: skip
                for other in procs:
                    if other.poll() is None:
                        other.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return 1 if failed or any(p.returncode for p in procs) else 0


# ---------------------------------------------------------------------------------- parser
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _checkpoint(text: str) -> str:
    if text in ("best", "latest") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"expected best, latest or a step number, got {text!r}")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (and exit status 2), pointing at --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="jaxfeed",
        description="Datasets in Apache Arrow as jax.Array, a fast loader, and Flax training.",
        epilog="run 'jaxfeed COMMAND --help' for a command's flags and examples",
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"jaxfeed {jaxfeed.__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show Python tracebacks on errors",
    )

    p = sub.add_parser(
        "train",
        parents=[debug],
        help="train a classifier and write a run folder",
        epilog=EXAMPLES["train"],
        formatter_class=formatter,
    )
    p.add_argument(
        "--data",
        default="digits",
        help="built-in name (digits, mnist, fashion_mnist, cifar10), a local path or a Hub id (default: digits)",
    )
    p.add_argument("--data-dir", help="folder of the files of mnist, fashion_mnist or cifar10")
    p.add_argument("--split-train", default="train", help="split to train on (default: train)")
    p.add_argument("--split-eval", default="test", help="split to evaluate on (default: test)")
    p.add_argument(
        "--input-column", help="the input column (default: the first Image or ArrayND column)"
    )
    p.add_argument("--label-column", help="the label column (default: the first ClassLabel column)")
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn", help="model (default: cnn)")
    p.add_argument("--api", choices=("nnx", "linen"), default="nnx", help="Flax API (default: nnx)")
    p.add_argument("--epochs", type=_positive_int, default=10, help="epochs in total (default: 10)")
    p.add_argument(
        "--batch-size", type=_positive_int, default=64, help="rows per batch (default: 64)"
    )
    p.add_argument(
        "--lr", type=_positive_float, default=1e-3, help="AdamW learning rate (default: 1e-3)"
    )
    p.add_argument(
        "--weight-decay",
        type=_non_negative_float,
        default=1e-4,
        help="AdamW weight decay (default: 1e-4)",
    )
    p.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        help="seed of initialisation, shuffling and dropout (default: 0)",
    )
    p.add_argument("--out", help="run folder (default: runs/DATA-MODEL-TIME)")
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its latest checkpoint"
    )
    p.add_argument("--deterministic", action="store_true", help="bitwise-reproducible runs")
    p.add_argument(
        "--num-workers",
        type=_non_negative_int,
        default=0,
        help="image decoding processes (default: 0)",
    )
    p.add_argument(
        "--num-processes",
        type=_positive_int,
        help="processes of a multi-process run (or JAXFEED_NUM_PROCESSES)",
    )
    p.add_argument(
        "--process-id",
        type=_non_negative_int,
        help="this process's id, 0-based (or JAXFEED_PROCESS_ID)",
    )
    p.add_argument(
        "--coordinator", help="HOST:PORT of process 0's coordinator (or JAXFEED_COORDINATOR)"
    )
    p.set_defaults(run=cmd_train)

    p = sub.add_parser(
        "launch",
        parents=[debug],
        help="start N local processes of a command as one multi-process JAX job",
        epilog=EXAMPLES["launch"],
        formatter_class=formatter,
    )
    p.add_argument("--num-processes", type=_positive_int, required=True, help="processes to start")
    p.add_argument(
        "--port",
        type=_positive_int,
        default=0,
        help="coordinator port on 127.0.0.1 (default: a free one)",
    )
    p.add_argument(
        "--devices-per-process",
        type=_positive_int,
        help="fake CPU devices per process (to try it on one machine)",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the command, e.g. jaxfeed train ...",
    )
    p.set_defaults(run=cmd_launch)

    p = sub.add_parser(
        "eval",
        parents=[debug],
        help="evaluate a run's checkpoint: loss, accuracy, confusion matrix",
        epilog=EXAMPLES["eval"],
        formatter_class=formatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--data", help="dataset (default: the run's)")
    p.add_argument("--data-dir", help="folder of the dataset's files (default: the run's)")
    p.add_argument("--split", help="split (default: the run's eval split)")
    p.add_argument(
        "--checkpoint",
        type=_checkpoint,
        default="best",
        help="best, latest or a step (default: best)",
    )
    p.set_defaults(run=cmd_eval)

    p = sub.add_parser(
        "predict",
        parents=[debug],
        help="classify image files with a run's exported model",
        epilog=EXAMPLES["predict"],
        formatter_class=formatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="image files, or - to read paths from stdin"
    )
    p.add_argument(
        "--top-k", type=_positive_int, default=3, help="classes to show per image (default: 3)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_predict)

    p = sub.add_parser(
        "info",
        parents=[debug],
        help="splits, rows, features, size and example rows of a dataset",
        epilog=EXAMPLES["info"],
        formatter_class=formatter,
    )
    p.add_argument("dataset", metavar="DATASET")
    p.add_argument("--data-dir")
    p.add_argument("--split", help="show only this split")
    p.add_argument(
        "--rows", type=_non_negative_int, default=3, help="example rows per split (default: 3)"
    )
    p.set_defaults(run=cmd_info)

    p = sub.add_parser(
        "bench",
        parents=[debug],
        help="run the benchmarks and print their tables",
        epilog=EXAMPLES["bench"],
        formatter_class=formatter,
    )
    p.add_argument("which", nargs="?", choices=(*BENCHES, "all"), default="all")
    p.add_argument("--quick", action="store_true", help="smaller data, fewer repeats")
    p.set_defaults(run=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except UsageError as err:
        if args.debug:
            raise
        print(f"jaxfeed {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"jaxfeed {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if args.debug:
            raise
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(
            f"jaxfeed {args.command}: error: {type(err).__name__}: {message} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
