"""MkDocs hook: ``<!-- jaxfeed-help: COMMAND -->`` in a page becomes ``jaxfeed COMMAND --help``.

The text is what the installed command prints at build time (run in a subprocess, 100 columns
wide), so the pages never hold a hand-copied, stale copy of a parser. ``<!-- jaxfeed-help: -->``
(no command) renders ``jaxfeed --help``. A command whose ``--help`` fails fails the build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache

MARKER = re.compile(r"^<!-- jaxfeed-help:(?P<command>[ \w-]*)-->$", re.M)


@cache
def help_text(command: str) -> str:
    """What ``jaxfeed COMMAND --help`` prints (``command`` may be empty: the top level)."""
    argv = [sys.executable, "-m", "jaxfeed.cli", *command.split(), "--help"]
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[2:])} exited with {done.returncode}: {done.stderr.strip()[-2000:]}"
        )
    return done.stdout.rstrip()


def render(markdown: str) -> str:
    """Replace every help marker of ``markdown`` by a fenced block of that help."""

    def block(match: re.Match[str]) -> str:
        command = match["command"].strip()
        title = f"jaxfeed {command} --help".replace("  ", " ")
        return f"```text\n$ {title}\n{help_text(command)}\n```"

    return MARKER.sub(block, markdown)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    return render(markdown)
