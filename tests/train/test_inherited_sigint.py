"""A process started with SIGINT ignored (``cmd &`` in a script, CI runners) keeps ignoring it:
``fit``'s signal watch, the CLI's Ctrl-C handler and ``jaxfeed launch`` leave it alone, as Python
itself does (it installs ``KeyboardInterrupt`` only when SIGINT is not ignored at start)."""

import os
import sys
import textwrap
from pathlib import Path

import pytest

# What `jaxfeed launch` started reports about the launcher's SIGINT, from /proc (Linux).
PROBE = textwrap.dedent(
    """
    import os
    masks = {k: int(v, 16) for k, v in (line.split(":") for line in open(f"/proc/{os.getppid()}/status")
             if line.startswith(("SigIgn", "SigCgt")))}
    bit = 1 << 1  # SIGINT is 2
    print("launcher", "ignored" if masks["SigIgn"] & bit else "caught" if masks["SigCgt"] & bit else "default")
    """
)

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np, optax
    from flax import nnx
    from jaxfeed import DataLoader, Dataset, Trainer
    from jaxfeed.cli.launch import launch
    from jaxfeed.models import MLP
    from jaxfeed.recipes.interrupt import safe_interrupts
    from jaxfeed.train import Callback, Preempted

    def report(*words):
        print(*words, flush=True)

    def ignored():
        return signal.getsignal(signal.SIGINT) is signal.SIG_IGN

    report("start", ignored())
    with safe_interrupts():
        report("safe_interrupts", ignored())
        os.kill(os.getpid(), signal.SIGINT)
    launch([sys.executable, "-c", sys.argv[1]], 1)

    class Signals(Callback):
        def on_train_batch_end(self, trainer, step, logs):
            if step == 2:
                report("fit", ignored(), callable(signal.getsignal(signal.SIGTERM)))
                os.kill(os.getpid(), signal.SIGINT)  # ignored: the run goes on
            if step == 4:
                os.kill(os.getpid(), signal.SIGTERM)  # still watched: stops after step 4

    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    data = Dataset.from_dict({"image": x, "label": np.arange(64) % 2})
    model = MLP(2, (4,), hidden=(8,), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.sgd(0.1), verbose=0, callbacks=[Signals()])
    try:
        trainer.fit(DataLoader(data, 8), epochs=1)
    except Preempted as err:
        report("preempted", err.code, trainer.step)
    report("end", ignored(), signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    """
)

# Starts CHILD with SIGINT ignored across exec, as a shell does for `cmd &` without job control.
IGNORING = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_a_process_started_with_sigint_ignored_keeps_ignoring_it(process_group):
    run = process_group.run(
        [sys.executable, "-c", IGNORING, "-c", CHILD, PROBE],
        timeout=240,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line.split() for line in run.stdout.splitlines()]
    launcher = [words[-1] for words in lines if "launcher" in words]
    lines = [words for words in lines if words[0] != "launched" and "launcher" not in words]
    assert lines == [
        ["start", "True"],  # inherited ignored, and Python left it so
        ["safe_interrupts", "True"],  # the CLI's Ctrl-C handler was not installed
        ["fit", "True", "True"],  # fit watches SIGTERM only
        ["preempted", "143", "4"],  # the SIGINT of step 2 did not stop it; SIGTERM did
        ["end", "True", "True"],
    ], run.stdout + run.stderr[-3000:]
    assert launcher == ["ignored"], run.stdout  # jaxfeed launch did not catch it either
