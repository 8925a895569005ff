"""Small file-system helpers: atomic writes, up-front writability checks, paths read from a
dataset's own files resolved inside its folder, and file checksums."""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar


def temporary_file(path: Path) -> Path:
    """A hidden sibling of ``path`` for this write only (``.NAME.KEY.tmp``): two writers of one
    file never write, rename or remove each other's temporary file."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``path`` through a temporary file and a rename: readers never see half a file.

    >>> import tempfile, os
    >>> target = os.path.join(tempfile.mkdtemp(), "a.txt")
    >>> atomic_write(target, "hello")
    >>> open(target).read()
    'hello'
    """
    path = Path(path)
    tmp = temporary_file(path)
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


# ------------------------------------------------------------------------------ reading safely
class UnsafePathError(ValueError):
    """A path read from a dataset's own files (metadata, README, state.json) leaves its folder."""


class ChecksumError(ValueError):
    """A file's bytes differ from the checksum recorded when it was written."""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _trusted_roots(root: Path) -> list[str]:
    """``root`` itself, plus the ``blobs`` folder of a Hugging Face cache snapshot: its files are
    symlinks into ``datasets--owner--name/blobs`` (``models--...`` for models), which belongs to the same download."""
    real = os.path.realpath(root)
    roots = [real]
    parts = Path(real).parts
    if (
        len(parts) >= 3
        and parts[-2] == "snapshots"
        and parts[-3].startswith(("datasets--", "models--"))
    ):
        roots.append(str(Path(real).parent.parent / "blobs"))
    return roots


def resolve_inside(root: str | os.PathLike, entry: object, what: str) -> Path:
    """Resolve ``entry``, a relative path read from a file of the folder ``root``, against ``root``;
    refuse (``UnsafePathError`` naming ``what`` and the entry) one that is not a string, is
    absolute, climbs out with ``..`` or is a symlink leading outside ``root``.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> resolve_inside(root, "a/b.csv", "data file").relative_to(root).as_posix()
    'a/b.csv'
    >>> resolve_inside(root, "../x.csv", "data file")
    Traceback (most recent call last):
    ...
    jaxfeed._base.files.UnsafePathError: data file '../x.csv' points outside ...
    """
    root = Path(root)
    if not isinstance(entry, str | os.PathLike) or not str(entry):
        raise UnsafePathError(f"{what} {entry!r} in {root} is not a relative path")
    text = os.fspath(entry)
    if "\x00" in text:
        raise UnsafePathError(f"{what} {text!r} in {root} holds a NUL byte")
    lexical = os.path.normpath(os.path.join(os.path.abspath(root), text))
    real = os.path.realpath(lexical)
    if not _within(lexical, os.path.abspath(root)) or not any(
        _within(real, r) for r in _trusted_roots(root)
    ):
        raise UnsafePathError(
            f"{what} {text!r} points outside the dataset folder {root} "
            f"(to {real}); only files inside it are read"
        )
    return Path(lexical)


def check_inside(root: str | os.PathLike, path: str | os.PathLike, what: str) -> Path:
    """Refuse ``path`` (found under ``root``, e.g. by a glob) when it resolves outside ``root``
    through a symlink; return it unchanged otherwise."""
    real = os.path.realpath(path)
    if not any(_within(real, r) for r in _trusted_roots(Path(root))):
        raise UnsafePathError(
            f"{what} {str(path)!r} is a link to {real}, outside the dataset folder {root}; "
            "only files inside it are read"
        )
    return Path(path)


def file_inside(root: str | os.PathLike, name: str, what: str) -> Path | None:
    """The file ``name`` directly inside the folder ``root``, or None when there is none: the one
    way a file of a checkpoint (or any folder read as data) is opened. Refuses
    (``UnsafePathError``, naming the file, where it leads and what to do) a name that is not a
    plain file name and a symlink leading outside ``root`` (a Hugging Face cache snapshot's
    ``blobs`` count as inside).

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> atomic_write(os.path.join(root, "a.json"), "{}")
    >>> file_inside(root, "a.json", "config").name, file_inside(root, "b.json", "config")
    ('a.json', None)
    >>> os.symlink("/etc/hostname", os.path.join(root, "c.json"))
    >>> file_inside(root, "c.json", "config")
    Traceback (most recent call last):
    ...
    jaxfeed._base.files.UnsafePathError: config ... is a link to /etc/hostname, outside ...
    """
    if not name or "\x00" in name or os.sep in name or "/" in name or name in (".", ".."):
        raise UnsafePathError(f"{what} {name!r} in {root} is not a plain file name")
    path = Path(root) / name
    if not os.path.lexists(path):
        return None
    real = os.path.realpath(path)
    if not any(_within(real, r) for r in _trusted_roots(Path(root))):
        raise UnsafePathError(
            f"{what} {str(path)!r} is a link to {real}, outside the folder {root}; only files "
            "inside it are read: copy the file into the folder instead of linking it"
        )
    return path if path.is_file() else None


