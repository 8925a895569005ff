"""Faults of the command, its runs and the trainer (issue 42, items 1, 3, 4, 11, 13, 15, 16, 18,
19, 20, 21, 25, 26, 27): each ends in a correct result or in one line that names the input, exits
2 for a usage or data error, shows no traceback without ``--debug`` and no third-party log line,
and changes nothing in a run folder unless the run goes ahead.

The commands run in subprocesses with a timeout (one tiny table, 108 rows, shared by the module);
the checks that need no run call the library, or ``main`` in this process.
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import optax
import pytest
from flax import nnx

from cli_helpers import jaxfeed, run_main
from jaxfeed import DataLoader, Dataset, Trainer
from jaxfeed.models import MLP
from jaxfeed.recipes.config import ConfigError
from jaxfeed.train.checkpoint import CheckpointError, CheckpointManager

# 8 devices in the command's process, compiled with the suite's XLA flags (conftest.py)
EIGHT = {
    "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8",
    "JAX_PLATFORMS": "cpu",
}


def _table(path, rows=108, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "b", "label"])
        for i in range(rows):
            writer.writerow([f"{rng.normal():.4f}", f"{rng.normal():.4f}", "xy"[i % 2]])
    return path


def _files(folder):
    """Every file of a folder with its bytes: a run folder compared before and after."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _one_line(result, status=2):
    """The command failed with ``status`` and said so in one line: no traceback, no log lines."""
    return _one_line_here(result.returncode, result.stderr, status, result.stdout)


def _one_line_here(code, stderr, status=2, stdout=""):
    """:func:`_one_line` of a command run in this process by ``run_main(capfd, ...)``: ``capfd``
    takes what native code (Orbax, TensorStore, absl) writes to the descriptors as well."""
    assert code == status, stdout[-2000:] + stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "absl" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return _table(tmp_path_factory.mktemp("table") / "t.csv")


@pytest.fixture(scope="module")
def base_run(table, tmp_path_factory):
    """Two epochs of the mlp on one device: 97 train rows in batches of 32 (4 steps, the last of
    1 row), checkpoints at steps 4 and 8 (``--model mlp``: trained alone; with the model left to
    the kind, the linear model may be chosen over it on these noise labels, and its one
    checkpoint take the place of the mlp's)."""
    out = tmp_path_factory.mktemp("runs") / "base"
    result = jaxfeed(
        "train", "--data", str(table), "--label-column", "label", "--model", "mlp",
        "--epochs", "2", "--batch-size", "32", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    with CheckpointManager(out / "checkpoints") as manager:
        assert manager.all_steps == [4, 8]
    return out


def _copy(run, tmp_path, name="run"):
    target = tmp_path / name
    shutil.copytree(run, target)
    return target


# ---------------------------------------------------------------------------------- item 1, 27
def test_a_run_shorter_than_an_epoch_selects_exports_and_prints_pastable_commands(table, tmp_path):
    """Item 1: ``--max-steps 2`` of 13 steps an epoch evaluates the last state, selects and
    exports it, and prints the summary; item 27: the follow-up commands are shell-quoted (a
    folder with spaces and a non-ASCII name), and pasted into a shell they work."""
    out = tmp_path / "dir with spaces" / "rün"
    result = jaxfeed(
        "train", "--data", str(table), "--label-column", "label", "--model", "mlp",
        "--max-steps", "2", "--batch-size", "8", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "best epoch" in result.stdout and "1 (part)" in result.stdout
    assert (out / "model" / "config.json").is_file()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("kind") for r in rows][-2:] == ["eval", "baselines"]  # the baselines' row last
    assert rows[-2]["step"] == 2
    with CheckpointManager(out / "checkpoints") as manager:
        assert manager.best_step == 2 and "eval_loss" in manager.metrics(2)
    evaluate = next(line for line in result.stdout.splitlines() if line.startswith("evaluate:"))
    command = evaluate.split(":", 1)[1].strip()
    prog, rest = command.split(" eval ", 1)  # jaxfeed, or the path that runs it off PATH
    assert rest == f"'{out}' --json" and prog.endswith(("jaxfeed", "-m jaxfeed.cli")), command
    if prog == "jaxfeed":
        command = command.replace("jaxfeed", f"{sys.executable} -m jaxfeed.cli", 1)
    pasted = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300)
    assert pasted.returncode == 0, pasted.stderr[-3000:]
    assert json.loads(pasted.stdout)["checkpoint"]["step"] == 2


