"""JAX's persistent compilation cache in a folder of the caller's choice (the command: jaxfeed's
cache folder), so a second run of the same program loads its compiled steps instead of compiling
them again.

JAX keeps a program there once it took ``jax_persistent_cache_min_compile_time_secs`` to compile:
0.1 s here (:data:`MIN_COMPILE_SECONDS`), unless that variable is set, not JAX's default of 1 s,
which compiles a small run's many short programs (parameter initialisers, the evaluation step)
afresh every time: a second ``jaxfeed train --data digits --model mlp --epochs 1`` took 6.6 CPU s
at 1 s, 3.7-4.0 at 0.1 (2-core CPU, quiet). Entries are keyed by the program, its compile
options, the devices and the JAX version, so a changed model or another chip compiles afresh.
A folder that cannot be written is a warning and the run compiles as usual: the cache only
saves time.

The cache holds code every run executes, so it is read with care (issue 63):

* a folder another user owns, that anyone can write, or inside a folder where anyone can replace
  it, is not used (one warning says which and what to set);
* JAX opens the folder through :class:`CheckedCache` (JAX's own LRU cache, on its private
  ``jax._src.compilation_cache``; where a JAX release moves it, JAX's cache reads the folder
  unchecked): an entry is read only when it is a regular file of at most :data:`ENTRY_LIMIT`
  bytes whose compressed stream is whole; anything else at an entry's name (a FIFO, a link, a
  device, a truncated or damaged file) is removed with one warning, and the program compiled and
  written again. Entries are written whole (a temporary file renamed into place), each with its
  ``-atime`` file, and an entry without one (written where ``filelock`` was not installed) is
  ranked by its modification time, and given one when the bounded cache opens the folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import jax

try:  # JAX's private cache modules: CheckedCache builds on them (see install_checked_cache)
    from jax._src import compilation_cache as _jcc
    from jax._src.lru_cache import LRUCache as _JaxLRUCache
except ImportError:  # a JAX release that moved them: JAX's own cache reads the folder unchecked
    _jcc, _JaxLRUCache = None, object

MAX_SIZE = 4 << 30  # bytes kept before the least recently used entries go (with filelock)
ENTRY_LIMIT = 4 << 30  # the largest entry read: a bigger file at an entry's name is no program
MIN_COMPILE_SECONDS = 0.1  # programs that compiled faster are not kept
_THRESHOLD_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
_CACHE, _ATIME = "-cache", "-atime"  # JAX's names: <key>-cache, <key>-atime


def use_compile_cache(folder: str | os.PathLike[str] | None) -> Path | None:
    """Keep compiled programs in ``folder``; None turns JAX's persistent cache off. Returns the
    folder in use: one set before (``JAX_COMPILATION_CACHE_DIR``, ``jax.config``) is kept, and a
    folder that cannot be written, that another user owns or that anyone can write (or replace)
    gives a warning and None (nothing is cached). Programs that took :data:`MIN_COMPILE_SECONDS`
    or more to compile are kept, unless a threshold was set
    (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``, or ``jax.config`` away from JAX's 1 s).

    >>> import tempfile
    >>> use_compile_cache(tempfile.mkdtemp()).is_dir()
    True
    """
    if folder is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    if (
        _THRESHOLD_ENV not in os.environ
        and jax.config.jax_persistent_cache_min_compile_time_secs == 1
    ):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    chosen = jax.config.jax_compilation_cache_dir
    if chosen:  # the user's own (JAX_COMPILATION_CACHE_DIR) or set earlier in this process
        if "://" in str(chosen) and not str(chosen).startswith("file://"):
            return Path(chosen)  # a remote folder: JAX's own cache reads it
        where = _DIR_ENV if os.environ.get(_DIR_ENV) else "jax_compilation_cache_dir"
        return _checked(Path(str(chosen).removeprefix("file://")), f"{where} (unset it)")
    folder = Path(folder).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as err:
        warnings.warn(
            f"the compilation cache folder {folder} cannot be written ({err.strerror or err}): "
            "compiling without it (set JAXFEED_CACHE to another folder, or --no-compile-cache)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if (
        "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ
        and importlib.util.find_spec("filelock") is not None  # JAX's bounded cache locks with it
    ):
        jax.config.update("jax_compilation_cache_max_size", MAX_SIZE)
    used = _checked(folder, "JAXFEED_CACHE to a folder of yours")
    if used is not None:
        jax.config.update("jax_compilation_cache_dir", str(folder))
    return used


def _checked(folder: Path, remedy: str) -> Path | None:
    """``folder`` when only this user can put programs there, with JAX reading it through
    :class:`CheckedCache`; else the cache off, one warning saying why, and None."""
    reason = unsafe_folder(folder)
    if reason is not None:
        jax.config.update("jax_enable_compilation_cache", False)
        _reset_jax_cache()
        warnings.warn(
            f"the compilation cache folder {folder} is not used: {reason}, and every run "
            f"executes the code kept there; compiling without it (set {remedy}, or "
            "--no-compile-cache)",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    if jax.config.jax_compilation_cache_max_size not in (-1, 0):
        add_missing_atimes(folder)
    install_checked_cache()
    return folder


def unsafe_folder(folder: Path) -> str | None:
    """Why another user could put programs in ``folder`` (None: they cannot): it or a folder
    above it is owned by another user (root aside), it is writable by anyone, or a folder above
    it is writable by anyone without the sticky bit (they could replace it). A folder writable by
    its group is shared with that group, on purpose.

    >>> import tempfile
    >>> unsafe_folder(Path(tempfile.mkdtemp())) is None
    True
    """
    if not hasattr(os, "getuid"):  # Windows: its access lists are not checked here
        return None
    me = os.getuid()
    path = folder.resolve()
    for place in (path, *path.parents):
        try:
            st = os.stat(place)
        except OSError:
            continue
        if st.st_uid not in (me, 0):
            owner = "it" if place == path else f"{place}, a folder above it,"
            return f"{owner} belongs to another user (uid {st.st_uid})"
        if st.st_mode & stat.S_IWOTH:
            if place == path:
                return "anyone can write in it"
            if not st.st_mode & stat.S_ISVTX:
                return f"anyone can write in {place}, a folder above it, and replace it"
    return None


def add_missing_atimes(folder: Path) -> None:
    """Give each entry of ``folder`` without a ``-atime`` file one (its modification time), as
    JAX's bounded cache expects of every entry (an entry written where ``filelock`` was not
    installed has none, and JAX's bounded cache then fails each write)."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.endswith(_CACHE) or not entry.is_file(follow_symlinks=False):
                continue
            atime = os.path.join(folder, entry.name.removesuffix(_CACHE) + _ATIME)
            if not os.path.lexists(atime):
                with contextlib.suppress(OSError):
                    _write_whole(atime, entry.stat().st_mtime_ns.to_bytes(8, "little"))


# ---------------------------------------------------------------------------------- the reader
def install_checked_cache() -> bool:
    """Make JAX open its cache folders through :class:`CheckedCache` (once per process; a cache
    JAX opened before is reopened). False where JAX moved the private API this relies on.

    >>> install_checked_cache()
    True
    """
    if _jcc is None or not hasattr(_jcc, "get_file_cache"):
        return False
    if not getattr(_jcc.get_file_cache, "jaxfeed_checked", False):
        jax_own = _jcc.get_file_cache

        def get_file_cache(path: str) -> Any:
            if "://" in path and not path.startswith("file://"):
                return jax_own(path)  # a remote folder: JAX's own cache
            cache = CheckedCache(path, max_size=jax.config.jax_compilation_cache_max_size)
            if jax.config.jax_compilation_cache_check_contents:
                return _jcc.VerificationCache(cache), path
            return cache, path

        get_file_cache.jaxfeed_checked = True  # type: ignore[attr-defined]
        _jcc.get_file_cache = get_file_cache
    opened = getattr(_jcc, "_cache", None)
    opened = getattr(opened, "_base_cache", opened)
    if opened is not None and not isinstance(opened, CheckedCache):
        _reset_jax_cache()  # opened by JAX before: the next compilation opens it checked
    return True


def _reset_jax_cache() -> None:
    from jax.experimental.compilation_cache import (  # noqa: PLC0415 (import cost: only when the cache changes)
        compilation_cache,
    )

    compilation_cache.reset_cache()


class _Busy(Exception):
    """The cache's lock was not granted in time (another process holds it)."""


class CheckedCache(_JaxLRUCache):
    """JAX's LRU cache (same files, same lock, same bound) that reads only regular files of at
    most :data:`ENTRY_LIMIT` bytes whose compressed stream is whole, and writes each entry whole
    with its ``-atime``; whatever else sits at an entry's name is removed, with one warning.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> CheckedCache(folder, max_size=-1).put("key", b"a compiled program")
    >>> sorted(os.listdir(folder))  # its -atime too, for a bounded cache opening it later
    ['key-atime', 'key-cache']
    """

    def _names(self, key: str) -> tuple[str, str]:
        if not key:
            raise ValueError("key cannot be empty")
        folder = os.fspath(self.path)
        return os.path.join(folder, key + _CACHE), os.path.join(folder, key + _ATIME)

    @contextlib.contextmanager
    def _locked(self) -> Any:
        if not self.eviction_enabled:
            yield
            return
        try:
            self.lock.acquire(timeout=self.lock_timeout_secs)
        except Exception as err:  # filelock.Timeout: another process holds it
            raise _Busy from err
        try:
            yield
        finally:
            self.lock.release()

    def get(self, key: str) -> bytes | None:
        entry, atime = self._names(key)
        try:
            with self._locked():
                value, problem = _read_entry(entry)
                if problem is None and value is not None:
                    problem = _damage(value)
                if problem is not None:
                    _discard(entry, atime, problem)
                    return None
                if value is not None:
                    self.__dict__.setdefault("served", set()).add(key)
                    if self.eviction_enabled:
                        _write_whole(atime, time.time_ns().to_bytes(8, "little"))
                return value
        except _Busy:
            return None  # compiled afresh

    def put(self, key: str, value: bytes) -> None:
        entry, atime = self._names(key)
        if self.eviction_enabled and len(value) > self.max_size:
            return  # larger than the whole cache: not kept
        try:
            with self._locked():
                try:
                    mode = os.lstat(entry).st_mode
                except FileNotFoundError:
                    mode = None
                if mode is not None and stat.S_ISREG(mode):
                    if key not in self.__dict__.get("served", ()) or (
                        jax.config.jax_compilation_cache_check_contents
                    ):
                        return  # written meanwhile by another process, as JAX does
                    # served by get() and compiled again all the same: JAX could not load it
                    _discard(entry, atime, "unusable (JAX could not load it)")
                elif mode is not None:
                    _discard(entry, atime, _kind(mode))
                if os.path.lexists(entry):
                    return  # a folder there: left as it is (the warning says to remove it)
                self._evict_if_needed(additional_size=len(value))
                _write_whole(entry, value)
                _write_whole(atime, time.time_ns().to_bytes(8, "little"))
        except _Busy:
            return

    def _evict_if_needed(self, *, additional_size: int = 0) -> None:
        """JAX's rule (least recently used first, until the folder fits ``max_size``), over the
        regular files at entries' names; an entry without ``-atime`` ranks by its mtime."""
        if not self.eviction_enabled:
            return
        folder, found_entries, size = os.fspath(self.path), [], 0
        with os.scandir(folder) as entries:
            for found in entries:
                if not found.name.endswith(_CACHE):
                    continue
                st = found.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    continue
                found_entries.append((found.name.removesuffix(_CACHE), st))
                size += st.st_size
        if size <= self.max_size - additional_size:
            return  # fits: no entry's last use is read (a file read per entry, at every write)
        ranked = []
        for key, st in found_entries:
            used = _read_atime(os.path.join(folder, key + _ATIME))
            ranked.append((st.st_mtime_ns if used is None else used, key, st.st_size))
        ranked.sort()
        for _, key, taken in ranked:
            if size <= self.max_size - additional_size:
                break
            for name in (key + _CACHE, key + _ATIME):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
            size -= taken


def _damage(value: bytes) -> str | None:
    """Why JAX could not decompress an entry (None: it can)."""
    try:
        _jcc.decompress_executable(value)
    except Exception as err:  # zlib.error, zstd's errors: whatever the codec raises
        return f"damaged ({type(err).__name__}: {str(err)[:120]})"
    return None


def _read_entry(path: str) -> tuple[bytes | None, str | None]:
    """``(bytes, None)``, ``(None, None)`` when nothing is there, or ``(None, what is there)``
    for anything but a regular file of at most :data:`ENTRY_LIMIT` bytes (never followed,
    never waited on: a FIFO opens without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, PermissionError):  # not there, or another user's: a miss
        return None, None
    except OSError:  # ELOOP: a link
        try:
            return None, _kind(os.lstat(path).st_mode)
        except FileNotFoundError:
            return None, None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, _kind(st.st_mode)
        if st.st_size > ENTRY_LIMIT:
            return None, f"{st.st_size} bytes, over the {ENTRY_LIMIT} a compiled program takes"
        data = file.read(st.st_size + 1)
    if len(data) != st.st_size:
        return None, "changing while read"
    return data, None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):  # fmt: skip
        if test(mode):
            return f"{name}, not a file"
    return "not a regular file"


def _read_atime(path: str) -> int | None:
    data, problem = _read_entry(path)
    return (
        None
        if problem is not None or data is None or len(data) != 8
        else int.from_bytes(data, "little")
    )


def _discard(entry: str, atime: str, problem: str) -> None:
    """Remove what sits at an entry's name (and its ``-atime``), saying so in one warning."""
    removed = True
    for path in (entry, atime):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:  # a folder, or a file this user may not remove
            removed = removed and path != entry
    done = "removed" if removed else "remove it"
    warnings.warn(
        f"the compilation cache entry {entry} was {problem}: {done}; this program is compiled "
        "afresh",
        RuntimeWarning,
        stacklevel=2,
    )


def _write_whole(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place: a reader never
    sees it half-written, and a FIFO or link at ``path`` is replaced, never opened."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name[:60]}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
