"""The record of the process writing a checkpoint folder, the lock around claiming it, and what
an interrupted save or removal leaves there.

A folder's writer is recorded in :data:`WRITER_FILE` (pid, host, process start time), so another
process can tell a live writer from a dead one before it removes half-written steps; the claim
(read, check, write the record) runs under an OS lock on :data:`CLAIM_LOCK`. A step is removed
by renaming it into :data:`REMOVING` (one atomic step) and deleting it there, so a process killed
mid-removal leaves no step half there; :func:`step_condition` tells a step cut short some other
way (a removal by an older version, an interrupted copy) from a whole one.

>>> writer_alive(identity())
True
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WRITER_FILE = ".jaxfeed-writer.json"
CLAIM_LOCK = ".jaxfeed-writer.lock"  # flock'd while a process reads, checks and writes WRITER_FILE
TMP_MARK = ".orbax-checkpoint-tmp"
REMOVING = ".jaxfeed-removing"  # Orbax renames a step it removes in here; then it is deleted
_STEP_LAYOUT = frozenset({"_CHECKPOINT_METADATA", "commit_success.txt", "meta", "state"})


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, Linux): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def identity() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "start": start_time(os.getpid()),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def writer_alive(record: Mapping[str, Any]) -> bool | None:
    """Whether the recorded writer still runs: True, False, or None when it cannot be known
    (another host, an unreadable record)."""
    if not isinstance(record, Mapping) or record.get("host") != socket.gethostname():
        return None
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    start = start_time(pid)
    return not (record.get("start") and start and start != record["start"])  # else: pid reused


@contextlib.contextmanager
def claiming(directory: Path) -> Any:
    """Hold an OS lock (``flock``, blocking) on the directory's ``CLAIM_LOCK`` while the writer
    record is read, checked and written, and half-written steps removed: two processes that claim
    the directory at once do so one after the other, so the second sees the first's record (and
    is refused) instead of removing the first's steps in progress. The lock file is removed
    before the lock is dropped (a process that locked it meanwhile sees it gone and tries again).
    Where the file system has no locks, the record alone decides, as before."""
    import fcntl  # noqa: PLC0415 (POSIX-only fcntl, imported where a lock is taken)

    path = directory / CLAIM_LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no locks on this file system (ENOLCK, EOPNOTSUPP)
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            yield
            return
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the file its holder removed: lock the one there now
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


def partial_saves(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir() and TMP_MARK in p.name)


def finish_removals(directory: Path) -> None:
    """Delete the steps renamed into :data:`REMOVING` (those whose removal a killed process cut
    short included): nothing there is ever read."""
    folder = directory / REMOVING
    if not folder.is_dir() or folder.is_symlink():
        return
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def step_condition(step: Path) -> tuple[str, str]:
    """``("whole", "")``, ``("cut short", what is missing)`` for a jaxfeed step some of whose
    files are gone (a removal or copy interrupted), or ``("foreign", "")`` for another program's
    Orbax step (items other than jaxfeed's ``state`` and ``meta``).

    >>> import tempfile
    >>> step_condition(Path(tempfile.mkdtemp()))
    ('cut short', 'meta/')
    """
    try:
        names = {p.name for p in step.iterdir()}
    except OSError:
        return ("cut short", "the folder")
    if "meta" not in names:
        items = _orbax_items(step / "_CHECKPOINT_METADATA")
        if (items is not None and "meta" not in items) or (items is None and names - _STEP_LAYOUT):
            return ("foreign", "")
        return ("cut short", "meta/")
    try:
        meta = [p.name for p in (step / "meta").iterdir() if p.name != "commit_success.txt"]
    except OSError:
        meta = []
    if not meta:
        return ("cut short", "meta/metadata")
    if not (step / "state" / "_METADATA").is_file():
        return ("cut short", "state/_METADATA")
    return ("whole", "")


def _orbax_items(path: Path) -> list[str] | None:
    """The item names an Orbax step's ``_CHECKPOINT_METADATA`` lists (None: none readable)."""
    try:
        handlers = json.loads(path.read_text()).get("item_handlers")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return list(handlers) if isinstance(handlers, dict) else None