def test_a_fit_that_stops_inside_an_epoch_checkpoints_its_last_state_with_its_figures(tmp_path):
    """Item 1, the library: ``fit(max_steps=)`` inside the first epoch evaluates the last state
    and saves it with its figures, so it can be selected; ``history`` keeps whole epochs."""
    rng = np.random.default_rng(0)
    data = Dataset.from_dict(
        {"x": rng.normal(size=(64, 4)).astype(np.float32), "label": np.arange(64) % 2}
    )
    trainer = Trainer(MLP(2, (4,), hidden=(8,), rngs=nnx.Rngs(0)), optax.adam(1e-2), inputs="x",
                      verbose=0, out_dir=tmp_path)  # fmt: skip
    trainer.fit(DataLoader(data, 8, shuffle=True), DataLoader(data, 16), max_steps=3,
                checkpoint_dir=tmp_path / "ckpt", checkpoint_every=3)  # fmt: skip
    assert trainer.step == 3 and trainer.epoch == 0 and len(trainer.history) == 0
    with CheckpointManager(tmp_path / "ckpt") as manager:
        assert manager.all_steps == [3] and manager.best_step == 3
        metrics = manager.metrics(3)
    assert {"train_loss", "eval_loss", "eval_accuracy"} <= set(metrics)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{**rows[0], "kind": "eval", "step": 3, "epoch": 1}]
    assert rows[0]["eval_loss"] == pytest.approx(metrics["eval_loss"])


# ---------------------------------------------------------------------------------- items 3, 16
def test_a_failed_resume_onto_a_damaged_step_changes_nothing_and_resume_step_continues(
    base_run, tmp_path
):
    """Item 16: a damaged latest step (on 8 devices, where TensorStore's reads still in flight
    printed thousands of lines) is one line naming ``--resume-step``; item 3: the failed resume
    leaves every file as it was (config.json was rewritten before); ``--resume-step 4`` goes
    ahead, setting the later step aside."""
    run = _copy(base_run, tmp_path)
    for shard in (run / "checkpoints" / "8" / "state").rglob("d/*"):
        shard.write_bytes(shard.read_bytes()[:20])
    before = _files(run)
    result = jaxfeed("train", "--out", str(run), "--resume", "--epochs", "3", "--sharding", "fsdp",
                     env=EIGHT, timeout=300)  # fmt: skip
    line = _one_line(result)
    assert "checkpoint step 8" in line and "damaged" in line and "--resume-step 4" in line
    assert "Event loop is closed" not in result.stderr and "Exception ignored" not in result.stderr
    assert _files(run) == before
    resumed = jaxfeed("train", "--out", str(run), "--resume", "--resume-step", "4", "--epochs", "3",
                      timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 4: steps [8] set aside" in resumed.stdout
    assert (run / "set-aside" / "checkpoint-8").is_dir()
    with CheckpointManager(run / "checkpoints") as manager:
        assert manager.latest_step == 12 and manager.meta(12)["epoch"] == 3
    assert json.loads((run / "config.json").read_text())["options"]["epochs"] == 3


# ---------------------------------------------------------------------------------- item 20
def test_resuming_after_the_data_changed_says_so_and_changes_nothing(base_run, tmp_path, capfd):
    run = _copy(base_run, tmp_path)
    saved = json.loads((run / "config.json").read_text())
    # the same run, its file now holds two thirds of the rows: 72, whose validation split (8
    # rows) this process's 8 devices can evaluate, so the refusal is the data's, not theirs
    _table(saved["options"]["data"] + ".part.csv", rows=72)
    saved["options"]["data"] += ".part.csv"
    (run / "config.json").write_text(json.dumps(saved))
    before = _files(run)
    # refused before training: in this process (one JAX start fewer)
    status, said, err = run_main(capfd, "train", "--out", str(run), "--resume", "--epochs", "3")
    line = _one_line_here(status, err, stdout=said)
    assert "the run's data changed since its checkpoint (step 8): train rows 97 -> 64" in line
    assert _files(run) == before


# ---------------------------------------------------------------------------------- item 4
def test_a_run_resumes_on_another_device_count_mesh_and_workers_and_back(
    base_run, tmp_path, capsys
):
    """Item 4 and the long-runs guide: 1 device -> 8 devices on a mesh data=4,model=2 with a
    worker process (whose train loader drops the last short batch) -> 1 device again: each
    resume continues at the next epoch, with the epoch's steps of its device count. (The 8-device
    resume runs in this process, which has 8 CPU devices: one JAX process start fewer.)"""
    run = _copy(base_run, tmp_path)
    status, said, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "3",
                                 "--mesh", "data=4,model=2", "--num-workers", "1")  # fmt: skip
    assert status == 0, err[-3000:]
    assert "on 8 CPU devices in 1 process (mesh data=4,model=2" in said and "epoch 3/3" in said
    one = jaxfeed("train", "--out", str(run), "--resume", "--epochs", "4", "--mesh", "data=1",
                  "--num-workers", "0", timeout=300)  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    with CheckpointManager(run / "checkpoints") as manager:
        assert manager.all_steps[-2:] == [11, 15]  # 8 + 3 steps (96 rows of 97), then + 4 (97)
        assert [manager.meta(s)["epoch"] for s in (11, 15)] == [3, 4]


