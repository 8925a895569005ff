"""Elastic resume and multi-process preemption: 2 processes x 4 fake CPU devices <-> 1 process x 8.

A 2-process run is preempted (SIGTERM to one process only): both stop at the same step and save;
this 8-device process resumes it. An 8-device checkpoint is resumed by 2 processes. Both end
where an uninterrupted run ends, up to floating-point reduction order.
"""

import os
import sys
import textwrap

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxfeed import DataLoader, Trainer, load_dataset
from jaxfeed.models import MLP
from jaxfeed.runtime.distributed import data_mesh
from jaxfeed.train import scale_images
from jaxfeed.train.checkpoint import CheckpointManager

FINAL = 30  # steps: one epoch of 22 and 8 more

RUN = textwrap.dedent(
    """
    import os, signal, sys
    import jax
    import numpy as np, optax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec
    from jaxfeed import DataLoader, Trainer, load_dataset
    from jaxfeed.runtime import distributed
    from jaxfeed.models import MLP
    from jaxfeed.train import Callback, Preempted, scale_images

    distributed.initialize()
    ckpt, max_steps, kill_at, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    class TermProcess1(Callback):  # as if only this host got the preemption notice
        def on_train_batch_end(self, trainer, step, logs):
            if step == kill_at and jax.process_index() == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    sharding = NamedSharding(distributed.data_mesh(), PartitionSpec("data"))
    train = DataLoader(load_dataset("digits")["train"], 64, shuffle=True, seed=1, drop_last=True,
                       sharding=sharding)
    model = MLP(10, (8, 8), hidden=(32,), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adam(1e-2), preprocess=scale_images, verbose=0,
                      callbacks=[TermProcess1()])
    try:
        trainer.fit(train, max_steps=max_steps, checkpoint_dir=ckpt, resume=True)
    except Preempted as stop:
        print("preempted at", stop.step, flush=True)
        raise
    if jax.process_index() == 0:
        np.savez(out, *[np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))])
    print("done", trainer.step, flush=True)
    """
)


def launch(groups, *args):
    argv = [sys.executable, "-m", "jaxfeed.cli", "launch", "--num-processes", "2",
            "--devices-per-process", "4", "--", sys.executable, "-c", RUN, *map(str, args)]  # fmt: skip
    return groups.run(argv, timeout=600, env=dict(os.environ))


def fit_here(max_steps, ckpt=None):
    sharding = NamedSharding(data_mesh(), PartitionSpec("data"))
    train = DataLoader(load_dataset("digits")["train"], 64, shuffle=True, seed=1, drop_last=True,
                       sharding=sharding)  # fmt: skip
    model = MLP(10, (8, 8), hidden=(32,), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adam(1e-2), preprocess=scale_images, verbose=0)
    trainer.fit(train, max_steps=max_steps, checkpoint_dir=ckpt, resume=ckpt is not None)
    return trainer, [np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))]


@pytest.fixture(scope="module")
def straight():
    return fit_here(FINAL)[1]  # uninterrupted, one process, 8 devices


def assert_close(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_two_processes_agree_on_the_stop_step_and_one_process_resumes(
    process_group, tmp_path, straight
):
    assert jax.device_count() == 8
    run = launch(process_group, tmp_path / "ckpt", FINAL, 5, tmp_path / "unused.npz")
    assert run.returncode != 0, run.stdout[-3000:]
    # process 1 alone got SIGTERM at step 5; both stop at the next exchange (step 8) and save
    assert "[0] preempted at 8" in run.stdout and "[1] preempted at 8" in run.stdout, (
        run.stdout[-3000:] + run.stderr[-3000:]
    )
    assert "checkpoint saved in" in run.stdout
    with CheckpointManager(tmp_path / "ckpt") as ckpt:
        assert ckpt.latest_step == 8 and ckpt.meta(8)["config"]["processes"] == 2
    trainer, resumed = fit_here(FINAL, tmp_path / "ckpt")  # 2 processes -> 1 process, 8 devices
    assert trainer.step == FINAL and trainer.epoch == 1
    assert_close(resumed, straight)


@pytest.mark.slow
def test_one_process_checkpoint_resumes_on_two_processes(process_group, tmp_path, straight):
    trainer, _ = fit_here(13, tmp_path / "ckpt")  # stops mid-epoch; checkpoint at step 13
    assert trainer.step == 13
    run = launch(process_group, tmp_path / "ckpt", FINAL, -1, tmp_path / "two.npz")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"[0] done {FINAL}" in run.stdout and f"[1] done {FINAL}" in run.stdout
    two = np.load(tmp_path / "two.npz")
    assert_close([two[f"arr_{i}"] for i in range(len(two.files))], straight)
