"""Running the command in tests: ``jaxfeed(...)`` in a subprocess (what a user's shell does) and
``run_main(capsys, ...)`` in this process (no JAX start per case, for quick checks)."""

from __future__ import annotations

import os
import subprocess
import sys

from jaxfeed.cli import main


def jaxfeed(*args, cwd=None, stdin=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``python -m jaxfeed.cli ARGS`` with unbuffered output; ``env`` adds to the environment."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jaxfeed.cli", *args],
        capture_output=True, text=True, cwd=cwd, input=stdin, timeout=timeout, env=env,
    )  # fmt: skip


def run_main(capsys, *args) -> tuple[int | str | None, str, str]:
    """``main(ARGS)`` in this process: its exit status, stdout and stderr."""
    try:
        status = main(list(args))
    except SystemExit as exit:  # argparse's usage errors
        status = exit.code
    out, err = capsys.readouterr()
    return status, out, err