def test_resume_refuses_a_batch_size_or_data_location_change_naming_what_may_change(
    base_run, tmp_path, table, capsys
):
    """The long-runs guide's rule: device count, mesh, sharding and workers may change on a
    resume; the batch size and the data may not (a loader position counts batches of the data)."""
    run = _copy(base_run, tmp_path)
    before = _files(run)
    moved = shutil.copy(table, tmp_path / "moved.csv")
    status, _, err = run_main(capsys, "train", "--out", str(run), "--resume", "--batch-size", "16")
    assert status == 2 and "--batch-size " in err and "contradicts the run's saved" in err, err
    assert "--mesh" in err and "--num-workers" in err and "--sharding" in err
    # data elsewhere is taken only when it is the run's data (file names, sizes and digests)
    status, _, err = run_main(capsys, "train", "--out", str(run), "--resume", "--data", str(moved))
    assert status == 2 and "is not the data the run was trained on" in err, err
    assert "moved.csv: not in the run's data" in err and "t.csv: missing" in err, err
    assert _files(run) == before


# ---------------------------------------------------------------------------------- item 11
def test_eval_on_an_empty_split_is_refused_and_writes_nothing(base_run, capfd):
    before = _files(base_run)
    status, said, err = run_main(capfd, "eval", str(base_run), "--split", "train[50%:10%]")
    line = _one_line_here(status, err, stdout=said)  # in this process: one JAX start fewer
    assert "--split 'train[50%:10%]' selects no rows (rows: train 108)" in line
    assert _files(base_run) == before


# ---------------------------------------------------------------------------------- item 15
def test_a_full_disk_while_checkpointing_is_one_line_and_no_partial_step(table, tmp_path):
    """Item 15: under ``ulimit -f 200`` the first checkpoint's files are too large to write: one
    line naming the step and the folder, no Orbax, absl or asyncio output, no half-written step
    left. The MLP's 512x512 layer (1 MiB, and its Adam moments) is over the limit in any file
    Orbax writes; with the default layers (128 KiB each), whether a step's file went over depended
    on how Orbax's background writes grouped them. (No compilation cache in that process: its
    entries would be too large as well.)"""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "JAX_ENABLE_COMPILATION_CACHE": "false"}
    command = [sys.executable, "-m", "jaxfeed.cli", "train", "--data", str(table),
               "--label-column", "label", "--epochs", "2", "--batch-size", "32", "--out", str(out),
               "--model", "mlp", "--model.init_args.hidden", "[512, 512]"]  # fmt: skip
    result = subprocess.run(
        ["bash", "-c", 'ulimit -f 200 && exec "$@"', "bash", *command],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    line = _one_line(result, status=1)
    assert f"could not write checkpoint step 4 to {out / 'checkpoints'}: disk full?" in line
    assert "resume with: jaxfeed train --out" in line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == []


def test_a_failed_save_keeps_the_previous_step_loadable(tmp_path, monkeypatch):
    """Item 15, the library: the second epoch's save fails as a full disk does (in Orbax's
    background write): one ``CheckpointError`` naming the step, the folder and the intact step;
    the first step restores; no partial step and no writer record are left."""
    import orbax.checkpoint as ocp

    real = ocp.CheckpointManager.save

    def save(self, step, *args, **kwargs):
        if step == 16:
            raise ValueError(
                "OUT_OF_RANGE: Failed writing: No space left on device [os_error_code='28']"
            )
        return real(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    rng = np.random.default_rng(0)
    data = Dataset.from_dict(
        {"x": rng.normal(size=(64, 4)).astype(np.float32), "label": np.arange(64) % 2}
    )
    trainer = Trainer(MLP(2, (4,), hidden=(8,), rngs=nnx.Rngs(0)), optax.adam(1e-2), inputs="x",
                      verbose=0)  # fmt: skip
    with pytest.raises(CheckpointError) as caught:
        trainer.fit(DataLoader(data, 8), epochs=3, checkpoint_dir=tmp_path)
    assert str(caught.value) == (
        f"could not write checkpoint step 16 to {tmp_path}: disk full?; step 8 is intact"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["8"]
    fresh = Trainer(MLP(2, (4,), hidden=(8,), rngs=nnx.Rngs(1)), optax.adam(1e-2), inputs="x",
                    verbose=0)  # fmt: skip
    with CheckpointManager(tmp_path) as manager:
        assert fresh.restore_checkpoint(manager, "latest")["step"] == 8


# ---------------------------------------------------------------------------------- item 18
def test_a_truncated_flac_is_refused_by_the_scan_before_a_byte_is_written(tmp_path, capfd):
    import soundfile

    from audio_clips import clip

    rng = np.random.default_rng(0)
    for kind in ("rising", "falling"):
        (tmp_path / "clips" / kind).mkdir(parents=True)
        for i in range(4):
            samples = clip(kind, rng, 8000, 0.3).astype(np.float32)
            soundfile.write(tmp_path / "clips" / kind / f"{i}.flac", samples, 8000)
    cut = tmp_path / "clips" / "rising" / "2.flac"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])  # its header still says 0.3 s
    out = tmp_path / "run"
    # in this process (one JAX start fewer); capfd takes the decoder's own output as well
    status, said, err = run_main(
        capfd, "train", "--data", str(tmp_path / "clips"), "--out", str(out)
    )
    line = _one_line_here(status, err, stdout=said)
    assert "cannot decode the audio of column 'audio'" in line and str(cut) in line
    assert not out.exists()


# ---------------------------------------------------------------------------------- items 13, 25
@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        (
            "--sample-rate",
            "--sample-rate: sample_rate must be an integer <= 192,000, got 1,000,000,000",
        ),
        ("--clip-seconds", "--clip-seconds: clip_seconds must be a number <= 600, got 1e+09"),
    ],
)
def test_huge_audio_flags_are_refused_before_any_work(flag, expected, tmp_path):
    out = tmp_path / "run"
    result = jaxfeed("train", flag, "1000000000", "--out", str(out), timeout=120)
    assert expected in _one_line(result)
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--seed", str(2**64)], ["train", "--num-workers", "100000"],
        ["train", "--batch-size", str(10**9)], ["train", "--max-steps", str(2**31)],
        ["train", "--epochs", str(10**9)], ["train", "--vocab-size", str(10**9)],
        ["train", "--seq-len", str(10**9)], ["train", "--image-size", "100000"],
        ["train", "--lr", "inf"], ["train", "--grad-clip", "nan"],
        ["train", "--warmup-steps", str(2**40)], ["train", "--eval-every", str(2**40)],
        ["train", "--resume-step", "-1"], ["train", "--resume-step", "3"],
        ["generate", "RUN", "x", "--seed", str(2**40)],
        ["generate", "RUN", "x", "--max-new-tokens", str(10**9)],
        ["launch", "--num-processes", "100000", "--", "true"],
        ["launch", "--port", "70000", "--num-processes", "2", "--", "true"],
    ],
)  # fmt: skip
def test_every_numeric_flag_is_bounded_before_any_work(args, capsys, tmp_path):
    out = tmp_path / "run"
    argv = [a.replace("RUN", str(out)) for a in args]
    status, _, err = run_main(capsys, *argv, *(["--out", str(out)] if args[0] == "train" else []))
    name = next(a for a in args if a.startswith("--"))
    assert status == 2 and err.count("\n") == 1 and name in err, err
    assert not out.exists()


