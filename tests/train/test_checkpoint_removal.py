"""Issue 63 D01: a process killed while an old checkpoint step is being removed leaves the run's
other steps restorable: a reader skips a step cut short (and names it), a writer removes it."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest

from jaxfeed.train.checkpoint import CheckpointError, CheckpointManager, restore_weights

# Steps 1 and 2 are saved; saving step 3 removes step 1 (keep_last=2). Every unlink of a file
# named "metadata" (the step's meta item) stops the process once it is done: the test kills it
# there, the removal cut short.
REMOVAL_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import jax.numpy as jnp
    from jaxfeed.train.checkpoint import CheckpointManager
    ckpt = CheckpointManager(sys.argv[1], keep_last=2, keep_best=0, async_save=False)
    for step in (1, 2):
        ckpt.save(step, {"w": jnp.full(1000, float(step))}, metrics={"eval_loss": 1.0 / step})
    ckpt.wait()
    real = os.unlink
    def unlink(path, *args, **kwargs):
        real(path, *args, **kwargs)
        if os.path.basename(os.fspath(path)) == "metadata":
            print("removing", flush=True)
            time.sleep(60)
    os.unlink = unlink
    ckpt.save(3, {"w": jnp.full(1000, 3.0)}, metrics={"eval_loss": 1.0 / 3})
    print("not killed", flush=True)
    """
)


def test_killed_while_removing_an_old_step_keeps_the_others_restorable(
    process_group, tmp_path, capsys
):
    proc = process_group(
        [sys.executable, "-c", REMOVAL_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "removing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader = CheckpointManager(tmp_path)  # --resume, eval and export open the folder so
    assert reader.all_steps == [2, 3] and reader.best_step == 3
    assert reader.restore(state={"w": jnp.zeros(1000)})["state"]["w"][0] == 3
    assert restore_weights(tmp_path, {"w": jnp.zeros(1000)}, "best")["meta"]["step"] == 3
    reader.begin_writing()  # the resumed run: the killed writer's removal is finished
    reader.save(4, {"w": jnp.full(1000, 4.0)}, metrics={"eval_loss": 0.25})
    reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    folder = tmp_path_factory.mktemp("three")
    with CheckpointManager(folder, keep_last=3, keep_best=0, async_save=False) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, {"w": jnp.full(4, float(step))}, metrics={"eval_loss": 1.0 / step})
    return folder


def _unlink_files(step):
    for root, _, files in os.walk(step):
        for name in files:
            os.unlink(os.path.join(root, name))


CUT_SHORT = {  # what a removal cut short leaves of a step, in whatever order it went
    "meta removed": lambda step: shutil.rmtree(step / "meta"),
    "its metadata file removed": lambda step: (step / "meta" / "metadata").unlink(),
    "state removed": lambda step: shutil.rmtree(step / "state"),
    "the items' records removed": lambda step: [
        (step / "_CHECKPOINT_METADATA").unlink(),
        shutil.rmtree(step / "meta"),
    ],
    "every file removed, the folders left": _unlink_files,
    "an empty folder": lambda step: [shutil.rmtree(step), step.mkdir()],
}


@pytest.mark.parametrize("cut", sorted(CUT_SHORT))
def test_a_step_whose_removal_was_cut_short_is_skipped_and_named(
    three_steps, tmp_path, capsys, cut
):
    """The on-disk states an interrupted removal of step 1 leaves (the best step by eval_loss is
    3): readers skip step 1 and say so in one line; the next writer removes it."""
    folder = tmp_path / "ckpt"
    shutil.copytree(three_steps, folder)
    CUT_SHORT[cut](folder / "1")
    reader = CheckpointManager(folder)
    assert reader.all_steps == [2, 3] and reader.best_step == 3 and reader.latest_step == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"step 1 in {folder} was cut short" in err, err
    assert "skipped" in err
    with pytest.raises(CheckpointError, match=r"step 1 .* was cut short"):
        reader.restore(1, state={"w": jnp.zeros(4)})
    assert reader.restore("best", state={"w": jnp.zeros(4)})["meta"]["step"] == 3
    assert restore_weights(folder, {"w": jnp.zeros(4)}, "best")["meta"]["step"] == 3
    dead = {"pid": os.getpid(), "host": socket.gethostname(), "start": "0"}  # a reused pid
    (folder / ".jaxfeed-writer.json").write_text(json.dumps(dead))  # its writer was killed
    with CheckpointManager(folder, keep_last=3, keep_best=0, async_save=False) as writer:
        writer.save(4, {"w": jnp.full(4, 4.0)}, metrics={"eval_loss": 0.25})
        assert writer.all_steps == [2, 3, 4]
    assert sorted(p.name for p in folder.iterdir()) == ["2", "3", "4"]
    assert "cut short" not in capsys.readouterr().err  # said once in a process, not per opening


def test_another_programs_orbax_step_is_still_refused(tmp_path):
    import orbax.checkpoint as ocp

    with ocp.CheckpointManager(tmp_path) as raw:
        raw.save(1, args=ocp.args.StandardSave({"w": jnp.ones(2)}))
    with pytest.raises(CheckpointError, match="jaxfeed did not write"):
        CheckpointManager(tmp_path)
