"""End to end: every command in a subprocess, on the built-in digits and small files."""

import json
import os
import subprocess
import sys

import PIL.Image
import pytest

from jaxfeed import load_dataset


def jaxfeed(*args, cwd=None, stdin=None, timeout=600):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "jaxfeed.cli", *args],
        capture_output=True, text=True, cwd=cwd, input=stdin, timeout=timeout, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "digits"
    result = jaxfeed("train", "--epochs", "4", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def test_train_writes_the_run_folder(run_dir):
    out, stdout = run_dir
    assert "data digits: 1,437 train / 360 test rows" in stdout
    assert "best epoch" in stdout and f"jaxfeed eval {out}" in stdout
    config = json.loads((out / "config.json").read_text())
    assert config["input_column"] == "image" and config["labels"][:3] == ["0", "1", "2"]
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[-1])["eval_accuracy"] > 0.9
    assert (out / "history.csv").read_text().startswith("epoch,")
    with PIL.Image.open(out / "curves.png") as image:
        assert image.format == "PNG" and image.size[0] >= 800 and image.size[1] >= 300
    assert (out / "curves.png").stat().st_size > 20_000
    assert sorted(p.name for p in (out / "model").iterdir()) == [
        "config.json",
        "model.safetensors",
        "model.stablehlo",
    ]
    assert [p.name for p in (out / "checkpoints").iterdir() if p.name.isdigit()]


def test_eval_prints_metrics_and_confusion_matrix(run_dir):
    out, _ = run_dir
    result = jaxfeed("eval", str(out), "--checkpoint", "latest")
    assert result.returncode == 0, result.stderr
    assert "accuracy 0.9" in result.stdout and "confusion matrix" in result.stdout
    rows = [
        line
        for line in result.stdout.splitlines()
        if line.strip()[:1].isdigit() and len(line.split()) == 11
    ]
    assert sum(int(v) for row in rows for v in row.split()[1:]) == 360
    assert (out / "confusion-test.png").stat().st_size > 10_000


def test_predict_returns_the_right_class_for_training_images(run_dir, tmp_path):
    out, _ = run_dir
    train = load_dataset("digits", split="train").with_format("numpy")
    paths, labels = [], []
    for i in range(8):
        row = train[i]
        path = tmp_path / f"{i}.png"
        PIL.Image.fromarray(row["image"]).save(path)
        paths.append(str(path))
        labels.append(str(int(row["label"])))
    result = jaxfeed("predict", str(out), *paths, "--json", "--top-k", "2")
    assert result.returncode == 0, result.stderr
    predictions = json.loads(result.stdout)
    assert [p["top"][0]["label"] for p in predictions] == labels
    assert all(0.0 <= t["probability"] <= 1.0 for p in predictions for t in p["top"])
    piped = jaxfeed("predict", str(out), "-", stdin="\n".join(paths[:2]))
    assert piped.returncode == 0 and piped.stdout.startswith(f"{paths[0]}: {labels[0]} (")


def test_resume_continues_to_the_total(run_dir):
    out, _ = run_dir
    result = jaxfeed("train", "--epochs", "5", "--out", str(out), "--resume")
    assert result.returncode == 0, result.stderr
    assert "epoch 5/5" in result.stdout and "epoch 1/5" not in result.stdout
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 5


def test_info(tmp_path):
    result = jaxfeed("info", "digits", "--rows", "1")
    assert result.returncode == 0
    assert (
        "split train: 1,437 rows" in result.stdout
        and "image: Array2D(shape=(8, 8), dtype='uint8')" in result.stdout
    )
    (tmp_path / "train.csv").write_text("a,b\n1,x\n2,y\n")
    result = jaxfeed("info", str(tmp_path))
    assert "MiB on disk in 1 files" in result.stdout and "a: Value('int64')" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["train", "--data", "nope"], 2, "'nope' is not a built-in dataset (digits, mnist"),
        (["train", "--epochs", "-1"], 2, "argument --epochs: expected a positive integer"),
        (["train", "--model", "resnet"], 2, "argument --model: invalid choice"),
        (["train", "--input-column", "pixels"], 2, "--input-column 'pixels' is not a column"),
        (["train", "--data", "mnist"], 2, "load_dataset('mnist') needs data_dir="),
        (["eval", "/nonexistent/run"], 2, "is not a jaxfeed run folder"),
        (["predict", "/nonexistent/run", "x.png"], 2, "is not a jaxfeed run folder"),
        (["info", "digits", "--rows", "x"], 2, "expected an integer >= 0"),
    ],
)
def test_errors_are_one_clear_line(args, code, message, capsys):
    from jaxfeed.cli import (
        main,
    )  # in this process: the same code path, without a JAX start per case

    try:
        status = main(args)
    except SystemExit as exit:  # argparse's usage errors
        status = exit.code
    assert status == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


def test_usage_error_exit_status_in_a_subprocess():
    result = jaxfeed("train", "--epochs", "0")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_version_and_help(capsys):
    from jaxfeed.cli import main

    assert jaxfeed("--version").stdout.strip().startswith("jaxfeed ")
    for command in ("train", "eval", "predict", "info", "bench", "launch"):
        try:
            main([command, "--help"])
        except SystemExit as exit:
            assert exit.code == 0
        assert "examples:" in capsys.readouterr().out


def test_bench_quick_runs_a_benchmark():
    result = jaxfeed("bench", "checkpoint", "--quick", timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "jaxfeed CheckpointManager" in result.stdout and "raw Orbax" in result.stdout