def test_a_config_file_with_an_out_of_range_number_names_the_file(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("sample_rate: 1000000000\n")
    status, _, err = run_main(capsys, "train", "--config", str(config))
    assert status == 2 and f"--config {config}: sample_rate must be an integer <= 192,000" in err


# ---------------------------------------------------------------------------------- item 19
@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("binary.yaml", b"\xff\xfe\x00\x01binary", "not a text file (byte 0xff at offset 0"),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply to read"),
        ("deep.yaml", b"a: " + b"[" * 100_000 + b"]" * 100_000, "nested too deeply to read"),
    ],
)
def test_a_binary_or_deeply_nested_config_file_is_refused_naming_it(
    name, content, expected, tmp_path, capsys
):
    path = tmp_path / name
    path.write_bytes(content)
    status, _, err = run_main(capsys, "train", "--config", str(path))
    assert status == 2 and f"--config {path}: {expected}" in err and err.count("\n") == 1


def test_a_deeply_nested_run_config_is_refused_naming_it(tmp_path):
    from jaxfeed.recipes.config import read_run

    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=r"config.json is not a run's config.json: nested too"):
        read_run(tmp_path)


# ---------------------------------------------------------------------------------- item 21, 26
def test_debug_before_the_command_shows_the_traceback():
    result = jaxfeed("--debug", "train", "--epochs", "0", timeout=120)
    assert result.returncode == 1 and "Traceback" in result.stderr, result.stderr[-2000:]
    assert "epochs must be an integer >= 1" in result.stderr
    quiet = jaxfeed("train", "--epochs", "0", timeout=120)
    assert "argument --epochs: epochs must be an integer >= 1" in _one_line(quiet)


def test_predict_with_an_empty_input_names_it(base_run):
    result = jaxfeed("predict", str(base_run), "", timeout=120)
    assert _one_line(result) == (
        "jaxfeed predict: error: INPUT 1 is empty (''): give a file, a folder, a text, or - to "
        "read paths from stdin"
    )
