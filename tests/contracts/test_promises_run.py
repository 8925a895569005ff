"""Core promises of a run: the command's exit statuses, ``--debug``, Ctrl-C, and no pickle in
checkpoints.

The CLI runs in this process through ``jaxfeed.cli.main`` (``tests/cli/test_cli.py`` checks in a
subprocess that its return value is the process's exit status), on the bundled digits data with
the small MLP.
"""

import json
import pickle
import pickletools

import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Trainer
from jaxfeed.cli import main
from jaxfeed.models import MLP
from jaxfeed.train.checkpoint import CheckpointManager, nnx_pure_state


def run_cli(args, capsys):
    try:
        status = main([str(a) for a in args])
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ------------------------------------------------------------------------------ exit statuses
def test_promise_failures_exit_with_1_and_one_line_and_debug_shows_the_traceback(
    tmp_path, capsys, monkeypatch
):
    """Promise (``jaxfeed --help``): usage errors exit 2, failures exit 1 with one line on stderr
    naming the error; ``--debug`` lets the traceback through instead."""

    def broken(self, *args, **kwargs):
        raise RuntimeError("the disk caught fire")

    monkeypatch.setattr(Trainer, "fit", broken)
    args = ["train", "--model", "mlp", "--epochs", "1", "--out", tmp_path / "run"]
    status, _, err = run_cli(args, capsys)
    assert status == 1
    lines = err.strip().splitlines()
    assert lines[-1].startswith("jaxfeed train: error: RuntimeError: the disk caught fire")
    assert "Traceback" not in err and "--debug" in lines[-1]
    with pytest.raises(RuntimeError, match="the disk caught fire"):
        main([str(a) for a in [*args, "--debug"]])


# ------------------------------------------------------------------------------ Ctrl-C
def test_promise_ctrl_c_leaves_complete_files_and_a_resume_hint(tmp_path, capsys, monkeypatch):
    """Promise: Ctrl-C during training exits 130, every file in the run folder is complete (JSON
    parses, one metrics line per finished epoch, a restorable checkpoint, no temporary files), and
    stderr says how to resume; resuming then finishes the run."""
    original = DataLoader.__iter__
    train_epochs = []

    def interrupting(self):
        iterator = original(self)
        if not self.shuffle:  # the eval loader
            return iterator
        train_epochs.append(1)
        if len(train_epochs) < 2:
            return iterator

        def second_epoch():
            yield next(iterator)
            yield next(iterator)
            raise KeyboardInterrupt

        return second_epoch()

    monkeypatch.setattr(DataLoader, "__iter__", interrupting)
    out = tmp_path / "run"
    args = ["train", "--model", "mlp", "--epochs", "2", "--batch-size", "256", "--out", out]
    status, _, err = run_cli(args, capsys)
    assert status == 130
    assert f"jaxfeed train --out {out} --resume" in err
    config = json.loads((out / "config.json").read_text())
    assert config["options"]["epochs"] == 2
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1]
    assert (out / "history.csv").read_text().count("\n") == 2
    left = [p.name for p in out.rglob("*") if p.name.endswith((".tmp", ".partial"))]
    assert not left, left
    assert CheckpointManager(out / "checkpoints").latest_step is not None

    monkeypatch.setattr(DataLoader, "__iter__", original)
    status, _, err = run_cli([*args, "--resume"], capsys)
    assert status == 0, err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if "kind" not in r] == [1, 2]  # epoch rows
    # then the baselines' validation figures (a row of their own), and the test split, once
    assert [r["kind"] for r in rows if "kind" in r] == ["baselines", "test"]


# ------------------------------------------------------------------------------ no pickle
def is_pickle(data: bytes) -> bool:
    """True when ``data`` parses as a whole pickle of any protocol (0 to 5)."""
    if not data:
        return False
    try:
        ops = list(pickletools.genops(data))
    except Exception:
        return False
    return bool(ops) and ops[-1][0].name == "STOP"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_pickle_detector_recognises_every_protocol(protocol):
    value = {"w": [1.5, 2], "name": "x", "nested": (None, True)}
    assert is_pickle(pickle.dumps(value, protocol=protocol))
    assert not is_pickle(json.dumps(value).encode()) and not is_pickle(b"\x00" * 64)


def test_promise_checkpoints_never_pickle_when_saving_or_restoring(tmp_path, monkeypatch):
    """Promise: nothing read from a file is unpickled, and checkpoints hold no pickles: every file
    written is checked against all pickle protocols (0 to 5), and pickle's dump and load functions
    are disabled during both the save and the restore."""

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle was called")

    for name in ("dump", "dumps", "Pickler", "load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    model = MLP(3, (4, 4), hidden=(8,), rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    with CheckpointManager(tmp_path / "ckpt", async_save=False) as manager:
        manager.save(
            1,
            nnx_pure_state(model, optimizer),
            metrics={"eval_loss": 0.5},
            meta={"loader": {"seed": 0}, "history": [{"epoch": 1}]},
        )
    files = [p for p in (tmp_path / "ckpt").rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert not is_pickle(path.read_bytes()), path
    fresh = MLP(3, (4, 4), hidden=(8,), rngs=nnx.Rngs(1))
    fresh_optimizer = nnx.Optimizer(fresh, optax.adam(1e-3), wrt=nnx.Param)
    CheckpointManager(tmp_path / "ckpt").restore(model=fresh, optimizer=fresh_optimizer)
    x = jnp.ones((2, 4, 4))
    assert jnp.allclose(fresh(x), model(x))
