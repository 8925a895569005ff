"""End to end: the command in subprocesses on an image folder and a CSV; errors in-process."""

import json
import os
import queue
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import PIL.Image
import pytest

import forkserver
from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported

MODEL_FILE = '''
from flax import nnx


class Tiny(nnx.Module):
    """A user's own model: one linear layer on the flattened image."""

    def __init__(self, num_classes, input_shape, *, rngs):
        size = 1
        for d in input_shape:
            size *= d
        self.linear = nnx.Linear(size, num_classes, rngs=rngs)

    def __call__(self, x, *, rngs=None):
        return self.linear(x.reshape((x.shape[0], -1)))
'''


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """Three classes of 15 images of mixed sizes and modes, no split folders."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name, level in (("cat", 30), ("dog", 220), ("fox", 125)):
        (root / name).mkdir()
        for i in range(15):
            h, w = ((12, 12), (16, 20), (10, 14))[i % 3]
            pixels = np.clip(rng.normal(level, 15, (h, w, 3)), 0, 255).astype(np.uint8)
            image = PIL.Image.fromarray(pixels)
            (image.convert("L") if i % 4 == 0 else image).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def image_run(image_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "images"
    result = jaxfeed(
        "train", "--data", str(image_folder), "--val-split", "0.2", "--image-size", "12",
        "--epochs", "3", "--lr", "0.01", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # the pixels' levels tell the classes apart: the linear model ties the cnn's validation
    # accuracy (1.0) at a lower loss and is chosen, checkpointed at the run's last step (epoch 3)
    assert re.search(r"^model: linear, chosen on validation loss, the accuracy tied", result.stdout,
                     flags=re.M), result.stdout  # fmt: skip
    assert re.search(r"^linear\s+\d", result.stdout, flags=re.M), result.stdout  # the summary
    return out, result.stdout, 3


def test_image_folder_by_path_with_val_split_and_image_size(image_folder, image_run):
    out, stdout, _ = image_run
    assert f"data {image_folder}: detected image folder" in stdout
    assert "validation split: 0.2 of train (9 rows, stratified by class, seed 0)" in stdout
    assert (
        "images: resized to 12x12 (--image-size), mixed modes L, RGB converted to RGB, the widest"
        in stdout
    )
    assert "36 train / 9 validation rows; inputs [12, 12, 3], label 'label' (3 classes)" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["format"] == "jaxfeed-run" and saved["options"]["image_size"] == "12x12"
    assert saved["labels"] == ["cat", "dog", "fox"] and saved["preprocess"]["image_mode"] == "RGB"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if "kind" not in r] == [1, 2, 3]
    assert [r["kind"] for r in rows if "kind" in r] == ["baselines"]
    assert saved["choice"]["chosen"] == "linear" and saved["options"]["model"]["class_path"] == (
        "linear"
    )
    mask = os.umask(0)
    os.umask(mask)
    for path in [out / "config.json", out / "model" / "model.safetensors", out / "metrics.jsonl"]:
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path
    assert (out / "model").stat().st_mode & 0o777 == 0o777 & ~mask


def test_eval_json_reports_per_class_metrics_of_the_best_epoch(image_run, capsys):
    out, _, best_epoch = image_run
    status, shown, err = run_main(capsys, "eval", str(out), "--json")  # in this process: cheaper
    assert status == 0, err
    report = json.loads(shown)
    assert report["checkpoint"]["epoch"] == best_epoch and report["split"] == "validation"
    assert set(report["per_class"]) == {"cat", "dog", "fox"}
    assert set(report["per_class"]["cat"]) == {"precision", "recall", "f1", "support"}
    assert sum(c["support"] for c in report["per_class"].values()) == report["rows"] == 9
    assert np.asarray(report["confusion_matrix"]).sum() == 9
    assert 0 <= report["accuracy"] <= 1 and report["loss"] > 0


def test_predict_a_differently_sized_image_with_the_best_checkpoint(image_run, tmp_path, capsys):
    out, _, best_epoch = image_run
    big = tmp_path / "big dog.png"
    PIL.Image.fromarray(np.full((30, 41, 3), 220, np.uint8)).save(big)
    grey = tmp_path / "grey.png"
    PIL.Image.fromarray(np.full((12, 12), 30, np.uint8)).save(grey)
    status, shown, err = run_main(capsys, "predict", str(out), str(big), str(grey), "--json")
    assert status == 0, err
    assert err.strip().splitlines() == [
        "note: resized 1 of 2 images to 12x12; converted 1 to mode RGB (as in training)"
    ]
    predictions = json.loads(shown)
    assert [p["input"] for p in predictions] == [str(big), str(grey)]
    assert all(p["checkpoint"]["epoch"] == best_epoch for p in predictions)
    assert abs(sum(t["probability"] for t in predictions[0]["top"]) - 1) < 1e-3
    # the export takes the raw images (any size or mode: its declared preprocessing fits them)
    served = load_exported(out / "model")
    raw = [np.asarray(PIL.Image.open(big)), np.asarray(PIL.Image.open(grey))]
    printed = [{t["label"]: t["probability"] for t in p["top"]} for p in predictions]
    expected = [[row[name] for name in served.spec.labels] for row in printed]
    np.testing.assert_allclose(served(raw), expected, atol=1e-6)
    assert served.predict(raw)[0] == [p["label"] for p in predictions]


@pytest.fixture(scope="module")
def user_model_run(image_run, tmp_path_factory):
    """``--config`` of the module's run with a user's model file for 1 epoch, then ``--resume``d
    with only ``--out`` and ``--epochs 2`` from another directory: ``(folder of the model file,
    run folder, first stdout, (its options and checkpoints before the resume), resumed
    stdout)``. One run for two tests (a command run costs seconds of CPU); they only read it."""
    out, _, _ = image_run
    work = tmp_path_factory.mktemp("user_model")
    (work / "my_model.py").write_text(MODEL_FILE)
    again = work / "again"
    result = jaxfeed(
        "train", "--config", str(out / "config.json"), "--model", "my_model.py:Tiny",
        "--epochs", "1", "--out", str(again), cwd=work,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    checkpoints = [p.name for p in (again / "checkpoints").iterdir() if p.name.isdigit()]
    options = json.loads((again / "config.json").read_text())["options"]
    # --resume from another directory imports the model file from its recorded absolute path
    # (no --trust-code: that is for the run's own copy, when the file is gone)
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    resumed = jaxfeed("train", "--out", str(again), "--resume", "--epochs", "2", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    return work, again, result.stdout, (options, checkpoints), resumed.stdout


def test_resume_with_only_out_and_epochs(image_run, user_model_run, capsys, tmp_path):
    # a copy: the module's run is shared by tests that read its epochs, in any order
    out = tmp_path / "run"
    shutil.copytree(image_run[0], out)
    before = (out / "config.json").read_text()
    status, _, err = run_main(capsys, "train", "--out", str(out), "--resume", "--model", "mlp")
    saved = "'linear'"  # the run's model: the linear one, chosen
    assert status == 2 and f"--model 'mlp' contradicts the run's saved model {saved}" in err
    assert (out / "config.json").read_text() == before
    # the model it trained: an image folder's cnn (IMAGE_CNN), with the budget's momentum
    assert json.loads(before)["choice"]["kept_model"] == {
        "class_path": "cnn",
        "init_args": {"widths": [32, 64, 128], "head": "mean", "norm": "before", "momentum": 0.5},
    }
    # `train --out RUN --resume --epochs 2` (the run of a user's model: one command run less)
    _, again, _, _, resumed = user_model_run
    assert "epoch 2/2" in resumed and "epoch 1/2" not in resumed
    assert "preprocessing: as saved in the run" in resumed
    rows = [json.loads(line) for line in (again / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if "kind" not in r] == [1, 2]
    assert [r["kind"] for r in rows if "kind" in r] == ["baselines"]  # one row, not one a run
    assert json.loads((again / "config.json").read_text())["options"]["epochs"] == 2


def test_config_from_a_saved_run_with_a_user_model(image_run, user_model_run):
    out, _, _ = image_run
    work, _, said, (second, checkpoints), resumed = user_model_run
    assert f"model {work / 'my_model.py'}:Tiny (nnx), 1 epoch" in said
    first = json.loads((out / "config.json").read_text())["options"]
    assert {k for k in first if first[k] != second[k]} == {"epochs", "model"}
    assert checkpoints
    assert "epoch 2/2" in resumed and "epoch 1/2" not in resumed


# A single-chip TPU VM's variables and a SLURM job of one task: one host, no jax.distributed
ONE_HOST = {
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_HOST_BOUNDS": "1,1,1",
    "TPU_WORKER_ID": "0",
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "1",
}


def test_csv_regression(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = ["rooms,area,city,price"]
    for _ in range(200):
        rooms, area = rng.integers(1, 6), rng.uniform(20, 200)
        rows.append(f"{rooms},{area:.1f},{rng.choice(['a', 'b'])},{50 + 10 * rooms + 2 * area:.1f}")
    (tmp_path / "houses.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "houses"
    result = jaxfeed(
        "train", "--data", str(tmp_path / "houses.csv"), "--label-column", "price",
        "--epochs", "8", "--lr", "0.01", "--out", str(out),
        env=ONE_HOST,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "detected CSV file" in result.stdout
    assert "on 1 CPU device; run folder" in result.stdout  # one TPU host's variables: one process
    assert (
        "inputs: 3 table columns: 1 numeric (area), standardised; 2 categorical (rooms: 5 values, "
        "city: 2 values), one-hot with an unknown slot" in result.stdout
    )
    assert "target 'price' (regression)" in result.stdout and "validation RMSE" in result.stdout
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    report = json.loads(shown)
    assert report["task"] == "regression" and {"mse", "mae", "r2"} <= set(report)
    assert report["r2"] > 0.5 and "accuracy" not in report
    # the price is linear in the columns: the linear model wins on validation, said and recorded
    assert "model: linear, chosen on validation loss (" in result.stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["choice"]["chosen"] == "linear" and saved["choice"]["kept_model"] == "mlp"
    # label units everywhere: the epoch lines, metrics.jsonl, the summary and eval agree
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if "kind" not in r]
    trained = min(epochs, key=lambda r: r["eval_loss"])  # the mlp's best, kept in candidates/
    assert saved["choice"]["figures"]["mlp"] == pytest.approx(trained["eval_loss"], rel=1e-6)
    assert trained["eval_mae"] > 1  # prices of 100-500 (deviation ~100): label units
    assert trained["eval_rmse"] == pytest.approx(trained["eval_mse"] ** 0.5, rel=1e-6)
    assert f"eval_mae {trained['eval_mae']:.4f}" in result.stdout
    linear = next(r for r in rows if r.get("kind") == "baselines")["linear"]
    assert linear["eval_rmse"] == pytest.approx(report["rmse"], rel=1e-2)  # not 0: label units
    assert report["rmse"] == pytest.approx(report["mse"] ** 0.5, rel=1e-2) and report["mae"] < 1
    header, values = result.stdout.split("\nmodel  ")[1].splitlines()[:2]
    assert "validation loss (standardised)" in header and "validation RMSE" in header
    name, _, rmse = values.split()[:3]
    assert name == "linear" and float(rmse) == pytest.approx(report["rmse"], rel=2e-3)
    # the vocabulary survives eval and predict: an unseen city goes to the unknown slot
    new = tmp_path / "new.csv"
    new.write_text("rooms,area,city,price\n3,80.0,a,290\n2,120.0,zz,330\n9,50.0,b,240\n")
    status, shown, _ = run_main(capsys, "eval", str(out), "--data", str(new), "--json")
    other = json.loads(shown)  # in this process: serving model/ starts no model code
    assert status == 0 and other["split"] == "all" and other["rows"] == 3
    assert other["note"] == f"{new} has no splits: evaluating all 3 rows"
    predicted = json.loads(run_main(capsys, "predict", str(out), str(new), "--json")[1])
    assert [p["input"] for p in predicted] == [f"{new}:{i}" for i in range(3)]
    served = load_exported(out / "model")
    values = served({"rooms": [3, 2, 9], "area": [80.0, 120.0, 50.0], "city": ["a", "zz", "b"]})
    np.testing.assert_allclose(values, [p["prediction"] for p in predicted], rtol=1e-6)
    assert served.predict({"rooms": [3], "area": [80.0], "city": ["a"]})[1] is None
    assert served.spec.columns[2].vocabulary == ("a", "b")


def test_help_imports_no_jax_and_takes_under_half_of_import_jax():
    probe = (
        "import sys\nfrom jaxfeed.cli import main\n"
        "for args in (['--help'], ['train', '--help'], ['eval', '--help'], ['predict', '--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('LOADED', sorted(m for m in ('jax', 'jaxlib', 'pyarrow', 'flax') if m in sys.modules))"
    )
    check = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert "LOADED []" in check.stdout, check.stdout[-500:] + check.stderr[-500:]

    def seconds(cmd):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, timeout=120)
        return time.perf_counter() - start

    helps, jaxes = [], []
    for _ in range(3):  # interleaved, medians: the machine is shared
        helps.append(seconds([sys.executable, "-m", "jaxfeed.cli", "train", "--help"]))
        jaxes.append(seconds([sys.executable, "-c", "import jax"]))
    assert statistics.median(helps) < 0.5 * statistics.median(jaxes), (helps, jaxes)


def line_starting(stream, prefix, seconds):
    """Read ``stream`` (a text pipe) until a line starting with ``prefix``, for at most
    ``seconds``; the lines read so far go in the failure message."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in stream], daemon=True).start()
    seen, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            seen.append(lines.get(timeout=max(0.0, end - time.monotonic())))
        except queue.Empty:
            break
        if seen[-1].startswith(prefix):
            return seen[-1]
    pytest.fail(f"no line starting {prefix!r} within {seconds} s; read: {''.join(seen)[-2000:]}")


