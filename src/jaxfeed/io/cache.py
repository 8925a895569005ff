"""Out-of-core loading: data files converted batch by batch into memory-mapped Arrow cache files.

``load_dataset`` of Parquet, CSV, JSON or remote files writes each split once into an Arrow IPC
file under the cache folder (``cache_dir=``, else ``$JAXFEED_CACHE``, else ``~/.cache/jaxfeed``),
then memory-maps it: peak memory stays near one record batch whatever the size of the data, and
reads are zero-copy. The file is keyed by a fingerprint of the sources (path, size, modification
time or ETag) and of the options (format, features), written into a hidden folder and renamed
into place, so a crash never leaves a half-written cache; a second load of unchanged files maps
the cache without reading the sources; a changed source gets a new fingerprint.

Layout::

    <cache>/datasets/<fingerprint>/data.arrow   Arrow IPC file (record batches of ~4 MB)
    <cache>/datasets/<fingerprint>/info.json    features, rows, the sources it was made from

Built-in and folder datasets are written the same way through :func:`cached_dataset`, keyed by
what they are made from (every file's path, size and modification time, and the options).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from jaxfeed import remote
from jaxfeed.dataset import Dataset
from jaxfeed.features import Features
from jaxfeed.io.batches import file_batches
from jaxfeed.io.files import file_format, read_table
from jaxfeed.settings import progress

CACHE_ENV = "JAXFEED_CACHE"
CACHE_VERSION = 1
DATA_FILE = "data.arrow"
STALE_TMP_SECONDS = 3600  # a conversion folder untouched this long belongs to a crashed process


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


def source_identity(path: str, storage_options: dict | None = None) -> dict[str, Any]:
    """Path, size and modification time (or ETag) of one source file."""
    if remote.is_remote(path):
        return remote.identity(path, storage_options)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such data file: {path}") from None
    return {"path": os.path.abspath(path), "size": st.st_size, "version": st.st_mtime_ns}


def fingerprint(
    files: Sequence[str],
    fmt: str | None,
    features: Features | None = None,
    storage_options: dict | None = None,
) -> str:
    """A key that changes when any source file or option changes.

    Credentials in ``storage_options`` are not part of it (they do not change the data).
    """
    payload = {
        "version": CACHE_VERSION,
        "format": fmt,
        "features": None if features is None else features.to_dict(),
        "sources": [source_identity(f, storage_options) for f in files],
    }
    text = json.dumps(payload, sort_keys=True, default=str)
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
) -> Dataset:
    """One split's files as a dataset memory-mapped from the cache, converting them if needed.

    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> folder = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"x": [1, 2, 3]}), folder + "/t.parquet")
    >>> list(load_cached([folder + "/t.parquet"], cache_dir=folder + "/cache")["x"])
    [1, 2, 3]
    """
    files = [str(f) for f in files]
    if not files:
        raise ValueError("no data files to load")
    features = None if features is None else Features(features)
    key = fingerprint(files, fmt, features, storage_options)
    folder = cache_root(cache_dir) / "datasets" / key
    if not (folder / "info.json").is_file():
        _convert(files, fmt, features, storage_options, folder)
    return _open(folder)


def _open(folder: Path) -> Dataset:
    info = json.loads((folder / "info.json").read_text())
    source = pa.memory_map(str(folder / DATA_FILE))
    table = pa.ipc.open_file(source).read_all()
    ds = Dataset(table, Features.from_dict(info["features"]))
    ds._internal.set_cache(folder, [DATA_FILE])
    return ds


def _convert(
    files: list[str],
    fmt: str | None,
    features: Features | None,
    storage_options: dict | None,
    folder: Path,
) -> None:
    def fill(tmp: Path) -> dict[str, Any]:
        try:
            rows, out_features = _write(files, fmt, features, storage_options, tmp, stream=True)
        except _InferenceError:
            # CSV/JSON types are inferred from the first block; a later block disagreed (e.g. a
            # float after many ints). Read such files whole, one at a time, to infer the types.
            rows, out_features = _write(files, fmt, features, storage_options, tmp, stream=False)
        return {
            "features": out_features.to_dict(),
            "num_rows": rows,
            "sources": files,
            "format": fmt,
        }

    _publish(folder, fill)


def cached_dataset(
    payload: dict[str, Any],
    batches: Callable[[], Iterable[pa.RecordBatch]],
    features: Features | Callable[[], Features],
    cache_dir: str | os.PathLike | None = None,
    sources: Any = None,
) -> Dataset:
    """A dataset written once into the cache from the record batches ``batches()`` yields (all
    with ``features``' schema), then memory-mapped. ``payload`` (JSON-able) says what the data are
    made from, files' sizes and modification times included: the same payload maps the existing
    cache without calling ``batches`` (nor ``features``, when it is a function computing them);
    ``sources`` is recorded in ``info.json``. Built-in and
    folder datasets are cached through here.

    >>> import tempfile, pyarrow as pa
    >>> from jaxfeed import Features, Value
    >>> features = Features({"x": Value("int64")})
    >>> make = lambda: (pa.record_batch({"x": [i, i + 1]}) for i in (0, 2))
    >>> cache = tempfile.mkdtemp()
    >>> list(cached_dataset({"demo": 1}, make, features, cache)["x"])
    [0, 1, 2, 3]
    """
    text = json.dumps({"version": CACHE_VERSION, **payload}, sort_keys=True, default=str)
    folder = cache_root(cache_dir) / "datasets" / hashlib.sha256(text.encode()).hexdigest()[:24]
    if not (folder / "info.json").is_file():

        def fill(tmp: Path) -> dict[str, Any]:
            schema = features() if callable(features) else features
            rows = write_batches(tmp / DATA_FILE, batches(), schema)
            return {"features": schema.to_dict(), "num_rows": rows, "sources": sources}

        _publish(folder, fill)
    return _open(folder)


def write_batches(path: Path, batches: Iterable[pa.RecordBatch], features: Features) -> int:
    """Write ``batches`` into an Arrow IPC file with ``features``' schema, one at a time (memory
    stays at about one batch); returns the number of rows."""
    schema = features.arrow_schema
    with _Writer(path, schema) as writer:
        for batch in batches:
            writer.write(_conform(batch, schema, str(path), str(path)))
            del batch
        return writer.rows


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

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
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
        self.sink = pa.PythonFile(_SmallWrites(path), mode="w")
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

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _publish(folder: Path, fill: Callable[[Path], dict[str, Any]]) -> None:
    """Build a cache folder atomically: ``fill(tmp)`` writes ``data.arrow`` into a hidden folder
    and returns the info; the folder is synced and renamed into place (a concurrent process
    that finished first wins), and removed on any error or interruption."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(folder)
    tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        info = fill(tmp)
        (tmp / "info.json").write_text(json.dumps(info, indent=2))
        _fsync(tmp / DATA_FILE)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "info.json").is_file():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(folder: Path) -> None:
    for stale in folder.parent.glob(f".{folder.name}.tmp-*"):
        try:
            if time.time() - stale.stat().st_mtime > STALE_TMP_SECONDS:
                shutil.rmtree(stale, ignore_errors=True)
        except FileNotFoundError:
            pass


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
) -> tuple[int, Features]:
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
    return writer.rows, out_features


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
    ds = Dataset.from_arrow(batch).cast(features)
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
    _remove_stale(folder)
    tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        for name, _ in found:
            target = tmp / name[len(inner) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(name, str(target))
        (tmp / ".complete").write_text("")
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
