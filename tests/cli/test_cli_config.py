"""The command's one config system (jsonargparse over RunConfig), its new flags, whole-split
metrics as --monitor, --log-every, and run folders written by the previous version."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import jaxfeed, run_main
from jaxfeed.recipes.config import ConfigError, RunConfig, read_config_file, read_run

HERE = Path(__file__).parents[1]  # tests/


NET = '''
from flax import nnx


class Net(nnx.Module):
    """A user's model with a constructor argument of its own."""

    def __init__(self, num_classes, input_shape, width, *, rngs):
        self.width = width
        self.hidden = nnx.Linear(input_shape[0], width, rngs=rngs)
        self.out = nnx.Linear(width, num_classes, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))
'''


def test_config_files_flags_and_print_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text(
        "data: digits\nimage_size: 8\nmodel:\n  class_path: net.py:Net\n  init_args: {width: 16}\n"
        "optimizer: {class_path: lion, init_args: {b1: 0.95}}\nmetrics: f1, auc\n"
        "monitor: eval_f1\nclass_weights: balanced\ngrad_clip: 1.0\n"
    )
    status, out, err = run_main(
        capsys, "train", "--config", "run.yaml", "--epochs", "4", "--model.init_args.width", "32",
        "--optimizer.init_args.weight_decay", "0.01", "--input-column", "image", "--print-config",
    )  # fmt: skip
    assert status == 0, err
    printed = read_config_file_text(tmp_path, out)
    assert printed["model"] == {"class_path": "net.py:Net", "init_args": {"width": 32}}
    assert printed["optimizer"] == {
        "class_path": "lion",
        "init_args": {"b1": 0.95, "weight_decay": 0.01},
    }
    assert printed["metrics"] == ["f1", "auc"] and printed["image_size"] == "8"
    assert printed["epochs"] == 4 and printed["input_columns"] == ["image"]
    assert printed["class_weights"] == "balanced" and printed["monitor"] == "eval_f1"
    # what --print-config prints is a config file that reads back to the same options
    assert RunConfig.from_dict(printed, "printed") == RunConfig.from_dict(printed, "again")

    cases = [
        (["--epochs", "0"], "argument --epochs: epochs must be an integer >= 1, got 0"),
        (["--batch_size", "x"], "argument --batch-size: batch_size must be an integer, got 'x'"),
        (["--warmup-step", "3"], "unknown flag --warmup-step (did you mean --warmup-steps?)"),
        (["--monitor-mode", "up"], "monitor_mode must be one of min, max, got 'up'"),
        (["--optimizer", "adamx"], "--optimizer 'adamx' is not an optax optimizer (did you mean"),
        (
            ["--model.init_args", "5"],
            "expected --model.class_path NAME or --model.init_args.ARGUMENT",
        ),
        (["--class-weights", "1,x"], "class_weights must be balanced or numbers"),
        (["--grad-clip", "0"], "grad_clip must be a number > 0, got 0.0"),
    ]
    for args, message in cases:
        status, _, err = run_main(capsys, "train", *args)
        assert status == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)


def read_config_file_text(folder, text):
    (folder / "printed.yaml").write_text(text)
    return read_config_file(folder / "printed.yaml")


def test_config_files_are_refused_clearly(tmp_path, capsys):
    bomb = "a: &a ['lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol']\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )  # 9**9 values once expanded, 472 bytes
    (tmp_path / "bomb.yaml").write_text(bomb)
    status, _, err = run_main(capsys, "train", "--config", str(tmp_path / "bomb.yaml"))
    assert status == 2 and "refused: it expands to more than 100,000 values" in err
    assert "lol" not in err and len(err) < 300
    (tmp_path / "many.yaml").write_text("x: &x 1\nepochs: [" + ", ".join(["*x"] * 200) + "]\n")
    status, _, err = run_main(capsys, "train", "--config", str(tmp_path / "many.yaml"))
    assert status == 2 and "refused: more than 100 YAML aliases" in err
    huge = "z" * 100_000
    (tmp_path / "long.json").write_text(json.dumps({"epochs": huge}))
    status, _, err = run_main(capsys, "train", "--config", str(tmp_path / "long.json"))
    assert status == 2 and "epochs must be an integer" in err and len(err) < 300
    (tmp_path / "typo.yaml").write_text("epochs: 2\nlearning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"unknown option 'learning_rate'"):
        RunConfig.from_dict(read_config_file(tmp_path / "typo.yaml"), "typo.yaml")
    (tmp_path / "obj.yaml").write_text("epochs: !!python/object/apply:os.system ['true']\n")
    status, _, err = run_main(capsys, "train", "--config", str(tmp_path / "obj.yaml"))
    assert status == 2 and "not valid YAML" in err


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A 3-class table of 240 rows, one class rare (for class weights and macro F1)."""
    root = tmp_path_factory.mktemp("config_table")
    rng = np.random.default_rng(1)
    rows = ["a,b,label"]
    for _ in range(240):
        a, b = rng.normal(), rng.normal()
        label = "rare" if a > 1.2 else ("up" if b > 0 else "down")
        rows.append(f"{a:.4f},{b:.4f},{label}")
    (root / "t.csv").write_text("\n".join(rows) + "\n")
    (root / "net.py").write_text(NET)
    return root


def test_flags_reach_the_run_and_the_monitor_chooses(table, tmp_path, capsys, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    result = jaxfeed(
        "train", "--data", str(table / "t.csv"), "--model", "net.py:Net",
        "--model.init_args.width", "12", "--optimizer", "lion", "--optimizer.init_args.b1", "0.8",
        "--lr", "0.003", "--schedule", "warmup_cosine_decay_schedule",
        "--schedule.init_args.end_value", "0.0001", "--warmup-steps", "3", "--grad-clip", "1.0",
        "--class-weights", "balanced", "--metrics", "accuracy,f1,auc", "--monitor", "eval_f1",
        "--log-every", "5", "--tensorboard", "--epochs", "4", "--batch-size", "32",
        "--out", str(out), cwd=table,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((out / "config.json").read_text())
    options = saved["options"]
    net = f"{(table / 'net.py').resolve()}:Net"  # recorded by absolute path: the run travels
    assert options["model"] == {"class_path": net, "init_args": {"width": 12}}
    assert options["optimizer"] == {"class_path": "lion", "init_args": {"b1": 0.8}}
    assert options["metrics"] == ["accuracy", "f1", "auc"] and options["grad_clip"] == 1.0
    assert saved["best_metric"] == "eval_f1" and saved["best_mode"] == "max"
    counts = np.bincount([["down", "rare", "up"].index(r.split(",")[2]) for r in
                          (table / "t.csv").read_text().splitlines()[1:]])  # fmt: skip
    weights = saved["class_weights"]
    assert len(weights) == 3 and weights[1] > 2 * max(weights[0], weights[2])  # the rare class
    assert f"class weights: {weights}" in result.stdout and counts[1] < counts[0]

    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if "kind" not in r]
    train_rows = [r for r in rows if r.get("kind") == "train"]
    assert len(epochs) == 4 and {"eval_f1", "eval_auc", "eval_accuracy"} <= set(epochs[0])
    steps = epochs[-1]["step"] // 4
    assert [r["step"] for r in train_rows] == list(range(5, 4 * steps + 1, 5))
    rates = [r["learning_rate"] for r in train_rows]
    # any optax schedule with its arguments; --lr, the run's length and --warmup-steps fill the rest
    assert options["schedule"] == {"class_path": "warmup_cosine_decay_schedule",
                                   "init_args": {"end_value": 0.0001}}  # fmt: skip
    assert "(warmup_cosine_decay_schedule(end_value=0.0001))" in result.stdout
    import optax

    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.003, 3, 4 * steps, 0.0001)
    assert rates == pytest.approx([float(schedule(r["step"] - 1)) for r in train_rows], rel=1e-5)
    best = max(epochs, key=lambda r: (r["eval_f1"], -r["epoch"]))  # highest F1, the earliest
    assert "highest eval_f1 on the validation split" in result.stdout
    monkeypatch.chdir(table)  # eval and the refusals below run in this process: cheaper
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    report = json.loads(shown)
    assert report["checkpoint"]["epoch"] == best["epoch"]
    assert abs(report["macro_avg"]["f1"] - best["eval_f1"]) < 1e-3  # eval: the validation split
    # the loss is the one trained and selected on (class-weighted), said so, the plain one beside
    assert "validation loss (class-weighted)" in result.stdout
    assert abs(report["loss"] - best["eval_loss"]) < 1e-4
    assert report["loss_weighting"].startswith(f"class-weighted {weights}")
    assert abs(report["unweighted_loss"] - report["loss"]) > 1e-3

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    lr = events.Scalars("train/learning_rate")
    assert [e.step for e in lr] == [r["step"] for r in train_rows]
    assert [e.value for e in lr] == pytest.approx(rates, rel=1e-6)
    assert {"eval/f1", "eval/auc"} <= set(events.Tags()["scalars"])

    # --resume refuses a contradicting new-style flag, before anything is written
    before = (out / "config.json").read_bytes()
    status, _, err = run_main(
        capsys, "train", "--out", str(out), "--resume", "--optimizer", "adamw"
    )
    assert status == 2 and "--optimizer 'adamw' contradicts" in err, err
    status, _, err = run_main(capsys, "train", "--out", str(out), "--resume", "--metrics", "f1")
    assert status == 2 and "--metrics ['f1'] contradicts" in err, err
    assert (out / "config.json").read_bytes() == before


def test_a_run_folder_of_the_previous_version_resumes(tmp_path, capsys, monkeypatch):
    """tests/recipes/run-format-2 was written by the previous jaxfeed train (config.json format 2,
    sgd with a cosine schedule, the best epoch by eval_loss); it evaluates and resumes."""
    work = tmp_path / "work"
    shutil.copytree(HERE / "recipes" / "run-format-2", work / "run")
    shutil.copy(HERE / "recipes" / "run-format-2.csv", work / "t.csv")
    record = read_run(work / "run")
    assert record.options.optimizer == "sgd" and "lr_logged" not in record.resolved
    before = json.loads((work / "run" / "config.json").read_text())
    monkeypatch.chdir(work)  # eval and the refusal run in this process: cheaper
    status, shown, err = run_main(capsys, "eval", "run", "--json")
    assert status == 0, err[-2000:]
    assert json.loads(shown)["checkpoint"]["step"] == 8
    status, _, err = run_main(capsys, "train", "--out", "run", "--resume", "--lr", "0.1")
    assert status == 2 and "--lr 0.1 contradicts the run's saved lr 0.001" in err, err
    result = jaxfeed("train", "--out", "run", "--resume", "--epochs", "3", cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "epoch 3/3" in result.stdout and "epoch 1/3" not in result.stdout
    after = json.loads((work / "run" / "config.json").read_text())
    assert after["options"]["epochs"] == 3 and after["options"]["optimizer"] == "sgd"
    kept = {k: after["preprocess"][k] for k in before["preprocess"]}
    assert kept == before["preprocess"] and after["lr_logged"] is False
    steps = sorted(
        int(p.name) for p in (work / "run" / "checkpoints").iterdir() if p.name.isdigit()
    )
    assert steps[-1] == 12  # 4 steps an epoch: epoch 3 ran from the saved optimizer state
