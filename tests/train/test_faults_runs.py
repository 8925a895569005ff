"""Nothing saved is lost: fit into another run's checkpoints is refused before writing (or resumes
when asked), and a run folder is locked while ``jaxfeed train`` writes it."""

import fcntl
import os

import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Trainer, load_dataset
from jaxfeed.cli import main
from jaxfeed.train import scale_images


def _files(folder):
    return {
        str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()
    }


def test_fit_into_another_runs_checkpoints_is_refused_before_writing(tmp_path):
    from jaxfeed.models import CNN

    digits = load_dataset("digits")
    train = DataLoader(digits["train"].select(range(256)), 128)

    def trainer(seed):
        model = CNN(10, (8, 8, 1), rngs=nnx.Rngs(seed))
        return Trainer(model, optax.adamw(1e-3), preprocess=scale_images, verbose=0)

    first = trainer(0)
    first.fit(train, epochs=2, checkpoint_dir=tmp_path)
    before = _files(tmp_path)
    other = trainer(1)
    with pytest.raises(FileExistsError, match=r"holds checkpoints of another run .* resume=True"):
        other.fit(train, epochs=2, checkpoint_dir=tmp_path)
    assert _files(tmp_path) == before  # nothing deleted, nothing written
    first.fit(train, epochs=3, checkpoint_dir=tmp_path)  # the same trainer continuing is its run
    other.fit(train, epochs=4, checkpoint_dir=tmp_path, resume=True)  # resumes that run
    assert other.epoch == 4


def test_a_run_folder_in_use_is_refused_before_a_byte_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a `jaxfeed train --out run` started first holds it
    try:
        status = main(["train", "--out", str(out), "--epochs", "1"])
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert status == 2 and "is in use by another process" in err
    assert os.listdir(out) == []


def test_checkpoints_of_the_first_linen_layout_restore_or_are_refused_naming_it(tmp_path):
    import flax.linen as nn
    import jax
    import numpy as np

    from jaxfeed.models import LinenCNN
    from jaxfeed.train.checkpoint import CheckpointError, CheckpointManager

    digits = load_dataset("digits")
    train = DataLoader(digits["train"].select(range(128)), 64)
    example = np.zeros((1, 8, 8), np.uint8)

    def linen(module=None):
        return Trainer.from_linen(
            module or LinenCNN(10), optax.adamw(1e-3), example, preprocess=scale_images, verbose=0
        )

    trainer = linen()
    trainer.fit(train, epochs=1, checkpoint_dir=tmp_path / "new")
    with CheckpointManager(tmp_path / "new") as new:
        step = new.latest_step
        meta = new.meta(step)
        state = new.restore(step, state=trainer.core.state)["state"]
    # the same arrays in the first Linen layout, as jaxfeed wrote them before the restructure
    first = {
        "params": state["params"],
        "batch_stats": state["collections"]["batch_stats"],
        "opt_state": state["opt_state"],
    }
    own = ("format", "version", "step", "metrics", "key_paths", "shapes", "checksums")
    with CheckpointManager(tmp_path / "old") as old:
        old.save(
            step,
            first,
            metrics=meta["metrics"],
            meta={k: v for k, v in meta.items() if k not in own},
        )
    fresh = linen()
    with CheckpointManager(tmp_path / "old") as old:
        fresh.restore_checkpoint(old, "latest")
    assert fresh.step == trainer.step
    for a, b in zip(
        jax.tree.leaves(fresh.core.state), jax.tree.leaves(trainer.core.state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    class Plain(nn.Module):  # no batch_stats: cannot hold a layout-1 checkpoint's
        @nn.compact
        def __call__(self, x, train: bool = True):
            return nn.Dense(10)(x.reshape((x.shape[0], -1)))

    with (
        CheckpointManager(tmp_path / "old") as old,
        pytest.raises(
            CheckpointError, match=r"Linen checkpoint layout 1 \{params, batch_stats, opt_state\}"
        ),
    ):
        linen(Plain()).restore_checkpoint(old, "latest")


def test_the_run_lock_is_on_the_folder_there_even_when_it_was_removed_meanwhile(
    tmp_path, monkeypatch
):
    """Issue 44: a run refused at its start removes the empty run folder it made, still locked; a
    second run that opened the folder before, and locks it after, must lock the folder at
    ``--out`` (made again), not the removed one, which a third run could then lock too."""
    from jaxfeed.recipes import run

    out = tmp_path / "run"
    real, calls = run.FolderLock, []

    def lock_then_lose_it(folder, what):
        lock = real(folder, what)
        if not calls:  # the folder this lock holds is removed before the caller checks it
            os.rmdir(folder)
        calls.append(folder)
        return lock

    monkeypatch.setattr(run, "FolderLock", lock_then_lose_it)
    lock = run.lock_run_folder(out, resume=False)
    try:
        assert len(calls) == 2 and out.is_dir()
        assert os.fstat(lock.fd).st_ino == os.stat(out).st_ino
        with pytest.raises(run.LockedError):  # a third run is refused
            real(out, "run folder")
    finally:
        lock.release()