def file_sha256(path: str | os.PathLike, chunk: int = 4 << 20) -> str:
    """The SHA-256 of a file's bytes, read in chunks (hex).

    >>> import tempfile, os
    >>> target = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> atomic_write(target, b"abc")
    >>> file_sha256(target)[:16]
    'ba7816bf8f01cfea'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------ OS file locks
class LockedError(OSError):
    """Another process holds the lock on a folder (an OS file lock, released when it exits)."""


class FolderLock:
    """An exclusive OS lock (``flock``) on ``folder/name``, or on the folder itself when ``name`` is
    None (then nothing is written): held until :meth:`release`, and released by the kernel when
    the holder exits or crashes, so a stale lock never needs cleaning.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> lock = FolderLock(folder, "run")
    >>> FolderLock(folder, "run")
    Traceback (most recent call last):
    ...
    jaxfeed._base.files.LockedError: the run ... is in use by another process...
    >>> lock.release()
    >>> FolderLock(folder, "run").release()
    """

    def __init__(self, folder: str | os.PathLike, what: str, name: str | None = None) -> None:
        import fcntl  # noqa: PLC0415 (optional: POSIX-only fcntl, imported where a lock is taken)

        self.path = Path(folder) if name is None else Path(folder) / name
        if name is None:
            self.fd: int | None = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        else:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = ""
            try:
                if name is not None:
                    holder = os.pread(self.fd, 20, 0).decode(errors="replace").strip()
            finally:
                os.close(self.fd)
                self.fd = None
            raise LockedError(
                f"the {what} {Path(folder)} is in use by another process"
                f"{f' (pid {holder})' if holder else ''}; wait for it to finish or use another "
                "folder"
            ) from None
        if name is not None:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        """Drop the lock (a lock file stays; its presence means nothing without the lock)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(path: str | os.PathLike) -> bool:
    """Whether some live process holds an OS lock on the file ``path`` (False when it is absent;
    True when it cannot be opened to tell, so that a clean-up never takes a live lock for dead)."""
    import fcntl  # noqa: PLC0415 (optional: POSIX-only fcntl, imported where a lock is tested)

    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


# ------------------------------------------------------------------------------ locked temporaries
WRITER_LOCK = ".writer.lock"  # inside a temporary folder, locked by the process filling it
STALE_TMP_SECONDS = 3600  # a temporary folder without a lock file untouched this long is abandoned


