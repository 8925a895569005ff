"""Arrow shards written by a cluster's workers (Spark executors, Ray tasks), then memory-mapped.

A worker casts each record batch it holds to the dataset's features (:func:`conform`) and
writes it into Arrow IPC files of at most ``max_shard_size`` bytes (:class:`ShardWriter`), each
written under a temporary name and renamed when complete; it reports one :data:`STATS` row per
file. The driver never sees the rows: it collects those small rows, moves the files into a
cache folder in order (:func:`publish_shards`) and memory-maps them (:func:`open_shards`).

Layout (``<cache>/<engine>/<key>/``)::

    data-00000-of-00003.arrow ...   Arrow IPC files, in the source's order
    info.json                       features, rows and bytes of every file, the key's payload

Opening checks that every file has the size and rows recorded and the features' schema, and
checks a file in full (every Arrow buffer) when its inode, size, modification or change time
differ from the ones recorded after it was moved into place; a folder that fails is named in a :class:`ShardsDamagedError`.
This module imports no JAX: the workers import it.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from jaxfeed._base.files import LockedTemporary, atomic_write
from jaxfeed.data import ops
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features
from jaxfeed.data.formats.files import read_table

INFO_FILE = "info.json"
SHARDS_VERSION = 1
MAX_SHARD_SIZE = 500 << 20  # bytes of Arrow data per file, as `datasets`' MAX_SHARD_SIZE


class Shards(NamedTuple):
    """A folder of shards opened: the files' tables memory-mapped and concatenated, their
    features, the folder and the files' names (``Dataset._from_cached`` wraps it, as it wraps
    a :class:`~jaxfeed.data.formats.cache.CachedTable`)."""

    table: pa.Table
    features: Features
    cache_dir: Path | None
    cache_files: list[str]


class ShardsDamagedError(ValueError):
    """A folder of shards differs from what was written (a file missing, truncated, changed)."""


STATS = pa.schema(
    [
        ("part", pa.int64()),
        ("shard", pa.int64()),
        ("file", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
    ]
)


def target_features(stored: Features, features: Any, what: str) -> Features:
    """The features to write: ``features`` (which must name exactly the source's columns, in any
    order), else ``stored``, the ones of the source's schema; ``what`` names the call in errors.

    >>> from jaxfeed import Value
    >>> stored = Features({"a": Value("int64")})
    >>> target_features(stored, {"a": Value("int32")}, "from_ray")["a"].dtype
    'int32'
    """
    if features is None:
        return stored
    features = Features(features)
    if set(features) != set(stored):
        raise ValueError(
            f"{what}: features {list(features)} must name exactly the source's columns "
            f"{list(stored)}"
        )
    return Features({c: features[c] for c in stored})


def conform(table: pa.Table, stored: Features, target: Features, where: str) -> pa.Table:
    """``table`` (columns of ``stored``'s features, maybe in the engine's own Arrow types) cast to
    ``target``'s storage; a value that does not fit raises an error naming its column.

    >>> from jaxfeed import ClassLabel, Features, Value
    >>> stored = Features({"y": Value("string")})
    >>> target = Features({"y": ClassLabel(names=["a", "b"])})
    >>> conform(pa.table({"y": ["b", "a"]}), stored, target, "a batch")["y"].to_pylist()
    [1, 0]
    """
    if table.column_names != list(stored):
        table = table.select(list(stored))
    columns = []
    for name, field in zip(stored, stored.arrow_schema, strict=True):
        column = table.column(name)
        if column.type != field.type:
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise ValueError(
                    f"{where}: column {name!r} holds {column.type}, expected {field.type} ({err})"
                ) from None
        columns.append(column)
    table = pa.Table.from_arrays(columns, schema=stored.arrow_schema)
    if target == stored:
        return table
    return ops.cast(DatasetCore(table, stored), target).data


class ShardWriter:
    """Arrow IPC files ``<prefix>-<shard>.arrow`` in ``folder``, a new one once a file holds
    ``max_shard_size`` bytes (cut between rows); :meth:`finish` closes the last and returns one :data:`STATS` row
    per file (``part``: the piece of the source they hold, in the source's order).

    >>> import tempfile
    >>> from jaxfeed import Features, Value
    >>> features = Features({"x": Value("int64")})
    >>> writer = ShardWriter(tempfile.mkdtemp(), features, part=0, max_shard_size=16)
    >>> for lo in (0, 2):
    ...     writer.write(pa.table({"x": [lo, lo + 1]}))
    >>> writer.finish()["rows"].to_pylist()
    [2, 2]
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        features: Features,
        part: int,
        max_shard_size: int = MAX_SHARD_SIZE,
        attempt: str | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.schema = features.arrow_schema
        self.part, self.max = int(part), int(max_shard_size)
        self.prefix = f"part-{self.part:05d}-{attempt or uuid.uuid4().hex[:8]}"
        self.rows: list[dict[str, Any]] = []
        self._file: Any = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._count = self._bytes = 0

    def write(self, table: pa.Table) -> None:
        """Append ``table`` (the features' schema), starting a new file when the current is full."""
        for batch in table.to_batches():
            per_row = batch.nbytes / max(batch.num_rows, 1)
            while batch.num_rows:
                if self._writer is None:
                    self._open()
                room = max(1, int((self.max - self._bytes) // per_row)) if per_row else 1 << 62
                part, batch = batch.slice(0, room), batch.slice(room)
                self._writer.write_batch(part)
                self._count += part.num_rows
                self._bytes += part.num_rows * per_row
                if self._bytes >= self.max:
                    self._close()

    def _open(self) -> None:
        name = f"{self.prefix}-{len(self.rows):05d}.arrow"
        self._file = pa.OSFile(str(self.folder / (name + ".tmp")), "wb")
        self._writer = pa.ipc.new_file(self._file, self.schema)
        self._name, self._count, self._bytes = name, 0, 0

    def _close(self) -> None:
        self._writer.close()
        self._file.close()
        os.replace(self.folder / (self._name + ".tmp"), self.folder / self._name)
        size = (self.folder / self._name).stat().st_size
        self.rows.append(
            {
                "part": self.part,
                "shard": len(self.rows),
                "file": self._name,
                "rows": self._count,
                "bytes": size,
            }
        )
        self._writer = None

    def finish(self) -> pa.Table:
        """Close the open file; the :data:`STATS` rows of every file written."""
        if self._writer is not None:
            self._close()
        return pa.Table.from_pylist(self.rows, schema=STATS)


def publish_shards(
    folder: Path,
    written: Path,
    stats: Iterable[dict[str, Any]],
    features: Features,
    payload: dict[str, Any],
) -> Shards:
    """Move the files that ``stats`` rows name from ``written`` into the cache folder ``folder``
    in order (part, then shard), with ``info.json``; renamed into place atomically (the folder
    of another process that finished first wins); then open it."""
    rows = sorted(stats, key=lambda r: (r["part"], r["shard"]))
    with LockedTemporary(folder, "engine shards") as writing:
        files = _move_shards(rows, written, writing.path, features)
        info = {
            "version": SHARDS_VERSION,
            "features": features.to_dict(),
            "num_rows": sum(f["rows"] for f in files),
            "files": files,
            "payload": payload,
        }
        atomic_write(writing.path / INFO_FILE, json.dumps(info, indent=2, default=str))
        writing.publish(done=INFO_FILE)
    return open_shards(folder)


def _move_shards(
    rows: list[dict[str, Any]], written: Path, into: Path, features: Features
) -> list[dict[str, Any]]:
    total = max(len(rows), 1)
    files = []
    for i, row in enumerate(rows):
        name = f"data-{i:05d}-of-{total:05d}.arrow"
        source = written / row["file"]
        if source.parent == into:
            os.replace(source, into / name)
        else:  # a working_dir: renamed when on the same file system, else copied
            shutil.move(source, into / name)
        files.append(
            {
                "name": name,
                "rows": int(row["rows"]),
                "bytes": int(row["bytes"]),
                "stat": _stat(into / name),
            }
        )
    if not files:  # no rows at all: one empty file keeps the schema
        name = "data-00000-of-00001.arrow"
        with (
            pa.OSFile(str(into / name), "wb") as sink,
            pa.ipc.new_file(sink, features.arrow_schema),
        ):
            pass
        size = (into / name).stat().st_size
        files.append({"name": name, "rows": 0, "bytes": size, "stat": _stat(into / name)})
    return files


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _read(path: Path, written: list[int] | None) -> pa.Table:
    """A shard memory-mapped: only its footer read when the file is the one written (same inode,
    size, modification and change time: nothing wrote it since, as the cache's entries are
    trusted after their writing), else checked in full (every buffer: its pages are read)."""
    if written is not None and _stat(path) == written:
        return pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    return read_table(path, "arrow")


def open_shards(folder: Path) -> Shards:
    """The shards of a folder written by :func:`publish_shards`, memory-mapped and concatenated,
    after checking each file's size, rows and schema against ``info.json``."""
    where = f"engine cache folder {folder}"
    try:
        info = json.loads((folder / INFO_FILE).read_text())
        features = Features.from_dict(info["features"])
        files = info["files"]
        tables = []
        for entry in files:
            path = folder / entry["name"]
            if path.stat().st_size != entry["bytes"]:
                raise ValueError(f"{entry['name']} has another size than the one written")
            table = _read(path, entry.get("stat"))
            if table.num_rows != entry["rows"]:
                raise ValueError(f"{entry['name']} has {table.num_rows} rows, not {entry['rows']}")
            if not table.schema.equals(features.arrow_schema, check_metadata=False):
                raise ValueError(f"{entry['name']} does not have the features' schema")
            tables.append(table)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise ShardsDamagedError(f"{where}: {str(err)[:300]}") from None
    schema = features.arrow_schema
    table = pa.concat_tables([t.replace_schema_metadata(schema.metadata) for t in tables])
    return Shards(table, features, folder, [f["name"] for f in files])


def remove_folder(folder: Path) -> None:
    """Remove a cache folder of shards: renamed aside first, so no reader sees half of it."""
    trash = folder.parent / f".{folder.name}.tmp-gone-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(folder, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)
