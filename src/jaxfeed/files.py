"""Small file-system helpers shared by the writers: atomic writes and up-front writability checks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``path`` through a temporary file and a rename: readers never see half a file.

    >>> import tempfile, os
    >>> target = os.path.join(tempfile.mkdtemp(), "a.txt")
    >>> atomic_write(target, "hello")
    >>> open(target).read()
    'hello'
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a failed or interrupted write: the old file stays, no stray temp file
        tmp.unlink(missing_ok=True)
        raise


def check_writable(folder: str | os.PathLike, what: str, min_free: int = 0) -> Path:
    """Create ``folder`` if needed and prove it writable (and, optionally, ``min_free`` bytes free),
    raising ``OSError`` that names ``what`` and the folder: before training, not after an epoch."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".jaxfeed-write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise OSError(f"the {what} {folder} is not writable: {err}") from err
    free = shutil.disk_usage(folder).free
    if free < min_free:
        raise OSError(f"the {what} {folder} has only {free >> 20} MiB free")
    return folder