@pytest.mark.slow
def test_ctrl_c_before_the_first_epoch_stops_the_run(process_group, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = process_group(
        [sys.executable, "-m", "jaxfeed.cli", "train", "--epochs", "50", "--out", str(tmp_path / "r")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    # the line printed just before fit: compiling and the first epoch come next. The Ctrl-C is
    # sent at once, so it lands anywhere from fit's start (before its own handler) to the
    # first step: each way must stop the run the same way.
    line_starting(proc.stdout, "model cnn", 300)
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("jaxfeed train ignored Ctrl-C")
    # 130, not death by SIGINT (-2, which a shell also shows as 130): see the test below
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "Segmentation" not in err and "Traceback" not in err
    # before fit's first line (building the trainer) nothing is saved, and the command says so
    assert (
        f"resume with: jaxfeed train --out {tmp_path / 'r'} --resume" in err
        or err.strip() == "jaxfeed train: interrupted before training started"
    ), err[-2000:]


# A Ctrl-C that lands inside a builtin exec() of a string (dataclasses and namedtuple build their
# methods so: Orbax's first import, inside fit, was where about one run in six caught it) sets
# CPython's "unhandled KeyboardInterrupt" flag as it leaves the exec, though the command handles
# it. Under `python -m` (not `-c`, not the console script) the interpreter then ended by SIGINT
# (-2) after printing the resume line.
EXEC_SIGINT = textwrap.dedent(
    """
    import sys
    from jaxfeed.cli import commands, main

    def stopped(args):
        try:
            exec("import os, signal, time\\nos.kill(os.getpid(), signal.SIGINT)\\ntime.sleep(5)")
        except KeyboardInterrupt:
            return 130
        return 0

    commands.info = stopped
    sys.exit(main())
    """
)


def test_a_ctrl_c_handled_after_it_left_an_exec_still_exits_130(tmp_path):
    (tmp_path / "exec_sigint.py").write_text(EXEC_SIGINT)
    result = subprocess.run(
        [sys.executable, "-m", "exec_sigint", "info", "digits"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])


# A command stopped by Ctrl-C (KeyboardInterrupt) or by its handler (Preempted: SystemExit 130)
# and then sent another SIGINT while it exits (a second press; the re-delivery of
# safe_interrupts): it still exits 130. Before, Python's own handler was back by then and the
# process died by SIGINT (-2) at interpreter exit.
LATE_SIGINT = textwrap.dedent(
    """
    import os, signal, sys, time
    from jaxfeed.cli import commands, main

    def stopped(args):
        if sys.argv[-1] == "preempted":
            raise SystemExit(130)
        if sys.argv[-1] == "returned":  # as `jaxfeed train` does: Ctrl-C handled, 130 returned
            from jaxfeed.recipes.interrupt import safe_interrupts

            with safe_interrupts(ignore_after=args.entry):
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)
                except KeyboardInterrupt:
                    return 130
        raise KeyboardInterrupt

    commands.info = stopped
    try:
        status = main()
    finally:
        os.kill(os.getpid(), signal.SIGINT)  # the late one
        time.sleep(0.2)
    sys.exit(status)
    """
)


@pytest.mark.parametrize("how", ["interrupted", "preempted", "returned"])
def test_a_late_ctrl_c_after_the_command_stopped_still_exits_130(how):
    result = subprocess.run(
        [sys.executable, "-c", LATE_SIGINT, "info", how],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr


# A command during which Python code warns (issue 63, D21): jaxfeed's own warning with a line break
# and numpy's RuntimeWarning, from a stand-in command (the formatting is the entry point's).
WARNS = textwrap.dedent(
    """
    import sys, warnings
    import numpy as np
    from jaxfeed.cli import commands, main

    def warned(args):
        warnings.warn("the compilation cache folder /x cannot be written:\\ncompiling without it")
        np.array([1e39]).astype(np.float32)
        return 0

    commands.info = warned
    sys.exit(main())
    """
)


def test_warnings_during_a_command_are_one_clean_line_each():
    """They were Python's two lines: the source path and line number, then the code line."""
    result = subprocess.run(
        [sys.executable, "-c", WARNS, "info", "digits"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        "jaxfeed info: warning: the compilation cache folder /x cannot be written: compiling "
        "without it",
        "jaxfeed info: warning: overflow encountered in cast",
    ]


def test_a_coordinator_that_cannot_be_reached_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        "JAXFEED_COORDINATOR": f"127.0.0.1:{port}",
        "JAXFEED_NUM_PROCESSES": "2",
        "JAXFEED_PROCESS_ID": "1",
        "JAXFEED_INIT_TIMEOUT": "1",
    }
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", "digits", "--out", str(out), env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
    assert f"could not join the 2-process job of coordinator 127.0.0.1:{port}" in done.stderr
    assert "JAXFEED_NUM_PROCESSES" in done.stderr and not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["train", "--data", "nope"],
            "--data no such file or folder: nope; as a Hub dataset id: 'nope' is not a built-in "
            "dataset (digits, mnist",
        ),
        (
            ["train", "--epochs", "-1"],
            "argument --epochs: epochs must be an integer >= 1, got -1",
        ),
        (
            ["train", "--model", "resnet"],
            "model must be cnn, mlp, audio_cnn, transformer, transformer_lm, linear, ngram, "
            "FILE.py:ClassName, "
            "package.module.ClassName, hf:ORG/NAME or a checkpoint folder (./folder), got 'resnet'",
        ),
        (["train", "--optimizer", "adamx"], "--optimizer 'adamx' is not an optax optimizer"),
        (["train", "--epoch", "3"], "unknown flag --epoch (did you mean --epochs?)"),
        (["train", "--lr", "fast"], "argument --lr: lr must be a number or auto, got 'fast'"),
        (["train", "--val-split", "1"], "val_split must be a number < 1, got 1.0"),
        (["train", "--image-size", "12by12"], "expected N or HxW"),
        (["train", "--input-column", "pixels"], "--input-columns 'pixels' is not a column"),
        (["train", "--data", "mnist"], "load_dataset('mnist') needs data_dir="),
        (["eval", "/nonexistent/run"], "is not a jaxfeed run folder"),
        (["predict", "/nonexistent/run", "x.png"], "is not a jaxfeed run folder"),
        (["predict", "/nonexistent/run", "-", "x.png"], "give - alone (paths on stdin"),
        (["eval", "r", "--checkpoint", "first"], "expected best, last or a step number"),
        (["info", "digits", "--rows", "x"], "expected an integer >= 0"),
    ],
)
def test_errors_are_one_clear_line(args, message, capsys):
    status, _, err = run_main(capsys, *args)
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


def test_out_folder_of_other_files_is_refused_before_a_byte_is_written(tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "model").mkdir(parents=True)
    files = {"config.json": '{"my": "settings"}', "history.csv": "a,b\n", "model/weights.bin": "x"}
    for name, text in files.items():
        (mine / name).write_text(text)
    status, _, err = run_main(capsys, "train", "--out", str(mine), "--epochs", "1")
    assert status == 2 and "holds files that are not a jaxfeed run" in err
    assert {str(p.relative_to(mine)) for p in mine.rglob("*") if p.is_file()} == set(files)
    assert all((mine / n).read_text() == t for n, t in files.items())


def test_eval_on_a_malformed_config_is_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"format": "jaxfeed-run", "version": 2, "options": {}}')
    status, _, err = run_main(capsys, "eval", str(tmp_path))
    assert status == 2 and "missing 'task'; the run folder is damaged" in err
    (tmp_path / "config.json").write_text(
        '{"format": "jaxfeed-run", "version": 2, "options": {"epochs": "x"}}'
    )
    status, _, err = run_main(capsys, "eval", str(tmp_path))
    assert status == 2 and "epochs must be an integer" in err and len(err.strip().splitlines()) == 1


