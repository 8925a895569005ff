"""Issue 25, data loss: fit into another run's checkpoints is refused before writing (or resumes
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
