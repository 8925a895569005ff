"""Out-of-core loading: data files converted batch by batch into memory-mapped Arrow cache files.

``load_dataset`` of Parquet, CSV, JSON or remote files writes each split once into an Arrow IPC
file under the cache folder (``cache_dir=``, else ``$JAXFEED_CACHE``, else ``~/.cache/jaxfeed``),
then memory-maps it: peak memory stays near one record batch whatever the size of the data, and
reads are zero-copy. The file is keyed by a fingerprint of the sources (path, size, modification
time or ETag) and of the options (format, features), written into a hidden folder and renamed
into place, so a crash never leaves a half-written cache; a second load of unchanged files maps
the cache without reading the sources; a changed source gets a new fingerprint, and the entry
made from its previous version is removed.

The key is a file's size and modification time, not its content: a source rewritten with the
same size and its modification time restored (``touch -d``, some copy tools) maps the old entry.
``verification_mode="all_checks"`` (``load_dataset``, :func:`load_cached`) keys by the SHA-256 of
every local source instead, reading each file once per load.

Each entry is checked when it is opened: ``info.json`` carries a digest of itself, the size and
CRC-32 of ``data.arrow``; every open checks the digest, the size and the Arrow footer (no pass
over the data), and a file whose inode, size, modification or change time differs from the ones
recorded after its last full check gets a full one (CRC-32 of every byte, about 6 GB/s on the
development machine, plus the features' checks of the data). Any change to the bytes changes the
file's ctime, which no process can set back, so a changed or damaged file is always read in full
once, and an untouched one never again. A damaged entry is named in a warning and rebuilt from its
sources. Temporaries of dead writers (each writer holds an OS lock on its temporary folder) are
removed whenever a cache folder is opened. ``$JAXFEED_CACHE_MAX_GB`` bounds the cache's size:
after a new entry is written, the least recently used ones are removed until the rest fit.
``jaxfeed cache list`` and ``jaxfeed cache clean [--older-than DAYS]`` show and empty the cache.

Layout::

    <cache>/datasets/<fingerprint>/data.arrow   Arrow IPC file (record batches of ~4 MB)
    <cache>/datasets/<fingerprint>/info.json    features, rows, the sources it was made from,
                                                the data's size and CRC-32, its own digest
    <cache>/datasets/<fingerprint>/verified.json  the file's stat when it was last checked in full

Built-in and folder datasets are written the same way through :func:`cached_dataset`, keyed by
what they are made from (every file's path, size and modification time, and the options).

Both return a :class:`CachedTable` (the memory-mapped table, its features and the entry's files),
never a Dataset: this module sits below :mod:`jaxfeed.data.dataset`, whose ``Dataset._from_cached``
wraps it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from jaxfeed._base import remote
from jaxfeed._base.files import (
    LockedTemporary,
    atomic_write,
    remove_abandoned,
)
from jaxfeed._base.settings import progress
from jaxfeed.data import ops
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features
from jaxfeed.data.formats.batches import file_batches
from jaxfeed.data.formats.files import file_format, read_table, source_identity
from jaxfeed.data.formats.validate import check_arrow_data, check_table

CACHE_ENV = "JAXFEED_CACHE"
MAX_GB_ENV = "JAXFEED_CACHE_MAX_GB"
CACHE_VERSION = 2  # 2: info.json records the data's size and CRC-32 and its own digest
DATA_FILE = "data.arrow"
INFO_FILE = "info.json"
VERIFIED_FILE = "verified.json"
VERIFICATION_MODES = ("no_checks", "basic_checks", "all_checks")


class CachedTable(NamedTuple):
    """A cache entry opened: its table memory-mapped from ``cache_dir / cache_files[0]``, and its
    features (``Dataset._from_cached`` makes the dataset, ``cache_files`` listing that file)."""

    table: pa.Table
    features: Features
    cache_dir: Path
    cache_files: list[str]


class CacheDamagedError(ValueError):
    """A cache entry's files differ from what was written (truncated, edited, corrupt)."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``cache_dir``, else ``$JAXFEED_CACHE``, else ``~/.cache/jaxfeed``.

    >>> str(cache_root("/tmp/my-cache"))
    '/tmp/my-cache'
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "jaxfeed"