def test_predict_names_a_decompression_bomb(image_run, tmp_path, capsys, monkeypatch):
    out, _, _ = image_run
    bomb = tmp_path / "bomb.png"
    PIL.Image.fromarray(np.zeros((100, 100), np.uint8)).save(bomb)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)  # 10,000 pixels: a "bomb" here
    status, _, err = run_main(capsys, "predict", str(out), str(bomb))
    assert status == 2 and f"cannot read image {bomb}" in err and "decompression bomb" in err


def test_predict_of_an_image_run_on_a_table_or_a_non_image_says_so(image_run, tmp_path, capsys):
    out, _, _ = image_run
    table = tmp_path / "houses.csv"
    table.write_text("a,b\n1,2\n")
    status, _, err = run_main(capsys, "predict", str(out), str(table))
    assert status == 2 and f"{table} is a table; this run was trained on images" in err
    fake = tmp_path / "fake.png"
    fake.write_text("not an image")
    status, _, err = run_main(capsys, "predict", str(out), str(fake))
    assert status == 2 and f"cannot read image {fake}: not an image file" in err
    assert "BytesIO" not in err


def test_augment_flip_crop_for_an_image_folder_is_said_and_recorded(image_folder, tmp_path, capsys):
    out = tmp_path / "aug"
    # a cnn of one 4-channel layer: the flips and crops are the loader's, whatever the model
    args = ["train", "--data", str(image_folder), "--image-size", "12", "--epochs", "1",
            "--batch-size", "8", "--val-split", "0", "--model", "cnn",
            "--model.init_args.widths", "[4]"]  # fmt: skip
    status, shown, err = run_main(capsys, *args, "--augment", "flip,crop", "--out", str(out))
    assert status == 0, err
    assert (
        "augment: training images get a random left-right flip (half of them) and a random crop "
        "of their size after padding each side by an eighth (--augment)" in shown
    )
    assert json.loads((out / "config.json").read_text())["options"]["augment"] == ["flip", "crop"]
    status, _, err = run_main(capsys, *args, "--augment", "rotate", "--out", str(tmp_path / "x"))
    assert status == 2 and "augment: 'rotate' is not an augmentation; known: flip, crop" in err
    table = tmp_path / "t.csv"
    table.write_text("a,label\n" + "1,x\n2,y\n" * 10)
    status, _, err = run_main(capsys, "train", "--data", str(table), "--augment", "flip",
                              "--out", str(tmp_path / "t"))  # fmt: skip
    assert status == 2 and "augmentations are for image inputs; this run's inputs are table" in err


def test_version_and_help(capsys):
    status, out, _ = run_main(capsys, "--version")
    assert status == 0 and out.startswith("jaxfeed ")
    for command in ("train", "eval", "predict", "info", "bench", "launch"):
        status, out, _ = run_main(capsys, command, "--help")
        assert status == 0 and "examples:" in out
    _, out, _ = run_main(capsys, "train", "--help")
    for flag in ("--val-split", "--image-size", "--label-column", "--input-columns", "--task",
                 "--config", "--optimizer", "--schedule", "--warmup-steps", "--grad-accum",
                 "--patience", "--seed", "--model"):  # fmt: skip
        assert flag in out
    assert "  --input-columns A,B,C\n" in out and "+" not in out  # no "--input-columns+"


def test_info(tmp_path, capsys):
    status, out, _ = run_main(capsys, "info", "digits", "--rows", "1")
    assert status == 0 and "split train: 1,437 rows" in out and "(built-in dataset)" in out
    (tmp_path / "train.csv").write_text("a,b\n1,x\n2,y\n")
    status, out, _ = run_main(capsys, "info", str(tmp_path))
    assert "MiB on disk in 1 file" in out and "a: Value('int64')" in out
    assert "1 split, " in out and "split train: 2 rows" in out
    assert "row 0: {'a': 1, 'b': 'x'}" in out  # values, not numpy reprs (np.int64(1))
    (tmp_path / "train.csv").write_text("a,b\n1,x\n")
    status, out, _ = run_main(capsys, "info", str(tmp_path))
    assert "split train: 1 row\n" in out


