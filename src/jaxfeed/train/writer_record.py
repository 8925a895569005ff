"""The record of the process writing a checkpoint folder, and the lock around claiming it.

A folder's writer is recorded in :data:`WRITER_FILE` (pid, host, process start time), so another
process can tell a live writer from a dead one before it removes half-written steps; the claim
(read, check, write the record) runs under an OS lock on :data:`CLAIM_LOCK`.

>>> writer_alive(identity())
True
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WRITER_FILE = ".jaxfeed-writer.json"
CLAIM_LOCK = ".jaxfeed-writer.lock"  # flock'd while a process reads, checks and writes WRITER_FILE
TMP_MARK = ".orbax-checkpoint-tmp"


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
