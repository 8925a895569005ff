"""Multi-process training on 127.0.0.1: 2 processes x 4 fake CPU devices (a global mesh of 8)."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import optax
import pytest
from flax import nnx
from safetensors.numpy import load_file

from cli_helpers import run_main
from jaxfeed.models import MLP
from jaxfeed.train.checkpoint import CheckpointManager


def cli(*args, env=None, **kwargs):
    return [sys.executable, "-m", "jaxfeed.cli", *args], {**os.environ, **(env or {})}


@pytest.mark.slow
def test_a_lost_process_stops_the_job_which_resumes_and_trains_like_one_process(
    process_group, tmp_path, capsys
):
    """One 2-process job (2 x 4 fake devices) followed to its end: process 1 is killed in epoch 2
    and the launcher stops the job; the last checkpoint restores; a 2-process resume finishes the
    run, whose weights equal a 1-process run on 8 devices: this process's. (One test, not two,
    and the 1-process run in this process: 4 JAX processes started instead of 7.)"""
    out = tmp_path / "run"
    # process 0, whose checkpoint write fails on the lost peer, exits once JAX's heartbeat
    # timeout has passed: 10 s here, not the default 30 (55 s -> 35 s of this test)
    # batches of 256: 6 steps an epoch, not 21 (a step waits on the other process's gradients)
    argv, env = cli("launch", "--num-processes", "2", "--devices-per-process", "4", "--",
                    "jaxfeed", "train", "--model", "mlp", "--epochs", "50", "--batch-size", "256",
                    "--out", str(out), env={"JAXFEED_HEARTBEAT_TIMEOUT": "10"})  # fmt: skip
    proc = process_group(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids, seen = None, []
    for line in proc.stdout:
        seen.append(line)
        if pids is None and line.startswith("launched"):
            pids = [int(p) for p in re.search(r"pids ([\d ]+)\)", line).group(1).split()]
        if line.startswith("[0] epoch 2/50"):
            break
    # epoch 1's checkpoint, written in the background while epoch 2 trained (6 steps: it may
    # not be committed yet): the job loses process 1 after it, in epoch 2's save
    _committed(out / "checkpoints")
    os.kill(pids[1], signal.SIGKILL)
    start = time.time()
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert time.time() - start < 60
    assert "process 1" in err and "exited with status -9; stopping the others" in err
    first = "".join(seen) + rest
    assert "on 8 CPU devices in 2 processes" in first, first[-3000:]
    assert "[1] epoch" not in first  # only process 0 reports
    with CheckpointManager(out / "checkpoints") as ckpt:
        step = ckpt.latest_step
        assert step is not None and ckpt.meta(step)["epoch"] >= 1  # the last complete checkpoint
        done = ckpt.meta(step)["epoch"]
        model = MLP(10, input_shape=(8, 8, 1), rngs=nnx.Rngs(0))
        ckpt.restore(
            model=model,
            optimizer=nnx.Optimizer(  # the command's adamw, its learning rate logged
                model,
                optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3, weight_decay=1e-4),
                wrt=nnx.Param,
            ),
        )
    epochs = str(done + 1)
    argv, env = cli("launch", "--num-processes", "2", "--devices-per-process", "4", "--",
                    "jaxfeed", "train", "--model", "mlp", "--epochs", epochs, "--out", str(out),
                    "--resume")  # fmt: skip
    resumed = process_group.run(argv, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert (
        f"[0] epoch {done + 1}/{done + 1}" in resumed.stdout
        and f"[0] epoch 1/{done + 1}" not in resumed.stdout
    )
    # the same run in one process on 8 devices: this one (conftest.py gives it 8 CPU devices)
    status, said, err = run_main(capsys, "train", "--model", "mlp", "--epochs", epochs,
                                 "--batch-size", "256", "--out", str(tmp_path / "one"))  # fmt: skip
    assert status == 0, err[-3000:]
    assert "on 8 CPU devices in 1 process" in said and "1 processes" not in said
    a = load_file(str(out / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "one" / "model" / "model.safetensors"))
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5, err_msg=name)


def _committed(folder, timeout=120.0):
    """Wait until a checkpoint step is committed in ``folder``: Orbax writes a step in a
    temporary folder and renames it to the step's number when every process has written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if folder.is_dir() and any(p.name.isdigit() for p in folder.iterdir()):
            return
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint step committed in {folder} within {timeout} s")


def test_initialize_is_a_no_op_for_one_process(monkeypatch):
    from jaxfeed.runtime import distributed

    for name in distributed.ENV:
        monkeypatch.delenv(name, raising=False)
    assert distributed.initialize() is False
    assert distributed.initialize(num_processes=1) is False


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JAXFEED_NUM_PROCESSES": "2"}, "needs the coordinator address"),
        ({"JAXFEED_NUM_PROCESSES": "two"}, "JAXFEED_NUM_PROCESSES must be an integer, got 'two'"),
        (
            {
                "JAXFEED_NUM_PROCESSES": "2",
                "JAXFEED_PROCESS_ID": "5",
                "JAXFEED_COORDINATOR": "127.0.0.1:1",
            },
            "outside",
        ),
    ],
)
def test_initialize_rejects_incomplete_settings(monkeypatch, env, message):
    from jaxfeed.runtime import distributed

    for name in distributed.ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        distributed.initialize()


def test_launch_needs_a_command():
    argv, env = cli("launch", "--num-processes", "2")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "give the command to launch after --" in result.stderr
