"""``jaxfeed launch``: start N local processes of one command as a multi-process JAX job.

Each process gets ``JAXFEED_COORDINATOR``, ``JAXFEED_NUM_PROCESSES`` and ``JAXFEED_PROCESS_ID``
(read by :func:`jaxfeed.runtime.distributed.initialize`); their output is prefixed with their index; when
one fails the others are stopped.

Preemption: a SIGTERM sent to the launcher (what schedulers send) is passed on to every process,
so each saves its preemption checkpoint, and the launcher exits with their status (143). Ctrl-C
in a terminal already reaches every process of the foreground group: the launcher then waits for
them to save and exit (a second Ctrl-C stops them).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence


def launch(
    cmd: Sequence[str],
    num_processes: int,
    *,
    port: int = 0,
    devices_per_process: int | None = None,
) -> int:
    """Run ``cmd`` as processes 0..N-1 of one job on 127.0.0.1; prefix their output; stop all if
    one fails; pass SIGTERM on. Returns 0 when every process exited with 0, 143 (130) when they
    stopped for a SIGTERM (Ctrl-C) after saving, else 1.

    >>> import sys
    >>> launch([sys.executable, "-c", "print('hi')"], 2)  # doctest: +ELLIPSIS
    launched 2 processes (pids ...), coordinator 127.0.0.1:...
    [...] hi
    [...] hi
    0
    """
    cmd = list(cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ValueError(
            "give the command to launch after --, e.g. jaxfeed launch --num-processes 2 -- jaxfeed train"
        )
    if cmd[0] == "jaxfeed":
        cmd = [sys.executable, "-m", "jaxfeed.cli", *cmd[1:]]
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            cmd,
            env=_process_env(i, num_processes, port, devices_per_process),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    pids = " ".join(str(p.pid) for p in procs)
    print(
        f"launched {num_processes} processes (pids {pids}), coordinator 127.0.0.1:{port}",
        flush=True,
    )
    signals: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        signals.append(signum)
        if signum == signal.SIGINT and signals.count(signal.SIGINT) == 1:
            return  # the terminal sent it to the whole group: the processes have it already
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if signum == signal.SIGINT else signum)

    # a signal the launcher was started ignoring (SIGINT under `cmd &` in a script) stays ignored
    handled = [
        s for s in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(s) is not signal.SIG_IGN
    ]
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        failed = _follow(procs)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    codes = {p.returncode for p in procs}
    if failed or not codes <= {0, *_STOPPED}:
        return 1
    if codes & {143, -signal.SIGTERM}:
        return 143
    return 130 if codes & {130, -signal.SIGINT} else 0


def _process_env(
    index: int, num_processes: int, port: int, devices_per_process: int | None
) -> dict[str, str]:
    """Process ``index``'s environment: this one's, plus where the job's coordinator listens and
    which process it is (and ``devices_per_process`` fake CPU devices).

    >>> env = _process_env(1, 2, 1234, None)
    >>> env["JAXFEED_COORDINATOR"], env["JAXFEED_NUM_PROCESSES"], env["JAXFEED_PROCESS_ID"]
    ('127.0.0.1:1234', '2', '1')
    """
    env = {
        **os.environ,
        "JAXFEED_COORDINATOR": f"127.0.0.1:{port}",
        "JAXFEED_NUM_PROCESSES": str(num_processes),
        "JAXFEED_PROCESS_ID": str(index),
        "PYTHONUNBUFFERED": "1",
    }
    if devices_per_process:
        flag = f"--xla_force_host_platform_device_count={devices_per_process}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
        env.setdefault("JAX_PLATFORMS", "cpu")
    return env


# exit statuses of a process stopped by SIGTERM or Ctrl-C, after saving (130, 143) or not
_STOPPED = (130, 143, -signal.SIGINT, -signal.SIGTERM)


STOP_GRACE_S = 30.0  # after one process failed, the others' time to exit on SIGTERM (then SIGKILL)


def _follow(procs: list[subprocess.Popen]) -> bool:
    """Print the processes' output prefixed with their index until they all end; stop the others
    when one fails (SIGTERM, then SIGKILL after ``STOP_GRACE_S``: one left waiting for a dead peer
    never ends by itself). Returns whether one failed (other than by a preemption exit)."""
    selector = selectors.DefaultSelector()
    for i, proc in enumerate(procs):
        selector.register(proc.stdout, selectors.EVENT_READ, i)
    failed = False
    stopping_since: float | None = None
    streams = len(procs)
    while streams:
        if stopping_since is not None and time.monotonic() - stopping_since > STOP_GRACE_S:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        for key, _ in selector.select(timeout=0.5):
            line = key.fileobj.readline()
            if not line:
                selector.unregister(key.fileobj)
                streams -= 1
                continue
            print(f"[{key.data}] {line}", end="", flush=True)
        for i, proc in enumerate(procs):
            code = proc.poll()
            if code not in (None, 0, *_STOPPED) and not failed:
                failed = True
                print(f"jaxfeed launch: process {i} (pid {proc.pid}) exited with status {code}; stopping the others",
                      file=sys.stderr, flush=True)  # fmt: skip
                for other in procs:
                    if other.poll() is None:
                        other.terminate()
                stopping_since = time.monotonic()
    selector.close()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return failed
