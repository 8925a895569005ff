import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed import DataLoader, Trainer, load_dataset
from jaxfeed.models import CNN, MLP, LinenCNN
from jaxfeed.serve.export import export, rebuild
from jaxfeed.train import EarlyStopping, History, scale_images
from jaxfeed.train.checkpoint import CheckpointError, CheckpointManager


def small():
    model = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)


def test_keeps_last_and_best(tmp_path):
    with CheckpointManager(
        tmp_path, keep_last=2, keep_best=1, best_metric="eval_accuracy", async_save=False
    ) as ckpt:
        for step, acc in zip(range(1, 7), [0.2, 0.9, 0.5, 0.4, 0.3, 0.1], strict=True):
            ckpt.save(step, {"w": jnp.full(2, step)}, metrics={"eval_accuracy": acc})
        assert ckpt.all_steps == [2, 5, 6]  # best (2) and the last two, even though they are worse
        assert ckpt.best_step == 2 and ckpt.latest_step == 6
        assert ckpt.metrics(5) == {"eval_accuracy": 0.3}
        assert ckpt.restore("best", state={"w": jnp.zeros(2)})["state"]["w"].tolist() == [2, 2]
    # the default: eval_loss, lowest first, the earliest on ties (the rule of History.best)
    with CheckpointManager(tmp_path / "min", keep_last=1, async_save=False) as ckpt:
        for step, loss in zip(range(1, 6), [0.5, 0.2, 0.9, 0.2, 0.7], strict=True):
            ckpt.save(step, {"w": jnp.zeros(1)}, metrics={"eval_loss": loss, "eval_f1": step / 10})
        assert ckpt.all_steps == [2, 5] and ckpt.best_step == 2  # step 4 ties with 2: not kept
    history = History({"epoch": s, "eval_loss": v} for s, v in enumerate([0.5, 0.2, 0.9, 0.2], 1))
    assert history.best()["epoch"] == 2 and EarlyStopping().mode == "min"
    with CheckpointManager(tmp_path / "min", best_metric="eval_f1") as ckpt:
        assert ckpt.best_mode == "max" and ckpt.best_step == 5


def test_a_reopened_manager_keeps_the_best_step_of_the_earlier_one(tmp_path):
    """A resumed run: the best step saved by an earlier manager survives the later saves
    (Orbax keeps no metrics of its own for steps it did not save in this process)."""
    for mode, losses, best in (("min", [0.1, 0.5, 0.6], 1), ("max", [0.9, 0.5, 0.2], 1)):
        folder = tmp_path / mode
        options = {"keep_last": 1, "best_mode": mode, "async_save": False}
        with CheckpointManager(folder, **options) as ckpt:
            ckpt.save(1, {"w": jnp.zeros(1)}, metrics={"eval_loss": losses[0]})
        with CheckpointManager(folder, **options) as ckpt:
            for step, loss in zip((2, 3, 4), [*losses[1:], losses[-1]], strict=True):
                ckpt.save(step, {"w": jnp.zeros(1)}, metrics={"eval_loss": loss})
            assert ckpt.all_steps == [best, 4] and ckpt.best_step == best, mode


def test_restore_into_fresh_objects_and_typed_keys(tmp_path):
    model, opt = small()
    model.noise = nnx.Rngs(7)  # stored typed PRNG keys (key<fry>) must round-trip
    with CheckpointManager(tmp_path, async_save=True) as ckpt:
        from jaxfeed.train.checkpoint import nnx_pure_state

        ckpt.save(10, nnx_pure_state(model, opt), metrics={"eval_accuracy": 1.0}, meta={"epoch": 1})
    fresh, fresh_opt = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(5)), None
    fresh.noise = nnx.Rngs(0)
    fresh_opt = nnx.Optimizer(fresh, optax.adamw(1e-3), wrt=nnx.Param)
    meta = CheckpointManager(tmp_path).restore(model=fresh, optimizer=fresh_opt)["meta"]
    assert meta["epoch"] == 1 and meta["step"] == 10
    for a, b in zip(
        jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(fresh)), strict=True
    ):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_saved_sharded_over_8_devices_restores_on_one(tmp_path):
    mesh = Mesh(np.array(jax.devices()), ("data",))
    w = jax.device_put(jnp.arange(32.0).reshape(16, 2), NamedSharding(mesh, PartitionSpec("data")))
    with CheckpointManager(tmp_path, async_save=False) as ckpt:
        ckpt.save(1, {"w": w})
    target = jax.device_put(jnp.zeros((16, 2)), jax.devices()[2])
    restored = CheckpointManager(tmp_path).restore(1, state={"w": target})["state"]["w"]
    assert restored.devices() == {jax.devices()[2]}
    np.testing.assert_array_equal(np.asarray(restored), np.arange(32.0).reshape(16, 2))


