"""Long runs: step schedule, per-step rows, TensorBoard, per-batch callbacks, early stopping with
the best weights, preemption (in-process and a real SIGTERM), NaN at step granularity."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Dataset, Trainer, load_dataset
from jaxfeed.models import MLP
from jaxfeed.train import Callback, EarlyStopping, NonFiniteLossError, Preempted, scale_images
from jaxfeed.train.checkpoint import CheckpointManager


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def mlp(seed=0):
    return MLP(10, (8, 8), hidden=(32,), rngs=nnx.Rngs(seed))


def params(model):
    return [np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))]


class Recorder(Callback):
    def __init__(self):
        self.steps, self.rows = [], []

    def on_train_batch_end(self, trainer, step, logs):
        assert step == trainer.step and logs["step"] == step
        self.steps.append(step)
        if "train_loss" in logs:
            self.rows.append(logs)


class Collect:
    """A user logger: the protocol is two methods."""

    def __init__(self):
        self.calls, self.closed = [], False

    def log_metrics(self, metrics, step):
        self.calls.append((step, dict(metrics)))

    def close(self):
        self.closed = True


def test_step_schedule_rows_tensorboard_and_callbacks(digits, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    schedule = optax.linear_schedule(1e-2, 1e-3, 40)
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=schedule)
    recorder, collect = Recorder(), Collect()
    trainer = Trainer(mlp(), tx, preprocess=scale_images, verbose=0, out_dir=tmp_path,
                      callbacks=[recorder], loggers=("tensorboard", collect))  # fmt: skip
    train = DataLoader(digits["train"], 64, shuffle=True, drop_last=True)  # 22 steps an epoch
    test = DataLoader(digits["test"], 120)
    history = trainer.fit(train, test, max_steps=40, log_every=11, eval_every=20)
    assert trainer.step == 40 and len(history) == 1 and trainer.epoch == 1
    assert recorder.steps == list(range(1, 41))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    kinds = [(r.get("kind", "epoch"), r["step"]) for r in rows]
    assert kinds == [("train", 11), ("eval", 20), ("train", 22), ("epoch", 22), ("train", 33),
                     ("eval", 40)]  # fmt: skip
    train_rows = [r for r in rows if r.get("kind") == "train"]
    assert [r["epoch"] for r in train_rows] == [1, 1, 2]
    assert [r["step"] for r in recorder.rows] == [11, 22, 33]
    for r in train_rows:
        assert {
            "train_loss",
            "train_accuracy",
            "learning_rate",
            "rows_per_second",
            "wall_time",
        } <= set(r)
        assert r["learning_rate"] == pytest.approx(float(schedule(r["step"] - 1)), rel=1e-5)
    epoch_row = rows[3]
    # two windows of 11 equal batches make up the epoch: their mean is the epoch's mean
    mean = (train_rows[0]["train_loss"] + train_rows[1]["train_loss"]) / 2
    assert epoch_row["train_loss"] == pytest.approx(mean, rel=1e-5)
    assert epoch_row["eval_loss"] == history[0]["eval_loss"]
    # TensorBoard's own reader
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/accuracy", "train/learning_rate", "eval/loss", "eval/accuracy",
            "epoch/train_loss", "perf/rows_per_second"} <= tags  # fmt: skip
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [11, 22, 33]
    assert [e.value for e in loss] == pytest.approx([r["train_loss"] for r in train_rows], rel=1e-6)
    assert [e.step for e in events.Scalars("eval/loss")] == [20, 22, 40]
    assert collect.closed and [s for s, m in collect.calls if "train/loss" in m] == [11, 22, 33]
    # the run stopped mid-epoch: continue it to the end of epoch 2
    trainer.fit(train, test, epochs=2)
    assert trainer.step == 44 and len(trainer.history) == 2


def test_early_stopping_restores_the_best_weights(digits):
    best = {}

    class Keep(Callback):
        def on_epoch_end(self, trainer, logs):
            best.setdefault(logs["epoch"], params(trainer.model) if False else None)
            trainer.core.write_back()
            best[logs["epoch"]] = params(trainer.model)

    # the training loss falls every epoch, so with mode="max" epoch 1 stays the best
    stop = EarlyStopping("train_loss", patience=1, mode="max", restore_best_weights=True)
    model = mlp()
    trainer = Trainer(model, optax.adam(1e-2), preprocess=scale_images, verbose=0,
                      callbacks=[Keep(), stop])  # fmt: skip
    trainer.fit(DataLoader(digits["train"], 128, shuffle=True), epochs=5)
    assert trainer.epoch == 3 and stop.stopped_epoch == 3 and stop.best_epoch == 1
    for a, b in zip(params(model), best[1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(best[1], best[3], strict=True))


def test_nan_names_step_and_epoch_without_a_sync_per_step(monkeypatch):
    x = np.random.default_rng(0).random((640, 8, 8), dtype=np.float32)
    x[64 * 3 + 5, 2, 2] = np.inf  # the 4th batch of the second epoch (no shuffle)
    bad = Dataset.from_dict({"image": x, "label": np.arange(640) % 10})
    good = Dataset.from_dict({"image": np.zeros_like(x[:320]), "label": np.arange(320) % 10})
    trainer = Trainer(mlp(), optax.sgd(0.0), verbose=0)
    trainer.fit(DataLoader(good, 64), epochs=1)  # 5 steps
    reads = []
    real = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda x: reads.append(1) or real(x))
    with pytest.raises(
        NonFiniteLossError, match=r"at epoch 2, step 4 of the epoch \(global step 9\)"
    ):
        trainer.fit(DataLoader(bad, 64), epochs=2, log_every=1000)
    assert len(reads) <= 2  # read once, at the end of the epoch: not once per step


class SignalAt(Callback):
    def __init__(self, step, signum=signal.SIGTERM):
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer, step, logs):
        if step == self.step:
            os.kill(os.getpid(), self.signum)


def test_sigint_without_checkpoint_dir_stops_with_130(digits, capsys):
    trainer = Trainer(mlp(), optax.adam(1e-3), preprocess=scale_images, verbose=0,
                      callbacks=[SignalAt(3, signal.SIGINT)])  # fmt: skip
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Preempted) as info:
        trainer.fit(DataLoader(digits["train"], 100), epochs=2)
    assert info.value.code == 130 and trainer.step == 3
    assert capsys.readouterr().err.strip() == (
        "SIGINT: stopped after step 3 (0 epochs done); nothing saved (fit had no checkpoint_dir)"
    )
    assert signal.getsignal(signal.SIGINT) is before  # put back as it was


def test_sigterm_saves_and_resume_is_bitwise_identical(digits, tmp_path, capsys):
    signum = signal.SIGTERM

    def make(callbacks=()):
        model = mlp()
        trainer = Trainer(model, optax.adamw(1e-2), preprocess=scale_images, verbose=0,
                          deterministic=True, callbacks=list(callbacks))  # fmt: skip
        return model, trainer, DataLoader(digits["train"], 100, shuffle=True, seed=3)

    model, trainer, train = make()
    trainer.fit(train, epochs=2)  # 15 steps an epoch
    straight = params(model)
    model, trainer, train = make([SignalAt(20, signum)])
    before = signal.getsignal(signum)
    with pytest.raises(Preempted) as info:
        trainer.fit(train, epochs=2, checkpoint_dir=tmp_path / "ckpt")
    assert info.value.code == 128 + signum and info.value.step == 20
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stopped after step 20" in err[0] and "resume with: fit(" in err[0]
    with CheckpointManager(tmp_path / "ckpt") as ckpt:
        meta = ckpt.meta(ckpt.latest_step)
    assert ckpt.latest_step == 20 and meta["loader"]["batches_consumed"] == 5
    assert meta["progress"]["first_step"] == 15 and meta["epoch"] == 1
    assert signal.getsignal(signum) is before  # handlers are put back as they were
    model, trainer, train = make()
    history = trainer.fit(train, epochs=2, checkpoint_dir=tmp_path / "ckpt", resume=True)
    for a, b in zip(straight, params(model), strict=True):
        np.testing.assert_array_equal(a, b)
    assert [h["epoch"] for h in history] == [1, 2] and trainer.step == 30


SIGTERM_RUN = textwrap.dedent(
    """
    import sys, time
    import jax
    jax.config.update("jax_num_cpu_devices", 8)  # as in the test process (conftest.py)
    import numpy as np, optax
    from flax import nnx
    from jaxfeed import DataLoader, Trainer, load_dataset
    from jaxfeed.models import MLP
    from jaxfeed.train import Callback, scale_images
    ckpt, out = sys.argv[1], sys.argv[2]

    class Slow(Callback):  # reports its steps, slowly, so the signal lands mid-epoch
        def on_train_batch_end(self, trainer, step, logs):
            print("step", step, flush=True)
            time.sleep(0.05)

    model = MLP(10, (8, 8), hidden=(32,), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adamw(1e-2), preprocess=scale_images, verbose=0,
                      deterministic=True, callbacks=[Slow()])
    train = DataLoader(load_dataset("digits")["train"], 128, shuffle=True, seed=1)
    trainer.fit(train, epochs=2, checkpoint_dir=ckpt, resume=True, checkpoint_every=5)
    np.savez(out, *[np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))])
    print("done", trainer.step, flush=True)
    """
)


@pytest.mark.slow
def test_sigterm_mid_epoch_in_a_subprocess_then_bitwise_resume(process_group, digits, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    proc = process_group([sys.executable, "-c", SIGTERM_RUN, ckpt, str(tmp_path / "a.npz")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    for line in proc.stdout:
        if line.strip() == "step 16":  # epoch 2 of 12-step epochs, between two checkpoints
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    lines = [line for line in err.splitlines() if "stopped after step" in line]
    assert len(lines) == 1 and f"checkpoint saved in {ckpt}" in lines[0], err[-3000:]
    stopped = int(lines[0].split("stopped after step ")[1].split()[0])
    assert 16 <= stopped < 24 and "done" not in out
    with CheckpointManager(ckpt) as manager:
        assert manager.latest_step == stopped
    resumed = subprocess.run([sys.executable, "-c", SIGTERM_RUN, ckpt, str(tmp_path / "b.npz")],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0 and "done 24" in resumed.stdout, resumed.stderr[-3000:]
    assert f"step {stopped + 1}\n" in resumed.stdout and f"step {stopped}\n" not in resumed.stdout
    model = mlp()  # the same run, uninterrupted, here
    trainer = Trainer(model, optax.adamw(1e-2), preprocess=scale_images, verbose=0,
                      deterministic=True)  # fmt: skip
    trainer.fit(DataLoader(digits["train"], 128, shuffle=True, seed=1), epochs=2)
    b = np.load(tmp_path / "b.npz")
    for i, p in enumerate(params(model)):
        np.testing.assert_array_equal(b[f"arr_{i}"], p)


@pytest.mark.slow
def test_jaxfeed_train_stops_on_sigterm_with_a_resume_line(process_group, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "jaxfeed.cli", "train", "--model", "mlp", "--epochs", "50",
            "--out", str(out)]  # fmt: skip
    proc = process_group(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("epoch 1/50"):
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("SIGTERM: stopped after step "), err[-3000:]
    assert f"resume with: jaxfeed train --out {out} --resume" in lines[0]
    with CheckpointManager(out / "checkpoints") as ckpt:
        assert ckpt.latest_step == int(lines[0].split("step ")[1].split()[0])


def test_bad_loggers_and_schedules_are_refused_up_front(tmp_path):
    model = mlp()
    with pytest.raises(ValueError, match="unknown logger 'wandb'"):
        Trainer(model, optax.adam(1e-3), loggers=("wandb",), out_dir=tmp_path)
    with pytest.raises(ValueError, match="writes under out_dir: pass out_dir="):
        Trainer(model, optax.adam(1e-3), loggers=("tensorboard",))
    with pytest.raises(TypeError, match=r"log_metrics\(metrics, step\) and close\(\); got dict"):
        Trainer(model, optax.adam(1e-3), loggers=({},))
    trainer = Trainer(model, optax.adam(1e-3), verbose=0)
    for kwargs, message in [({"max_steps": 0}, "max_steps must be a positive int"),
                            ({"log_every": 2.5}, "log_every must be a positive int"),
                            ({"epochs": -1}, "epochs must be an int >= 0"),
                            ({"checkpoint_every": 5}, "checkpoint_every= needs checkpoint_dir="),
                            ({"eval_every": 5}, "eval_every= needs an eval_loader")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            trainer.fit([], **kwargs)


def test_a_second_ctrl_c_interrupts_at_once():
    from jaxfeed.train.preemption import SignalWatch

    with pytest.raises(KeyboardInterrupt), SignalWatch() as watch:
        os.kill(os.getpid(), signal.SIGINT)
        assert watch.should_stop(1)  # the first one only asks to stop
        os.kill(os.getpid(), signal.SIGINT)
