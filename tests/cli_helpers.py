"""Running the command in tests: ``jaxfeed(...)`` in a subprocess (what a user's shell does) and
``run_main(capsys, ...)`` in this process (no JAX start per case, for quick checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jaxfeed.cli import main


def jaxfeed(*args, cwd=None, stdin=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``python -m jaxfeed.cli ARGS`` with unbuffered output; ``env`` adds to the environment."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jaxfeed.cli", *args],
        capture_output=True, text=True, cwd=cwd, input=stdin, timeout=timeout, env=env,
    )  # fmt: skip


def train_with_defaults(data, out) -> tuple[str, dict]:
    """``jaxfeed train --data DATA --out OUT`` and no other flag, in a subprocess, which must
    succeed: what it printed and the test split's row of ``metrics.jsonl``."""
    done = jaxfeed("train", "--data", str(data), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    return done.stdout, next(row for row in rows if row.get("kind") == "test")


def run_main(capsys, *args) -> tuple[int | str | None, str, str]:
    """``main(ARGS)`` in this process: its exit status, stdout and stderr."""
    try:
        status = main(list(args))
    except SystemExit as exit:  # argparse's usage errors
        status = exit.code
    out, err = capsys.readouterr()
    return status, out, err
