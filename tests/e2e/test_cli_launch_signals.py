"""``jaxfeed launch`` passes a scheduler's SIGTERM on to every process and exits with 143."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import jaxfeed.cli.launch as launch_module

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    def stop(signum, frame):
        open(os.path.join(sys.argv[1], os.environ["JAXFEED_PROCESS_ID"]), "w").write("saved")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_sigterm_reaches_every_process_and_sets_the_exit_status(process_group, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    launcher = process_group(
        [sys.executable, "-m", "jaxfeed.cli", "launch", "--num-processes", "2", "--",
         sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    lines = []
    deadline = time.monotonic() + 60
    while sum("ready" in line for line in lines) < 2 and time.monotonic() < deadline:
        lines.append(launcher.stdout.readline())
    assert sum("ready" in line for line in lines) == 2, lines
    launcher.send_signal(signal.SIGTERM)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 143, "".join(lines) + out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name in ("0", "1")) == ["0", "1"]
    assert "exited with status" not in out  # a preempted process is not a failure


STUCK = textwrap.dedent(
    """
    import os, signal, sys, time
    ready = os.path.join(sys.argv[1], "ready")
    if os.environ["JAXFEED_PROCESS_ID"] == "1":  # waits for a dead peer and ignores SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(ready, "w").close()
        time.sleep(120)
    while not os.path.exists(ready):
        time.sleep(0.05)
    sys.exit(1)
    """
)


def test_a_failed_process_stops_the_others_even_one_ignoring_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(launch_module, "STOP_GRACE_S", 1.0)
    start = time.monotonic()
    code = launch_module.launch([sys.executable, "-c", STUCK, str(tmp_path)], 2)
    assert code == 1 and time.monotonic() - start < 60
