"""The test suite's fork server (tests/forkserver.py): a command forked from it starts, runs and
ends as ``python -m`` would run it in a subprocess, and whatever it cannot run faithfully runs as
a real subprocess."""

import os
import signal
import subprocess
import sys
import time

import pytest

import forkserver

# `python -m probe MODE` from the test's folder: what a process sees at its start, then MODE
PROBE = """
import atexit, os, random, signal, sys, threading, time
import numpy as np

def said():
    print("atexit ran", flush=True)

atexit.register(said)
print("argv", sys.argv, sys.orig_argv[1:])
print("path0", sys.path[0], "cwd", os.getcwd(), "main", __name__, __spec__.name, __file__)
print("main globals", sorted(vars(sys.modules["__main__"])))
print("stdout", type(sys.stdout.buffer).__name__, sys.stdout.line_buffering,
      sys.stdout.write_through, sys.stdout.encoding, sys.stdout.errors)
print("stderr", sys.stderr.line_buffering, sys.stderr.write_through, sys.stderr.errors)
print("stdin", type(sys.stdin.buffer).__name__, sys.stdin.encoding, sys.stdin.errors)
print("signals", [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE,
                                                  signal.SIGXFSZ, signal.SIGUSR1)])
print("group", os.getpgrp() == int(os.environ["CALLER_GROUP"]), os.getpid() != os.getppid())
print("env", os.environ.get("PROBE_VALUE"), "unset" if "PROBE_UNSET" not in os.environ else "set")
mode = sys.argv[1]
print("stdin said", repr(sys.stdin.read()) if mode == "read" else None)
print("to stderr", file=sys.stderr)
if mode == "rng":
    print("rng", np.random.random(), random.random())
elif mode == "sleep":
    print("sleeping", os.getpid(), flush=True)
    time.sleep(120)
elif mode == "thread":
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True))).start()
elif mode.startswith("exit"):
    sys.exit(int(mode[4:]) if mode[4:].isdigit() else mode[4:] or None)
elif mode == "raise":
    raise ValueError("boom")
elif mode == "interrupt":
    raise KeyboardInterrupt
elif mode == "hard":
    sys.stdout.flush()
    os._exit(7)
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    (folder / "probe.py").write_text(PROBE)
    return folder


@pytest.fixture(scope="module")
def server():
    found = forkserver._server()
    if found is None:  # the suite runs without it (JAXFEED_TEST_FORKSERVER=0)
        pytest.skip(f"no fork server: {forkserver._SERVER.get('why', 'turned off')}")
    return found


def both(probe, server, mode, *, input=None, env=None):
    """``python -m probe MODE`` forked from the server, and as a real subprocess."""
    cmd = [sys.executable, "-m", "probe", mode]
    env = {**os.environ, "CALLER_GROUP": str(os.getpgrp()), "PROBE_VALUE": "v=1", **(env or {})}
    kwargs = dict(cwd=probe, input=input, env=env, timeout=60, text=True)
    forked = server.run(cmd, **kwargs)
    assert forked is not None and forked.forked
    real = subprocess.run(cmd, capture_output=True, **kwargs)
    return forked, real


def same(forked, real) -> None:
    assert forked.args == real.args
    assert forked.returncode == real.returncode, (forked, real)
    assert forked.stdout == real.stdout
    assert forked.stderr == real.stderr


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_forked_command_starts_as_a_real_python_dash_m(probe, server, unbuffered):
    """argv, sys.path[0], cwd, __main__, stdio (buffering as PYTHONUNBUFFERED says), signal
    dispositions (SIGUSR1 ignored here: ignored there), the caller's process group, the environment asked for (a variable set and one
    left out), stdin from ``input``, stdout and stderr apart, atexit handlers run."""
    ignored = signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a subprocess inherits it ignored
    try:
        forked, real = both(
            probe, server, "read", input="line 1\r\nline 2", env={"PYTHONUNBUFFERED": unbuffered}
        )
    finally:
        signal.signal(signal.SIGUSR1, ignored)
    same(forked, real)
    assert "stdin said 'line 1\\r\\nline 2'" in forked.stdout and "env v=1 unset" in forked.stdout
    assert forked.stderr == "to stderr\n" and "atexit ran" in forked.stdout
    assert "group True True" in forked.stdout and "<Handlers.SIG_IGN: 1>]" in forked.stdout


@pytest.mark.parametrize(
    "mode", ["exit0", "exit3", "exitstopped here", "exit", "raise", "interrupt", "hard", "thread"]
)
def test_exit_statuses_and_output_are_a_real_process_s(probe, server, mode):
    """SystemExit's codes (a string: printed, status 1), an uncaught exception (its traceback on
    stderr, status 1), an uncaught KeyboardInterrupt (-SIGINT, as Python ends), os._exit, and
    a thread still running at the end (joined before atexit, as the interpreter does)."""
    forked, real = both(probe, server, mode)
    same(forked, real)  # a traceback too: from runpy's frame on, as `python -m` prints it
    if mode in ("raise", "interrupt"):
        assert forked.stderr.startswith("to stderr\nTraceback (most recent call last):\n")
        assert forked.stderr.endswith("ValueError: boom\n" if mode == "raise" else "Interrupt\n")
    expected = {"exit0": 0, "exit3": 3, "exitstopped here": 1, "exit": 0, "interrupt": -2,
                "hard": 7, "thread": 0}  # fmt: skip
    assert forked.returncode == expected.get(mode, 1)


def test_two_commands_do_not_share_the_random_state(probe, server):
    """NumPy's global RNG is seeded once per process at its import: each forked command reseeds
    it (else every command drew the server's numbers); Python's ``random`` reseeds at fork."""
    first, second = (server.run([sys.executable, "-m", "probe", "rng"], cwd=probe, input=None,
                                env={**os.environ, "CALLER_GROUP": "0"}, timeout=60, text=True)
                     for _ in range(2))  # fmt: skip
    draws = [next(line for line in done.stdout.splitlines() if line.startswith("rng"))
             for done in (first, second)]  # fmt: skip
    assert draws[0].split()[1] != draws[1].split()[1], draws
    assert draws[0].split()[2] != draws[1].split()[2], draws


def test_a_timeout_kills_the_command_and_raises_as_subprocess_run(probe, server):
    cmd = [sys.executable, "-m", "probe", "sleep"]
    env = {**os.environ, "CALLER_GROUP": "0"}
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        server.run(cmd, cwd=probe, input=None, env=env, timeout=3, text=True)
    assert time.monotonic() - start < 30
    assert raised.value.cmd == cmd and raised.value.timeout == 3
    pid = int(raised.value.stdout.split(b"sleeping ")[1].split()[0])  # bytes, as subprocess's
    with pytest.raises(ProcessLookupError):  # killed, and reaped
        os.kill(pid, 0)


def test_the_command_runs_forked_unless_that_would_not_be_faithful(monkeypatch, server):
    """jaxfeed.cli runs forked (its exit statuses: 0, 2 from argparse); an environment that differs
    in a variable read while the server imported (JAX's own here) runs a real subprocess, as does
    any other command and every command under JAXFEED_TEST_FORKSERVER=0."""
    cli = [sys.executable, "-m", "jaxfeed.cli"]
    same = dict(
        server.env
    )  # the server's environment (a test before may have changed the worker's)
    env = {**same, "JAXFEED_CACHE": "/nowhere"}
    done = forkserver.run([*cli, "--help"], env=env)
    assert done.forked, forkserver.why_not_forked([*cli, "--help"], env=env)
    assert done.returncode == 0 and "usage: jaxfeed" in done.stdout
    done = forkserver.run([*cli, "eval", "--no-such-flag"], env=same)
    assert done.forked and done.returncode == 2 and "arguments are required" in done.stderr
    assert done.stdout == ""
    # a TPU host's cluster variables are read when the command runs, not while the server imported
    env = {
        **same,
        "TPU_WORKER_HOSTNAMES": "localhost",
        "TPU_HOST_BOUNDS": "1,1,1",
        "TPU_WORKER_ID": "0",
    }
    assert forkserver.why_not_forked([*cli, "--help"], env=env) is None
    env = {**same, "JAX_ENABLE_X64": "1"}
    assert "JAX_ENABLE_X64" in forkserver.why_not_forked([*cli, "--help"], env=env)
    done = forkserver.run([*cli, "--help"], env=env)
    assert not done.forked and done.returncode == 0 and "usage: jaxfeed" in done.stdout
    done = forkserver.run([sys.executable, "-c", "print(1)"])
    assert not done.forked and done.stdout == "1\n"
    monkeypatch.setenv("JAXFEED_TEST_FORKSERVER", "0")
    assert not forkserver.run([*cli, "--help"]).forked