def test_mismatches_and_foreign_directories(tmp_path):
    model, opt = small()
    from jaxfeed.train.checkpoint import nnx_pure_state

    with CheckpointManager(tmp_path / "a", async_save=False) as ckpt:
        ckpt.save(1, nnx_pure_state(model, opt))
    other = MLP(3, (4,), hidden=(16,), rngs=nnx.Rngs(0))
    with pytest.raises(
        CheckpointError,
        match=r"\['model'\]\['head'\]\['kernel'\] has shape \(8, 3\) in the checkpoint but \(16, 3\) here",
    ):
        CheckpointManager(tmp_path / "a").restore(model=other)
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        CheckpointManager(tmp_path / "empty").restore(model=model)
    with pytest.raises(CheckpointError, match="no step 5"):
        CheckpointManager(tmp_path / "a").restore(5, model=model)
    import orbax.checkpoint as ocp

    with ocp.CheckpointManager(tmp_path / "foreign") as raw:
        raw.save(1, args=ocp.args.StandardSave({"w": jnp.ones(2)}))
    with pytest.raises(CheckpointError, match="jaxfeed did not write"):
        CheckpointManager(tmp_path / "foreign")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match="not writable"):
        CheckpointManager(tmp_path / "file" / "ckpt")


def test_no_pickle_anywhere(tmp_path, monkeypatch):
    model, opt = small()
    trainer_dir = tmp_path / "ckpt"
    from jaxfeed.train.checkpoint import nnx_pure_state

    with CheckpointManager(trainer_dir, async_save=False) as ckpt:
        ckpt.save(1, nnx_pure_state(model, opt), meta={"loader": {"seed": 0}})
    for root, _, files in os.walk(trainer_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                head = f.read(2)
            assert not (
                head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
            ), name

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle was called")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    CheckpointManager(trainer_dir).restore(model=model, optimizer=opt)


def test_failed_async_save_is_raised_on_close(tmp_path, monkeypatch):
    ckpt = CheckpointManager(tmp_path)
    ckpt.save(1, {"w": jnp.ones(2)})

    def broken():
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ckpt._manager, "check_for_errors", broken)
    with pytest.raises(
        CheckpointError,
        match=r"could not write checkpoint step 1 to .*: RuntimeError: disk on fire$",
    ):
        ckpt.close()


KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import jax.numpy as jnp
    from orbax.checkpoint._src.path import async_path
    from jaxfeed.train.checkpoint import CheckpointManager
    ckpt = CheckpointManager(sys.argv[1], async_save=False)
    ckpt.save(1, {"w": jnp.ones(1000)})
    async def stalled_rename(src, dst):  # the data of step 2 is written; die before it is renamed in
        print("finalizing", flush=True)
        time.sleep(60)
    async_path.rename = stalled_rename
    ckpt.save(2, {"w": jnp.full(1000, 2.0)})
    """
)


def test_killed_mid_save_keeps_previous_and_cleans_up(process_group, tmp_path):
    proc = process_group(
        [sys.executable, "-c", KILL_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    assert line.strip() == "finalizing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any("tmp" in p.name for p in tmp_path.iterdir())
    ckpt = CheckpointManager(tmp_path)
    assert ckpt.all_steps == [1]
    assert ckpt.restore(state={"w": jnp.zeros(1000)})["state"]["w"][0] == 1
    assert any("tmp" in p.name for p in tmp_path.iterdir())  # a reader deletes nothing
    ckpt.begin_writing()  # a writer: the recorded writer (the killed process) is gone
    assert not any("tmp" in p.name for p in tmp_path.iterdir())  # the half-written step is gone
    assert ckpt.removed_partial and ckpt.all_steps == [1]
    ckpt.close()
    assert not (tmp_path / ".jaxfeed-writer.json").exists()


def test_two_writers_claiming_at_once_never_remove_each_others_steps(tmp_path, monkeypatch):
    """Issue 44: a writer removes a dead writer's half-written steps after reading its record. A
    second writer claiming the folder meanwhile (its own step then in progress) must wait for
    that claim to end, so the first never removes the second's step."""
    from jaxfeed.train import checkpoint as module
    from jaxfeed.train import writer_record

    dead = {"pid": os.getpid(), "host": socket.gethostname(), "start": "0"}  # a reused pid
    (tmp_path / module.WRITER_FILE).write_text(json.dumps(dead))
    (tmp_path / "3.orbax-checkpoint-tmp-1").mkdir()  # the dead writer's half-written step
    first = CheckpointManager(tmp_path, async_save=False)
    second = CheckpointManager(tmp_path, async_save=False)
    live = tmp_path / "5.orbax-checkpoint-tmp-2"
    claimed = threading.Event()

    def claim_second():
        second._claim()
        live.mkdir()  # its save of step 5, under way
        claimed.set()

    real, racer = module.partial_saves, []

    def partial_saves(directory):  # the first has read the dead record: the second claims now
        if not racer:
            racer.append(threading.Thread(target=claim_second))
            racer[0].start()
            claimed.wait(timeout=1.0)  # it cannot, while the first holds the claim
        return real(directory)

    monkeypatch.setattr(module, "partial_saves", partial_saves)
    first._claim()
    racer[0].join(timeout=30)
    assert claimed.is_set() and live.is_dir()
    assert not (tmp_path / "3.orbax-checkpoint-tmp-1").exists()
    assert first.removed_partial == ["3.orbax-checkpoint-tmp-1"]
    assert not (tmp_path / writer_record.CLAIM_LOCK).exists()
    first.close()
    second.close()