def test_bench_runs_from_the_package_and_names_the_extra(tmp_path):
    env = {**os.environ, "JAXFEED_BENCH_RESULTS": str(tmp_path)}
    result = forkserver.run(
        [sys.executable, "-m", "jaxfeed.cli", "bench", "formatting", "--quick", "--plot", "charts"],
        timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "python -m jaxfeed.bench.formatting" in result.stdout and "jaxfeed" in result.stdout
    # --plot: the results and their chart go to the folder it names
    assert (tmp_path / "charts" / "formatting.json").is_file()
    assert "chart: charts/formatting.png" in result.stdout
    assert (tmp_path / "charts" / "formatting.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_peers_name_the_extra(monkeypatch, capsys):
    from jaxfeed.bench import runner

    monkeypatch.setattr(runner, "missing_peers", lambda names: ["torch"])
    monkeypatch.setattr(runner, "command", lambda name, quick: [sys.executable, "-c", "pass"])
    assert runner.run_benchmarks("train") == 0
    assert "pip install 'jaxfeed[bench]'" in capsys.readouterr().out


def test_bench_results_go_to_the_cache_not_the_current_folder(tmp_path, monkeypatch, capsys):
    from jaxfeed.bench import runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JAXFEED_BENCH_RESULTS", raising=False)
    monkeypatch.setattr(runner, "missing_peers", lambda names: [])
    write = (
        "import os, pathlib; pathlib.Path(os.environ['JAXFEED_BENCH_RESULTS']).mkdir(parents=True)"
    )
    monkeypatch.setattr(runner, "command", lambda name, quick: [sys.executable, "-c", write])
    assert runner.run_benchmarks("train") == 0
    assert f"results: {tmp_path / 'cache' / 'bench-results'}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]


def test_info_verify_checks_a_saved_dataset(tmp_path, capsys):
    from jaxfeed import Dataset

    Dataset.from_dict({"x": list(range(100))}).save_to_disk(str(tmp_path / "saved"))
    status, out, _ = run_main(capsys, "info", str(tmp_path / "saved"), "--verify", "--rows", "0")
    assert status == 0 and out.startswith("verified: every file of")
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    data = bytearray(arrow.read_bytes())
    data[-100] ^= 0xFF
    arrow.write_bytes(bytes(data))
    status, _, err = run_main(capsys, "info", str(tmp_path / "saved"), "--verify")
    assert status == 1 and arrow.name in err and len(err.strip().splitlines()) == 1
    status, _, err = run_main(capsys, "info", "digits", "--verify")
    assert status == 2 and "is not a folder written by save_to_disk" in err


def test_a_broken_pipe_that_is_not_stdout_is_an_error_not_a_quiet_exit(monkeypatch, capsys):
    """``| head`` closing stdout ends quietly (141); a worker's broken pipe is reported."""
    from jaxfeed.cli import commands, main

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(commands, "evaluate", broken)
    assert main(["eval", "somewhere"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("jaxfeed eval: error: BrokenPipeError: "), err
    with pytest.raises(BrokenPipeError):
        main(["--debug", "eval", "somewhere"])


def test_a_held_out_split_with_fewer_rows_than_devices_is_one_clear_line(tmp_path, capsys):
    # 8 devices (conftest) split every evaluation batch; 2 validation rows cannot be split
    table = tmp_path / "t.csv"
    table.write_text("a,label\n" + "".join(f"{i},{'xy'[i % 2]}\n" for i in range(40)))
    status, _, err = run_main(capsys, "train", "--data", str(table), "--val-split", "0.05",
                              "--batch-size", "8", "--out", str(tmp_path / "r"))  # fmt: skip
    assert status == 2, err
    assert "the validation split has 2 rows, fewer than the 8 devices" in err
