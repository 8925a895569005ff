"""Running the command in tests: ``jaxfeed(...)`` in a process of its own (what a user's shell
does) and ``run_main(capsys, ...)`` in this process (no JAX start per case, for quick checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forkserver
from jaxfeed.cli import main


def jaxfeed(*args, cwd=None, stdin=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``python -m jaxfeed.cli ARGS`` with unbuffered output; ``env`` adds to the environment.

    What runs where: the command always runs in a process of its own (its pid, exit status,
    stdout/stderr pipes, cwd, environment; in this process's group, as ``subprocess.run`` puts
    it), and that process is forked from this pytest worker's fork server (tests/forkserver.py:
    JAX, Flax, Optax, Orbax, PyArrow and jaxfeed imported once, no JAX backend started), which
    saves each command the ~3.3 CPU s of those imports. It is a real ``python -m jaxfeed.cli``
    subprocess instead when the environment asked for differs from the server's in a variable
    read at import (``JAX_*``, ``XLA_*``, ``PYTHON*`` but ``PYTHONUNBUFFERED``, ``HF_*``, ...:
    ``forkserver.read_at_import``), when the server could not start or serve, and for the whole
    run under ``JAXFEED_TEST_FORKSERVER=0``. The result's ``forked`` says which it was."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return forkserver.run(
        [sys.executable, "-m", "jaxfeed.cli", *args],
        cwd=cwd, input=stdin, env=env, timeout=timeout,
    )  # fmt: skip


def train_with_defaults(data, out) -> tuple[str, dict]:
    """``jaxfeed train --data DATA --out OUT`` and no other flag, in a subprocess, which must
    succeed: what it printed and the test split's row of ``metrics.jsonl``."""
    done = jaxfeed("train", "--data", str(data), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    return done.stdout, next(row for row in rows if row.get("kind") == "test")


def run_main(capsys, *args) -> tuple[int | str | None, str, str]:
    """``main(ARGS)`` in this process: its exit status, stdout and stderr. The environment is put
    back afterwards (a setting the command wrote would reach every later test of the worker, and
    send its ``jaxfeed(...)`` commands to real subprocesses, see :mod:`forkserver`)."""
    env = dict(os.environ)
    try:
        status = main(list(args))
    except SystemExit as exit:  # argparse's usage errors
        status = exit.code
    finally:
        if dict(os.environ) != env:
            os.environ.clear()
            os.environ.update(env)
    out, err = capsys.readouterr()
    return status, out, err