RESUME_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np, optax, jax
    from flax import nnx
    from jaxfeed import DataLoader, Trainer, load_dataset
    from jaxfeed.models import CNN, LinenCNN
    from jaxfeed.train import scale_images
    digits = load_dataset("digits")

    def run(api, epochs, ckpt, out):
        train = DataLoader(digits["train"], 64, shuffle=True, seed=1)
        test = DataLoader(digits["test"], 120)
        if api == "nnx":
            model = CNN(10, (8, 8, 1), rngs=nnx.Rngs(0))
            trainer = Trainer(model, optax.adamw(1e-3), preprocess=scale_images, verbose=0)
        else:
            trainer = Trainer.from_linen(LinenCNN(10), optax.adamw(1e-3), np.zeros((1, 8, 8), np.uint8),
                                         preprocess=scale_images, verbose=0)
        trainer.fit(train, test, epochs=epochs, checkpoint_dir=ckpt, resume=ckpt is not None)
        state = nnx.state(model) if api == "nnx" else trainer.variables
        leaves = {jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(state)[0]}
        np.savez(out, **leaves)
        print(api, len(trainer.history), trainer.history[-1]["epoch"])

    phase, folder = sys.argv[1], sys.argv[2]
    for api in ("nnx", "linen"):
        if phase == "first":  # two epochs straight; then one epoch with checkpoints, and exit
            run(api, 2, None, f"{folder}/{api}-straight.npz")
            run(api, 1, f"{folder}/{api}-ckpt", f"{folder}/{api}-first.npz")
        else:  # a new process resumes from the checkpoint of epoch 1
            run(api, 2, f"{folder}/{api}-ckpt", f"{folder}/{api}-resumed.npz")
    """
)


@pytest.mark.slow
def test_interrupted_and_resumed_run_is_bitwise_identical(tmp_path, monkeypatch, capsys):
    """For an nnx and a linen model: this process trains two epochs straight, and one epoch with
    checkpoints; a new process resumes from those and ends bitwise equal to the straight run.
    (Both models share the processes: each process start costs seconds. The new process has this
    one's 8 CPU devices, so that both compile the same programs.)"""
    # two epochs straight; the checkpointed run stops after epoch 1 (here, the first phase)
    monkeypatch.setattr(sys, "argv", ["-c", "first", str(tmp_path)])
    exec(compile(RESUME_SCRIPT, "RESUME_SCRIPT", "exec"), {"__name__": "__main__"})
    first = ["nnx", "2", "2", "nnx", "1", "1", "linen", "2", "2", "linen", "1", "1"]
    assert capsys.readouterr().out.split() == first
    # the history is restored in a new process; one more epoch
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    result = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, "resumed", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["nnx", "2", "2", "linen", "2", "2"]
    for api in ("nnx", "linen"):
        straight = np.load(tmp_path / f"{api}-straight.npz")
        resumed = np.load(tmp_path / f"{api}-resumed.npz")
        assert sorted(straight.files) == sorted(resumed.files), api
        for name in straight.files:
            np.testing.assert_array_equal(straight[name], resumed[name], err_msg=f"{api} {name}")


def test_export_and_load_exported(tmp_path):
    digits = load_dataset("digits")
    model = CNN(10, (8, 8, 1), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adamw(1e-3), preprocess=scale_images, verbose=0)
    trainer.fit(DataLoader(digits["train"], 64, shuffle=True), epochs=1)
    path = export(model, tmp_path / "model", extra={"labels": [str(i) for i in range(10)]})
    rebuilt, config = rebuild(path)
    assert config["labels"][3] == "3" and config["model"]["class"] == "CNN"
    batch = scale_images(next(iter(DataLoader(digits["test"], 16))))
    model.eval()
    np.testing.assert_allclose(rebuilt(batch["image"]), model(batch["image"]), rtol=1e-6, atol=1e-6)
    assert json.loads((path / "config.json").read_text())["model"]["kwargs"]["input_shape"] == [
        8,
        8,
        1,
    ]
    with pytest.raises(CheckpointError, match="not an exported model"):
        rebuild(tmp_path)
    with pytest.raises(
        ValueError, match=r"export of a LinenCNN \(not an NNX module\) needs variables="
    ):
        export(LinenCNN(10), tmp_path / "x")
    with pytest.raises(ValueError, match="export of a Linear needs example_input="):
        export(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), tmp_path / "y")