def fingerprint(
    files: Sequence[str],
    fmt: str | None,
    features: Features | None = None,
    storage_options: dict | None = None,
    verification_mode: str | None = None,
) -> str:
    """A key that changes when any source file or option changes: each file's size and
    modification time (or ETag), or with ``verification_mode="all_checks"`` its SHA-256.

    Credentials in ``storage_options`` are not part of it (they do not change the data).
    """
    payload = {
        "version": CACHE_VERSION,
        "format": fmt,
        "features": None if features is None else features.to_dict(),
        "sources": [
            source_identity(f, storage_options, content=_content_mode(verification_mode))
            for f in files
        ],
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _content_mode(verification_mode: str | None) -> bool:
    if verification_mode is not None and verification_mode not in VERIFICATION_MODES:
        raise ValueError(
            f"verification_mode must be one of {VERIFICATION_MODES}, got {str(verification_mode)[:40]!r}"
        )
    return verification_mode == "all_checks"


def _lineage(payload: Any) -> str:
    """What an entry is made from, without the sources' versions: a new version replaces it."""
    text = json.dumps({"version": CACHE_VERSION, **payload}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def needs_conversion(files: Sequence[str], fmt: str | None) -> bool:
    """Local Arrow IPC files are memory-mapped where they are; everything else is converted."""
    return not all(
        not remote.is_remote(f) and (fmt or file_format(f)) == "arrow" and not _compressed(f)
        for f in files
    )


def _compressed(path: str) -> bool:
    return path.lower().endswith((".gz", ".bz2", ".zst", ".lz4"))


def load_cached(
    files: Sequence[str],
    fmt: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    features: Features | None = None,
    storage_options: dict | None = None,
    verification_mode: str | None = None,
) -> CachedTable:
    """One split's files as a table memory-mapped from the cache, converting them if needed.

    ``verification_mode="all_checks"`` keys the cache by the sources' SHA-256 instead of their
    size and modification time (see the module's docstring).

    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> folder = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"x": [1, 2, 3]}), folder + "/t.parquet")
    >>> load_cached([folder + "/t.parquet"], cache_dir=folder + "/cache").table["x"].to_pylist()
    [1, 2, 3]
    """
    files = [str(f) for f in files]
    if not files:
        raise ValueError("no data files to load")
    features = None if features is None else Features(features)
    key = fingerprint(files, fmt, features, storage_options, verification_mode)
    folder = cache_root(cache_dir) / "datasets" / key
    lineage = _lineage(
        {
            "format": fmt,
            "features": None if features is None else features.to_dict(),
            "sources": [f if remote.is_remote(f) else os.path.realpath(f) for f in files],
        }
    )
    return _open_or_build(
        folder, lambda: _convert(files, fmt, features, storage_options, folder, lineage)
    )


REMOVED_RETRIES = 3  # builds of an entry that another process's clean-up keeps removing


def _open_or_build(folder: Path, build: Callable[[], None]) -> CachedTable:
    """The entry at ``folder``, built first when absent, rebuilt (with a warning naming it) when
    its files are damaged, and rebuilt quietly when another process's clean-up (``trim``,
    ``clean``, a newer version's eviction) removed it between its publication, or the check
    that it exists, and its opening."""
    _clean_abandoned(folder.parent)
    damaged = False
    for attempt in range(REMOVED_RETRIES + 1):
        if not (folder / INFO_FILE).is_file():
            build()
        try:
            return _open(folder)
        except CacheDamagedError as err:
            if folder.exists():  # there, yet unreadable: damaged (once), not removed meanwhile
                if damaged or attempt == REMOVED_RETRIES:
                    raise
                damaged = True
                warnings.warn(f"{err}; rebuilding it from its sources", stacklevel=3)
                _remove_entry(folder)
            elif attempt == REMOVED_RETRIES:
                raise
    raise AssertionError("unreachable")


def info_digest(info: dict) -> str:
    """SHA-256 of an entry's ``info.json`` content without its own digest (canonical JSON)."""
    body = {k: v for k, v in info.items() if k != "info_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _stat_key(folder: Path) -> list[int]:
    """Inode, size, modification and change time of the entry's data and info files."""
    out = []
    for name in (DATA_FILE, INFO_FILE):
        st = (folder / name).stat()
        out += [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return out


def _read_info(folder: Path) -> dict:
    where = f"cache entry {folder}"
    try:
        info = json.loads((folder / INFO_FILE).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CacheDamagedError(
            f"{where}: {INFO_FILE} is unreadable ({type(err).__name__})"
        ) from None
    if not isinstance(info, dict) or info.get("info_sha256") != info_digest(info):
        raise CacheDamagedError(f"{where}: {INFO_FILE} differs from what was written")
    return info


def _open(folder: Path) -> CachedTable:
    """Map an entry after checking it (see the module's docstring for what each open checks)."""
    where = f"cache entry {folder}"
    info = _read_info(folder)
    data = folder / DATA_FILE
    try:
        key = _stat_key(folder)
    except OSError:
        raise CacheDamagedError(f"{where}: {DATA_FILE} is missing") from None
    if key[1] != info.get("data_bytes"):
        raise CacheDamagedError(
            f"{where}: {DATA_FILE} has {key[1]} bytes, {info.get('data_bytes')} were written "
            "(truncated or changed)"
        )
    full = _verified_key(folder) != key
    try:
        if full and file_crc32(data) != info.get("data_crc32"):
            raise CacheDamagedError(f"{where}: {DATA_FILE} differs from what was written (CRC-32)")
        source = pa.memory_map(str(data))
    except OSError as err:  # removed meanwhile by another process's clean-up, or unreadable
        raise CacheDamagedError(f"{where}: {DATA_FILE} cannot be read ({err})") from None
    try:
        table = pa.ipc.open_file(source).read_all()
        features = Features.from_dict(info["features"])
        if table.num_rows != info.get("num_rows") or not table.schema.equals(
            features.arrow_schema, check_metadata=False
        ):
            raise ValueError("its rows or columns differ from info.json")
        if full:
            check_arrow_data(table, str(data))
            check_table(table, features, str(data))
    except (pa.ArrowException, ValueError, TypeError, KeyError) as err:
        raise CacheDamagedError(f"{where}: {str(err)[:300]}") from None
    if full:
        with contextlib.suppress(OSError):  # a read-only cache: the next open checks in full
            atomic_write(folder / VERIFIED_FILE, json.dumps(key))
    _touch(folder)
    # the schema equals the features' (checked above): only their metadata to put on it
    table = table.replace_schema_metadata(features.arrow_schema.metadata)
    return CachedTable(table, features, folder, [DATA_FILE])


def _verified_key(folder: Path) -> list[int] | None:
    try:
        return json.loads((folder / VERIFIED_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return None


def _touch(folder: Path) -> None:
    """Mark an entry used now (its folder's modification time): the size limit removes the least
    recently used first."""
    with contextlib.suppress(OSError):
        os.utime(folder)


def file_crc32(path: str | os.PathLike, chunk: int = 8 << 20) -> int:
    """CRC-32 of a file's bytes, read in chunks.

    >>> import tempfile, os
    >>> target = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> atomic_write(target, b"abc")
    >>> hex(file_crc32(target))
    '0x352441c2'
    """
    crc = 0
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(chunk)
        view = memoryview(buffer)
        while n := f.readinto(buffer):
            crc = zlib.crc32(view[:n], crc)
    return crc


def _convert(
    files: list[str],
    fmt: str | None,
    features: Features | None,
    storage_options: dict | None,
    folder: Path,
    lineage: str | None = None,
) -> None:
    def fill(tmp: Path) -> dict[str, Any]:
        try:
            rows, out_features, crc = _write(
                files, fmt, features, storage_options, tmp, stream=True
            )
        except _InferenceError:
            # CSV/JSON types are inferred from the first block; a later block disagreed (e.g. a
            # float after many ints). Read such files whole, one at a time, to infer the types.
            rows, out_features, crc = _write(
                files, fmt, features, storage_options, tmp, stream=False
            )
        return {
            "features": out_features.to_dict(),
            "num_rows": rows,
            "data_crc32": crc,
            "sources": files,
            "format": fmt,
            "lineage": lineage,
        }

    _publish(folder, fill)


def cached_dataset(
    payload: dict[str, Any],
    batches: Callable[[], Iterable[pa.RecordBatch]],
    features: Features | Callable[[], Features],
    cache_dir: str | os.PathLike | None = None,
    sources: Any = None,
    lineage: Any = None,
) -> CachedTable:
    """A table written once into the cache from the record batches ``batches()`` yields (all
    with ``features``' schema), then memory-mapped. ``payload`` (JSON-able) says what the data are
    made from, files' sizes and modification times included: the same payload maps the existing
    cache without calling ``batches`` (nor ``features``, when it is a function computing them);
    ``sources`` is recorded in ``info.json``. ``lineage`` (JSON-able) says what the data are made
    from without the files' versions: a new entry replaces the ones of the same lineage. Built-in
    and folder datasets are cached through here.

    >>> import tempfile, pyarrow as pa
    >>> from jaxfeed import Features, Value
    >>> features = Features({"x": Value("int64")})
    >>> make = lambda: (pa.record_batch({"x": [i, i + 1]}) for i in (0, 2))
    >>> cache = tempfile.mkdtemp()
    >>> cached_dataset({"demo": 1}, make, features, cache).table["x"].to_pylist()
    [0, 1, 2, 3]
    """
    text = json.dumps({"version": CACHE_VERSION, **payload}, sort_keys=True, default=str)
    folder = cache_root(cache_dir) / "datasets" / hashlib.sha256(text.encode()).hexdigest()[:24]
    line = None if lineage is None else _lineage(lineage)

    def fill(tmp: Path) -> dict[str, Any]:
        schema = features() if callable(features) else features
        rows, crc = write_batches(tmp / DATA_FILE, batches(), schema)
        return {
            "features": schema.to_dict(),
            "num_rows": rows,
            "sources": sources,
            "lineage": line,
            "data_crc32": crc,
        }

    return _open_or_build(folder, lambda: _publish(folder, fill))


def write_batches(
    path: Path, batches: Iterable[pa.RecordBatch], features: Features
) -> tuple[int, int]:
    """Write ``batches`` into an Arrow IPC file with ``features``' schema, one at a time (memory
    stays at about one batch); returns the number of rows and the file's CRC-32."""
    schema = features.arrow_schema
    with _Writer(path, schema) as writer:
        for batch in batches:
            writer.write(_conform(batch, schema, str(path), str(path)))
            del batch
    return writer.rows, writer.crc


WRITE_CHUNK = 64 << 10  # bytes per write() call
RELEASE_BYTES = 16 << 20  # hand freed memory back to the system after this many bytes written
CONVERT_BATCH_BYTES = 4 << 20  # record batches read from the sources and written to the cache


class _SmallWrites:
    """A raw file that passes data to the kernel ``WRITE_CHUNK`` bytes at a time.

    Arrow's IPC writer hands each buffer of a record batch (megabytes) to one ``write()``;
    measured on a 1 GB Parquet file (2 shared cores, median of 3), the conversion took 2.8 s
    with 64 KB writes against 7.9 s with whole buffers, the difference spent in the kernel
    copying into the page cache; 1 MB writes were as slow as whole buffers."""

    closed = False

    def __init__(self, path: Path) -> None:
        self.file = open(path, "wb", buffering=0)  # noqa: SIM115 - closed by close()
        self.crc = 0  # CRC-32 of everything written, for the entry's info.json

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        for lo in range(0, len(view), WRITE_CHUNK):
            part = view[lo : lo + WRITE_CHUNK]
            while part:
                part = part[self.file.write(part) :]
        return len(view)

    def tell(self) -> int:
        return self.file.tell()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.file.close()
        self.closed = True


class _Writer:
    """The cache's Arrow IPC file: record batches written with small ``write()`` calls, and
    Arrow's freed memory handed back every ``RELEASE_BYTES`` so the peak stays near a few
    batches (measured on a 290 MB Parquet file: +42 MB; 8 MB batches with a release after each
    gave +52 MB, without any +120 MB; a release per batch made every batch fault in and zero
    fresh pages)."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.raw = _SmallWrites(path)
        self.sink = pa.PythonFile(self.raw, mode="w")
        self.writer = pa.ipc.new_file(self.sink, schema)
        self.rows = self.pending = 0
        self.pool = pa.default_memory_pool()
        self.progress = progress(None, "Generating the cache")  # shown past PROGRESS_MIN_ROWS
        self.bar = self.progress.__enter__()

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)
        self.rows += batch.num_rows
        self.bar.update(batch.num_rows)
        self.pending += batch.nbytes
        if self.pending >= RELEASE_BYTES:
            self.pending = 0
            self.pool.release_unused()

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.sink.close()
            self.progress.__exit__(None, None, None)

    @property
    def crc(self) -> int:
        """CRC-32 of the bytes written so far (of the whole file once closed)."""
        return self.raw.crc

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _publish(folder: Path, fill: Callable[[Path], dict[str, Any]]) -> None:
    """Build a cache folder atomically: ``fill(tmp)`` writes ``data.arrow`` into a hidden folder
    (:class:`LockedTemporary`: locked by this process from its creation until it is renamed
    into place or removed, so no other process's clean-up takes it for a dead writer's) and
    returns the info; the data's size and CRC-32 and the info's digest are recorded, the folder is
    synced and renamed into place (a concurrent process that finished first wins), and removed
    on any error or interruption. Entries of the same lineage (older versions of the sources)
    are then removed, and the cache trimmed to ``$JAXFEED_CACHE_MAX_GB``."""
    with LockedTemporary(folder, "cache temporary folder") as writing:
        tmp = writing.path
        info = fill(tmp)
        writing.step("filled")
        data = tmp / DATA_FILE
        info["data_bytes"] = data.stat().st_size
        info["info_sha256"] = info_digest(info)
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2))
        writing.step("described")
        _fsync(data)
        (tmp / VERIFIED_FILE).write_text(json.dumps(_stat_key(tmp)))  # written, so checked
        writing.step("verified")
        writing.publish(done=INFO_FILE)  # False: another process's finished copy is there
    _evict_lineage(folder, info.get("lineage"))
    limit = os.environ.get(MAX_GB_ENV)
    if limit:
        try:
            max_bytes = int(float(limit) * (1 << 30))
        except ValueError:
            raise ValueError(f"${MAX_GB_ENV} must be a number of GiB, got {limit[:40]!r}") from None
        trim(folder.parent.parent, max_bytes, keep=folder)


def _remove_entry(folder: Path) -> None:
    """Remove an entry: renamed aside first (readers never see half an entry), then deleted.
    A process that maps its data keeps reading it (the file lives until it is unmapped)."""
    trash = folder.parent / f".{folder.name}.tmp-gone-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(folder, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _clean_abandoned(datasets: Path) -> None:
    """Remove the temporary folders of dead writers (:func:`jaxfeed._base.files.abandoned`: an
    unlocked lock file, or no lock file and untouched for ``STALE_TMP_SECONDS``); a live writer
    holds its lock until its folder is renamed into place or removed."""
    remove_abandoned(datasets)


def _evict_lineage(keep: Path, lineage: str | None) -> None:
    if lineage is None:
        return
    for entry in entries(keep.parent.parent):
        if entry["path"] != keep and entry.get("lineage") == lineage:
            _remove_entry(entry["path"])


def entries(root: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """The cache's entries under ``root`` (default :func:`cache_root`), oldest use first: each a
    dict of ``path``, ``bytes``, ``last_used`` (seconds since the epoch), ``num_rows``,
    ``sources`` and ``lineage`` (None where ``info.json`` is unreadable).

    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> folder = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"x": [1, 2]}), folder + "/t.parquet")
    >>> _ = load_cached([folder + "/t.parquet"], cache_dir=folder + "/cache")
    >>> [e["num_rows"] for e in entries(folder + "/cache")]
    [2]
    """
    base = cache_root(root) / "datasets"
    out = []
    try:
        folders = [p for p in base.iterdir() if not p.name.startswith(".") and p.is_dir()]
    except OSError:
        return []
    for folder in folders:
        try:
            size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            used = folder.stat().st_mtime
        except OSError:
            continue
        try:
            info = json.loads((folder / INFO_FILE).read_text())
            info = info if isinstance(info, dict) else {}
        except (OSError, ValueError, RecursionError):
            info = {}
        out.append(
            {
                "path": folder,
                "bytes": size,
                "last_used": used,
                "num_rows": info.get("num_rows"),
                "sources": info.get("sources"),
                "lineage": info.get("lineage"),
            }
        )
    return sorted(out, key=lambda e: e["last_used"])


def trim(root: str | os.PathLike | None, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used entries until the cache holds at most ``max_bytes``
    (``keep`` stays whatever its size); returns the removed folders."""
    found = entries(root)
    total = sum(e["bytes"] for e in found)
    removed = []
    for entry in found:
        if total <= max_bytes:
            break
        if keep is not None and entry["path"] == keep:
            continue
        _remove_entry(entry["path"])
        total -= entry["bytes"]
        removed.append(entry["path"])
    return removed


def clean(root: str | os.PathLike | None = None, older_than: float | None = None) -> list[Path]:
    """Remove the cache's entries (only those unused for ``older_than`` seconds, when given) and
    the temporary folders of dead writers; returns the removed entries.

    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> folder = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"x": [1, 2]}), folder + "/t.parquet")
    >>> _ = load_cached([folder + "/t.parquet"], cache_dir=folder + "/cache")
    >>> len(clean(folder + "/cache", older_than=3600)), len(clean(folder + "/cache"))
    (0, 1)
    """
    base = cache_root(root) / "datasets"
    _clean_abandoned(base)
    now = time.time()
    removed = []
    for entry in entries(root):
        if older_than is None or now - entry["last_used"] > older_than:
            _remove_entry(entry["path"])
            removed.append(entry["path"])
    return removed


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


class _InferenceError(Exception):
    pass


def _write(
    files: list[str],
    fmt: str | None,
    features: Features | None,
    storage_options: dict | None,
    tmp: Path,
    stream: bool,
) -> tuple[int, Features, int]:
    writer: _Writer | None = None
    schema: pa.Schema | None = None
    out_features = features
    first_file = files[0]
    try:
        for path in files:
            for batch in _batches(path, fmt, storage_options, stream):
                if features is not None:
                    batch = _cast(batch, features, path)
                if writer is None:
                    if out_features is None:
                        out_features = Features.from_arrow_schema(batch.schema)
                    schema = out_features.arrow_schema
                    writer = _Writer(tmp / DATA_FILE, schema)
                writer.write(_conform(batch, schema, path, first_file))
                del batch
        if writer is None:  # no rows at all: keep the schema of the first file
            table = read_table(first_file, fmt) if not remote.is_remote(first_file) else None
            if out_features is None:
                if table is None:
                    raise ValueError(f"{first_file} holds no rows")
                out_features = Features.from_arrow_schema(table.schema)
            writer = _Writer(tmp / DATA_FILE, out_features.arrow_schema)
    finally:
        if writer is not None:
            writer.close()
    return writer.rows, out_features, writer.crc


def _batches(
    path: str, fmt: str | None, storage_options: dict | None, stream: bool
) -> Iterator[pa.RecordBatch]:
    kind = fmt or file_format(path)
    if stream or kind not in ("csv", "json"):
        try:
            yield from file_batches(
                path, fmt, batch_bytes=CONVERT_BATCH_BYTES, storage_options=storage_options
            )
        except ValueError as err:
            if kind in ("csv", "json") and isinstance(err.__cause__, pa.ArrowInvalid):
                raise _InferenceError(str(err)) from err
            raise
        return
    if remote.is_remote(path):
        raise ValueError(f"cannot infer the column types of {path} block by block; pass features=")
    table = read_table(path, kind)
    yield from table.to_batches(max_chunksize=max(1, 65_536))


def _cast(batch: pa.RecordBatch, features: Features, path: str) -> pa.RecordBatch:
    if set(features) != set(batch.schema.names):
        raise ValueError(
            f"features {list(features)} do not match the columns {batch.schema.names} of {path}"
        )
    ds = ops.cast(DatasetCore.from_arrow(batch), features)  # checked as Dataset.cast checks
    return ds.data.combine_chunks().to_batches()[0] if ds.num_rows else _empty(features)


def _empty(features: Features) -> pa.RecordBatch:
    return features.arrow_schema.empty_table().to_batches()[0]


def _conform(batch: pa.RecordBatch, schema: pa.Schema, path: str, first: str) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=False):
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    if batch.schema.names != schema.names:
        if set(batch.schema.names) == set(schema.names):
            batch = batch.select(schema.names)
        else:
            raise ValueError(
                f"{path} has columns {batch.schema.names} but {first} has {schema.names}"
            )
    try:
        return pa.RecordBatch.from_arrays(
            [
                c if c.type == f.type else c.cast(f.type)
                for c, f in zip(batch.columns, schema, strict=True)
            ],
            schema=schema,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise ValueError(
            f"{path} has schema {batch.schema} but {first} has {schema}: {err}"
        ) from err


def fetch_folder(
    url: str, storage_options: dict | None = None, cache_dir: str | os.PathLike | None = None
) -> Path:
    """A local copy of a remote folder (a ``save_to_disk`` folder), kept in the cache.

    The copy is keyed by the URL and every file's size and ETag (or modification time), so an
    unchanged folder is downloaded once and a re-saved one again.
    """
    fs, inner = remote.listing_filesystem(url, storage_options)
    inner = inner.rstrip("/")
    found = sorted(fs.find(inner, detail=True).items())
    if not found:
        raise FileNotFoundError(f"{url} is not a saved dataset: the remote folder is empty")
    key_parts = [url] + [
        [name[len(inner) :], info.get("size"), remote.identity_of(info)] for name, info in found
    ]
    key = hashlib.sha256(json.dumps(key_parts, default=str).encode()).hexdigest()[:24]
    folder = cache_root(cache_dir) / "remote" / key
    if (folder / ".complete").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    _clean_abandoned(folder.parent)
    with LockedTemporary(folder, "remote folder copy") as writing:
        for name, _ in found:
            target = writing.path / name[len(inner) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(name, str(target))
        (writing.path / ".complete").write_text("")
        writing.publish(done=".complete")  # False: another process's finished copy is there
    return folder