class LockedTemporary:
    """A new hidden folder ``.NAME.tmp-XXXXXXXX`` beside ``target``, to fill and then rename into
    place, locked by this process (an OS lock on ``WRITER_LOCK`` inside it) from the moment the
    lock file bears its name until the folder is renamed into place or removed: a clean-up by
    another process (:func:`remove_abandoned`) can never take it for a dead writer's.

    The lock file is locked under another name and renamed to ``WRITER_LOCK`` once held, so the
    file a clean-up probes is always locked while its writer lives. Once the folder is renamed
    into place the lock file is removed from it, still held, and the lock dropped last.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out"
    >>> with LockedTemporary(target, "example folder") as writing:
    ...     _ = (writing.path / "a.txt").write_text("hi")
    ...     writing.publish()
    True
    >>> sorted(p.name for p in target.iterdir()), sorted(p.name for p in target.parent.iterdir())
    (['a.txt'], ['out'])
    """

    on_step: ClassVar[Callable[[str, Path], None] | None] = None  # tests: run at each step

    def __init__(self, target: str | os.PathLike, what: str) -> None:
        self.target = Path(target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.path = self.target.parent / f".{self.target.name}.tmp-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        self.lock: FolderLock | None = None
        try:
            self.step("created")
            self.lock = FolderLock(self.path, what, WRITER_LOCK + ".new")
            self.step("locked aside")
            os.rename(self.path / (WRITER_LOCK + ".new"), self.path / WRITER_LOCK)
            self.lock.path = self.path / WRITER_LOCK
            self.step("locked")
        except BaseException:
            self.close()
            raise

    def step(self, name: str) -> None:
        """Run the test hook ``LockedTemporary.on_step`` (none outside tests) at step ``name``."""
        if LockedTemporary.on_step is not None:
            LockedTemporary.on_step(name, self.path)

    def publish(
        self, done: str | None = None, move: Callable[[Path, Path], None] = os.replace
    ) -> bool:
        """Rename the folder to ``target`` with ``move``; False (and the folder removed on close)
        when ``target`` already holds the file ``done``: another process finished first."""
        self.step("renaming")
        try:
            move(self.path, self.target)
        except OSError:
            if done is None or not (self.target / done).exists():
                raise
            return False
        self.step("renamed")
        lock_file = self.target / WRITER_LOCK
        try:  # ours (not a file of a later writer that replaced the folder meanwhile)
            held = self.lock is not None and self.lock.fd is not None
            if held and os.stat(lock_file).st_ino == os.fstat(self.lock.fd).st_ino:
                lock_file.unlink()
        except FileNotFoundError:
            pass
        self.step("published")
        return True

    def close(self) -> None:
        """Remove the folder if it was not renamed into place, then drop the lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self.lock is not None:
            self.lock.release()
        self.step("closed")

    def __enter__(self) -> LockedTemporary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def abandoned(tmp: Path) -> bool:
    """Whether the temporary folder ``tmp`` belongs to a dead writer: its lock file exists and
    nobody holds it, or it has no lock file and is untouched for ``STALE_TMP_SECONDS`` (a writer
    that died before locking, or a folder being removed)."""
    try:
        if (tmp / WRITER_LOCK).exists():
            return not is_locked(tmp / WRITER_LOCK)
        return time.time() - tmp.stat().st_mtime > STALE_TMP_SECONDS
    except OSError:
        return False


def remove_abandoned(parent: str | os.PathLike, prefix: str = ".") -> list[Path]:
    """Remove the temporary folders (``.NAME.tmp-...``, names starting with ``prefix``) in
    ``parent`` whose writer is dead (:func:`abandoned`); a live writer's are never touched.
    Returns the removed folders."""
    try:
        candidates = [
            p for p in Path(parent).iterdir() if p.name.startswith(prefix) and ".tmp-" in p.name
        ]
    except OSError:
        return []
    removed = []
    for tmp in candidates:
        if tmp.name.startswith(".") and abandoned(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def set_aside_name(tmp: Path) -> Path:
    """Where the writer whose temporary folder is ``tmp`` (``.NAME.tmp-KEY``) moves the folder it
    replaces while it renames ``tmp`` into place: ``.NAME.old-KEY``, named after ``tmp`` so that
    a recovery can tell whether that writer still lives (:func:`swap_in_progress`)."""
    head, _, key = tmp.name.rpartition(".tmp-")
    return tmp.with_name(f"{head}.old-{key}")


def swap_in_progress(old: Path) -> bool:
    """Whether the writer that set ``old`` (``.NAME.old-KEY``) aside may still be between its two
    renames: its temporary folder ``.NAME.tmp-KEY`` exists and is not :func:`abandoned`."""
    head, _, key = old.name.rpartition(".old-")
    tmp = old.with_name(f"{head}.tmp-{key}")
    return tmp.is_dir() and not abandoned(tmp)


def swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished folder ``tmp`` to ``target``, an existing folder (set aside under
    :func:`set_aside_name` first, then removed) or none."""
    if target.exists():
        old = set_aside_name(tmp)
        os.replace(target, old)
        if LockedTemporary.on_step is not None:  # tests: between the two renames
            LockedTemporary.on_step("set aside", tmp)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def exchange(first: str | os.PathLike, second: str | os.PathLike) -> None:
    """Swap two existing paths in one atomic step (Linux's ``renameat2(RENAME_EXCHANGE)``): a
    reader sees one or the other at each name, never neither. Raises ``OSError`` where it cannot
    be done (another system, a file system without it: ``EINVAL``/``ENOSYS``; a mount point:
    ``EBUSY``; ``ENOENT`` when one is missing), so the caller can fall back.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> atomic_write(root / "a", "A"); atomic_write(root / "b", "B")
    >>> try:
    ...     exchange(root / "a", root / "b")
    ... except OSError:  # not Linux: swapped by hand for the example
    ...     os.replace(root / "a", root / "c"); os.replace(root / "b", root / "a")
    ...     os.replace(root / "c", root / "b")
    >>> (root / "a").read_text(), (root / "b").read_text()
    ('B', 'A')
    """
    import ctypes  # noqa: PLC0415 (import cost: only a folder swap calls the C library)

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        raise OSError(errno.ENOSYS, "renameat2 is not available here", str(first)) from None
    at_fdcwd, rename_exchange = -100, 2  # <fcntl.h>, <linux/fs.h>
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]  # fmt: skip
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(first), None, str(second))


def fsync_folder(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename in it) to disk, where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_set_aside(target: str | os.PathLike) -> list[Path]:
    """Remove the folders ``.NAME.old-*`` that writers replacing ``target`` set aside and never
    deleted (killed between their two renames), once ``target`` exists again and their writer is
    dead (:func:`swap_in_progress`). Returns the removed folders."""
    target = Path(target)
    if not target.exists():
        return []  # a set-aside folder may be the only copy left: a reader restores it
    try:
        olds = list(target.parent.glob(f".{glob.escape(target.name)}.old-*"))
    except OSError:
        return []
    removed = []
    for old in olds:
        if not swap_in_progress(old):
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed
