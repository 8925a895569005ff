"""Model selection never sees the test split: the command, in subprocesses, counting reads."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cli_helpers import jaxfeed, run_main

# Runs `jaxfeed train` in this process with the loader and Trainer.fit wrapped: every batch a
# loader yields is logged with how many of its rows are test rows (test rows carry a marker input
# far outside the train range), and the moment fit returns is logged too.
COUNTING = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from jaxfeed.loading.loader import DataLoader
    from jaxfeed.train import Trainer
    events = []
    iterate, fit = DataLoader.__iter__, Trainer.fit

    def marked(batch):
        arrays = [np.asarray(v) for v in batch.values()]
        rows = [a.reshape(len(a), -1) for a in arrays if a.dtype.kind == "f" and a.ndim >= 2]
        return int(sum((np.abs(a) > 50).any(axis=1).sum() for a in rows))

    def counting_iter(self):
        for batch in iterate(self):
            events.append(["batch", marked(batch), len(next(iter(batch.values())))])
            yield batch

    def counting_fit(self, *args, **kwargs):
        try:
            return fit(self, *args, **kwargs)
        finally:
            events.append(["fit returned"])

    DataLoader.__iter__, Trainer.fit = counting_iter, counting_fit
    from jaxfeed.cli import main
    status = main(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump(events, f)
    sys.exit(status)
    """
)


def counted_train(tmp_path, *args):
    log = tmp_path / "events.json"
    result = subprocess.run(
        [sys.executable, "-c", COUNTING, str(log), "train", *args],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout, json.loads(log.read_text())


@pytest.fixture(scope="module")
def table_folder(tmp_path_factory):
    """train.csv (200 rows) and test.csv (37 rows, a marker input of 1000+): no validation."""
    root = tmp_path_factory.mktemp("split_table")
    rng = np.random.default_rng(0)
    for name, rows, offset in (("train", 200, 0.0), ("test", 37, 1000.0)):
        a, b = rng.uniform(0, 1, rows), rng.normal(0, 1, rows)
        label = np.where(b > 0, "yes", "no")
        values = zip(a, b, label, strict=True)
        lines = ["a,b,label"] + [f"{x + offset:.4f},{y:.4f},{c}" for x, y, c in values]
        (root / f"{name}.csv").write_text("\n".join(lines) + "\n")
    return root


def test_the_test_split_is_read_once_after_selection(table_folder, tmp_path, capsys):
    out = tmp_path / "run"
    stdout, events = counted_train(
        tmp_path, "--data", str(table_folder), "--label-column", "label", "--epochs", "3",
        "--batch-size", "16", "--lr", "0.05", "--out", str(out),
    )  # fmt: skip
    assert "180 train / 20 validation / 37 test (held out) rows" in stdout
    assert "the model is selected on it, test is held out" in stdout
    end = events.index(["fit returned"])
    before, after = events[:end], events[end + 1 :]
    assert sum(e[2] for e in before) > 3 * 180  # three epochs of train, and validation
    assert sum(e[1] for e in before) == 0  # not one test row before the final evaluation
    assert sum(e[1] for e in after) == 37 == sum(e[2] for e in after)  # all of test, once
    header, values = stdout.split("best epoch")[1].splitlines()[:2]
    columns = dict(zip(("best epoch" + header).split("  "), values.split(), strict=False))
    assert "validation loss" in header and "test accuracy" in header
    test_row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert test_row["kind"] == "test" and 0 <= test_row["test_accuracy"] <= 1
    best = json.loads((out / "config.json").read_text())
    assert best["best_metric"] == "eval_loss" and best["test_split"] == "test"
    epochs = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()[:3]]
    chosen = min(epochs, key=lambda r: r["eval_loss"])  # the earliest lowest validation loss
    assert test_row["epoch"] == chosen["epoch"] == int(values.split()[0]), columns

    # eval of the run: the held-out test split, on the chosen checkpoint, the same figure
    status, shown, err = run_main(capsys, "eval", str(out), "--json")  # in this process: cheaper
    assert status == 0, err
    report = json.loads(shown)
    assert report["split"] == "test" and report["rows"] == 37
    assert report["checkpoint"]["epoch"] == chosen["epoch"]
    assert abs(report["accuracy"] - test_row["test_accuracy"]) < 1e-4


def test_val_split_0_trains_on_all_of_train_without_selection(table_folder, tmp_path, capsys):
    out = tmp_path / "run"
    stdout, events = counted_train(
        tmp_path, "--data", str(table_folder), "--label-column", "label", "--epochs", "2",
        "--val-split", "0", "--batch-size", "50", "--out", str(out),
    )  # fmt: skip
    assert "--val-split 0: no validation split; no model selection" in stdout
    assert "200 train / 37 test (held out) rows" in stdout
    end = events.index(["fit returned"])
    assert [e[2] for e in events[:end]] == [50] * 8  # train only: 2 epochs of 4 batches
    assert sum(e[1] for e in events[end + 1 :]) == 37
    assert "last epoch" in stdout and "no validation split: the last checkpoint is kept" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["best_metric"] is None and saved["eval_split"] is None
    status, shown, err = run_main(capsys, "eval", str(out), "--json")  # in this process: cheaper
    assert status == 0, err
    report = json.loads(shown)
    assert report["checkpoint"]["epoch"] == 2 and report["split"] == "test"


# One run shared by the three tests below: train.csv (200 rows), validation.csv (30) and
# test.csv (37); trained on train+validation for 2 epochs, selecting with `--monitor eval_loss
# --monitor-mode max` (the highest loss: the opposite of its own direction), then resumed to 3.
@pytest.fixture(scope="module")
def merged_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("merged")
    data, out = root / "data", root / "run"
    data.mkdir()
    rng = np.random.default_rng(1)
    for name, rows in (("train", 200), ("validation", 30), ("test", 37)):
        a, b = rng.uniform(0, 1, rows), rng.normal(0, 1, rows)
        lines = ["a,b,label"] + [
            f"{x:.4f},{y:.4f},{'yes' if y > 0 else 'no'}" for x, y in zip(a, b, strict=True)
        ]
        (data / f"{name}.csv").write_text("\n".join(lines) + "\n")
    common = ("--batch-size", "16", "--lr", "0.05", "--out", str(out))
    first = jaxfeed(
        "train", "--data", str(data), "--label-column", "label", "--split-train",
        "train+validation", "--monitor", "eval_loss", "--monitor-mode", "max", "--epochs", "2",
        *common,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    resumed = jaxfeed("train", "--out", str(out), "--resume", "--epochs", "3")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return out, first.stdout, resumed.stdout, rows


def test_split_train_with_validation_leaves_no_validation_split_to_select_on(merged_run):
    out, stdout, _, _ = merged_run
    # the 30 validation rows are trained on: selection is on 10% carved from the 230 merged rows,
    # never on the data's own validation split (which would read "200 train / 30 validation")
    assert "207 train / 23 validation / 37 test (held out) rows" in stdout, stdout
    assert "validation split: 0.1 of train+validation (23 rows" in stdout
    assert "the model is selected on it, test is held out" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["eval_split"] == "validation" and saved["test_split"] == "test"


def test_a_resumed_run_writes_one_test_row(merged_run):
    _, first, resumed, rows = merged_run
    assert "epoch 3/3" in resumed and "epoch 1/3" not in resumed
    assert "test was read once, on it" in first and "test was read once, on it" in resumed
    kinds = [r.get("kind") for r in rows]
    assert kinds.count("test") == 1 and kinds[-1] == "test", kinds
    assert [r["epoch"] for r in rows if "kind" not in r and "eval_loss" in r] == [1, 2, 3]


def test_monitor_mode_max_on_a_min_metric_picks_the_highest(merged_run, capsys):
    out, _, resumed, rows = merged_run
    epochs = {r["epoch"]: r["eval_loss"] for r in rows if "kind" not in r and "eval_loss" in r}
    highest, lowest = max(epochs, key=epochs.get), min(epochs, key=epochs.get)
    assert highest != lowest, epochs  # the two directions pick different checkpoints
    assert rows[-1]["kind"] == "test" and rows[-1]["epoch"] == highest, (rows[-1], epochs)
    assert "the checkpoint of highest eval_loss on the validation split" in resumed
    saved = json.loads((out / "config.json").read_text())
    assert saved["best_metric"] == "eval_loss" and saved["best_mode"] == "max"
    status, shown, err = run_main(capsys, "eval", str(out), "--json")  # in this process: cheaper
    assert status == 0, err
    report = json.loads(shown)
    assert report["checkpoint"]["epoch"] == highest and report["split"] == "test"
