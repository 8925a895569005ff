"""``jaxfeed launch``: start N local processes of one command as a multi-process JAX job.

Each process gets ``JAXFEED_COORDINATOR``, ``JAXFEED_NUM_PROCESSES`` and ``JAXFEED_PROCESS_ID``
(read by :func:`jaxfeed.distributed.initialize`); their output is prefixed with their index; when
one fails the others are stopped.
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
from collections.abc import Sequence


def launch(
    cmd: Sequence[str],
    num_processes: int,
    *,
    port: int = 0,
    devices_per_process: int | None = None,
) -> int:
    """Run ``cmd`` as processes 0..N-1 of one job on 127.0.0.1; prefix their output; stop all if
    one fails. Returns 0 when every process exited with 0, else 1."""
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
    procs = []
    for i in range(num_processes):
        env = {
            **os.environ,
            "JAXFEED_COORDINATOR": f"127.0.0.1:{port}",
            "JAXFEED_NUM_PROCESSES": str(num_processes),
            "JAXFEED_PROCESS_ID": str(i),
            "PYTHONUNBUFFERED": "1",
        }
        if devices_per_process:
            flag = f"--xla_force_host_platform_device_count={devices_per_process}"
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
            env.setdefault("JAX_PLATFORMS", "cpu")
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    pids = " ".join(str(p.pid) for p in procs)
    print(
        f"launched {num_processes} processes (pids {pids}), coordinator 127.0.0.1:{port}",
        flush=True,
    )
    selector = selectors.DefaultSelector()
    for i, proc in enumerate(procs):
        selector.register(proc.stdout, selectors.EVENT_READ, i)
    failed = False
    streams = len(procs)
    while streams:
        for key, _ in selector.select(timeout=0.5):
            line = key.fileobj.readline()
            if not line:
                selector.unregister(key.fileobj)
                streams -= 1
                continue
            print(f"[{key.data}] {line}", end="", flush=True)
        for i, proc in enumerate(procs):
            code = proc.poll()
            if code not in (None, 0) and not failed:
                failed = True
                print(f"jaxfeed launch: process {i} (pid {proc.pid}) exited with status {code}; stopping the others",
                      file=sys.stderr, flush=True)  # fmt: skip
                for other in procs:
                    if other.poll() is None:
                        other.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return 1 if failed or any(p.returncode for p in procs) else 0
