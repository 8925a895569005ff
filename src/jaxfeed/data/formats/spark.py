"""Spark DataFrames as datasets (the ``spark`` extra): ``Dataset.from_spark`` and
``IterableDataset.from_spark``.

Spark's types map to features (:func:`spark_features`); a type with no feature is a
``TypeError`` naming the column. ``Dataset.from_spark`` runs one Spark job
(``DataFrame.mapInArrow``) in which every executor casts its partitions to the features and
writes them as Arrow files (:mod:`jaxfeed.data.formats.shards`) into a folder of the cache, or
of ``working_dir``; the driver collects one small row per file, never the data, then
memory-maps the files in the DataFrame's order. The folder is keyed by the DataFrame's
``semanticHash()`` (its logical plan, as `datasets` keys it) and the features: the same
DataFrame maps the existing files unless ``load_from_cache_file=False``. On a cluster of
several machines the folder must be one that every executor and the driver reach (a shared
file system); that is checked by one small job before writing.

``IterableDataset.from_spark`` streams partition by partition (:class:`SparkPartitions`): each
partition is computed by one Spark job when the stream reaches it and comes to the driver as
Arrow record batches; its partitions are the stream's shards (``shard``, ``shuffle``,
``split_dataset_by_node``) and a saved position resumes at its partition and row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from jaxfeed._base.extras import require
from jaxfeed.data.features import Features, List, Value
from jaxfeed.data.features.struct import FeatureLike
from jaxfeed.data.formats.cache import cache_root
from jaxfeed.data.formats.shards import (
    INFO_FILE,
    MAX_SHARD_SIZE,
    SHARDS_VERSION,
    Shards,
    ShardsDamagedError,
    ShardWriter,
    conform,
    open_shards,
    publish_shards,
    remove_folder,
    target_features,
)

STATS_DDL = "part long, shard long, file string, rows long, bytes long"
_SCALARS = {
    "BooleanType": "bool",
    "ByteType": "int8",
    "ShortType": "int16",
    "IntegerType": "int32",
    "LongType": "int64",
    "FloatType": "float32",
    "DoubleType": "float64",
    "StringType": "string",
    "CharType": "string",
    "VarcharType": "string",
    "BinaryType": "binary",
    "DateType": "date32",
    "TimestampType": "timestamp[us]",  # Spark's instants, in UTC
    "TimestampNTZType": "timestamp[us]",
    "DayTimeIntervalType": "duration[us]",
    "NullType": "null",
}
_HINTS = {
    "DecimalType": "cast it to double or string in Spark",
    "MapType": "map_entries() makes it an array of key/value structs",
}


def spark_features(schema: Any) -> Features:
    """The features of a Spark schema (a ``StructType``): numbers, strings, binary, dates and
    timestamps (``TimestampType`` as UTC ``timestamp[us]``) are :class:`Value` s, arrays are
    :class:`List` s, structs are dicts. Any other type raises ``TypeError`` naming the column.

    >>> from types import SimpleNamespace as Field
    >>> IntegerType, DecimalType = type("IntegerType", (), {}), type("DecimalType", (), {})
    >>> spark_features(Field(fields=[Field(name="x", dataType=IntegerType())]))
    Features({'x': Value('int32')})
    >>> DecimalType.simpleString = lambda self: "decimal(10,2)"
    >>> spark_features(Field(fields=[Field(name="price", dataType=DecimalType())]))
    Traceback (most recent call last):
    ...
    TypeError: from_spark: column 'price' has the Spark type decimal(10,2), which has no feature (expected numbers, strings, binary, booleans, dates, timestamps, arrays or structs of them); cast it to double or string in Spark
    """
    return Features({f.name: _feature(f.dataType, f.name) for f in schema.fields})


def _feature(dtype: Any, column: str) -> FeatureLike:
    name = type(dtype).__name__
    if name in _SCALARS:
        return Value(_SCALARS[name])
    if name == "ArrayType":
        return List(_feature(dtype.elementType, column))
    if name == "StructType":
        return {f.name: _feature(f.dataType, f"{column}.{f.name}") for f in dtype.fields}
    shown = dtype.simpleString() if hasattr(dtype, "simpleString") else name
    hint = _HINTS.get(name)
    raise TypeError(
        f"from_spark: column {column!r} has the Spark type {shown}, which has no feature "
        "(expected numbers, strings, binary, booleans, dates, timestamps, arrays or structs "
        f"of them){'; ' + hint if hint else ''}"
    )


class _PartitionWriter:
    """The function ``mapInArrow`` runs on the executors: one partition's batches cast to the
    features and written as shards into ``folder``; yields their stats rows."""

    def __init__(self, folder: str, stored: Features, target: Features, max_size: int) -> None:
        self.folder, self.max_size = folder, max_size
        self.stored, self.target = stored.to_dict(), target.to_dict()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415 (optional: the spark extra)

        task = TaskContext.get()
        part = task.partitionId()
        stored, target = Features.from_dict(self.stored), Features.from_dict(self.target)
        attempt = f"{task.stageId()}-{task.attemptNumber()}-{task.taskAttemptId()}"
        writer = ShardWriter(self.folder, target, part, self.max_size, attempt)
        where = f"from_spark (partition {part})"
        for batch in batches:
            writer.write(conform(pa.Table.from_batches([batch]), stored, target, where))
        yield from writer.finish().to_batches()


class _Probe:
    """A one-task job's function: writes a file into ``folder``, which the driver then looks for."""

    def __init__(self, folder: str, name: str) -> None:
        self.folder, self.name = folder, name

    def __call__(self, _: Iterator[Any]) -> Iterator[str]:
        path = Path(self.folder) / self.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("probe")
        yield str(path)


def check_reachable(df: Any, folder: Path) -> None:
    """On a Spark master other than ``local[...]``, one task writes a file into ``folder``: if
    the driver does not see it, the executors write elsewhere (not a shared file system)."""
    sc = df.sparkSession.sparkContext
    if sc.master == "local" or sc.master.startswith("local["):
        return
    name = f"probe-{uuid.uuid4().hex[:8]}"
    sc.parallelize([0], 1).mapPartitions(_Probe(str(folder), name)).collect()
    probe = folder / name
    if not probe.is_file():
        raise ValueError(
            f"from_spark: the executors of {sc.master} cannot write into {folder} where the "
            "driver reads it; give cache_dir= (or working_dir=) a folder of a file system every "
            "executor and the driver share"
        )
    probe.unlink()


def write_spark(
    df: Any,
    features: Any = None,
    cache_dir: str | None = None,
    working_dir: str | None = None,
    load_from_cache_file: bool = True,
    max_shard_size: int = MAX_SHARD_SIZE,
) -> Shards:
    """The rows of ``df`` written by Spark's executors as Arrow shards into the cache (see the
    module's docstring), memory-mapped."""
    require("pyspark", "spark", "from_spark")
    stored = spark_features(df.schema)
    target = target_features(stored, features, "from_spark")
    payload = {
        "version": SHARDS_VERSION,
        "plan": int(df.semanticHash()),
        "features": target.to_dict(),
        "max_shard_size": int(max_shard_size),
    }
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]
    folder = cache_root(cache_dir) / "spark" / key
    if (folder / INFO_FILE).is_file():
        if load_from_cache_file:
            try:
                return open_shards(folder)
            except ShardsDamagedError as err:
                warnings.warn(f"{err}; writing it again", stacklevel=3)
        remove_folder(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _written_to(folder, working_dir) as written:
        check_reachable(df, written)
        job = _PartitionWriter(str(written), stored, target, max_shard_size)
        with _no_pandas_warning():
            mapped = df.mapInArrow(job, STATS_DDL)
        stats = [r.asDict() for r in mapped.collect()]
        return publish_shards(folder, written, stats, target, payload)


@contextlib.contextmanager
def _no_pandas_warning() -> Iterator[None]:
    """Without PySpark 4's ``FutureWarning`` that it does not yet fully support pandas >= 3,
    which ``mapInArrow`` raises on every call: jaxfeed's jobs pass Arrow batches, never pandas
    (a user's own pandas UDFs still get the warning)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
        )
        yield


@contextlib.contextmanager
def _written_to(folder: Path, working_dir: str | None) -> Iterator[Path]:
    """The folder the executors write into: a new one inside ``working_dir``, else one beside
    the cache folder; removed afterwards (its files moved into the cache folder)."""
    base = Path(working_dir).expanduser() if working_dir else folder.parent
    path = base / f".{folder.name}.written-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ipc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executors' side of a stream: each record batch as one Arrow IPC stream (bytes)."""
    for batch in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        yield pa.record_batch({"ipc": pa.array([sink.getvalue().to_pybytes()], pa.binary())})


def _blobs(rows: Iterator[Any]) -> list[bytes]:
    return [bytes(row[0]) for row in rows]


class SparkPartitions:
    """A stream's engine: the partitions of a DataFrame, each computed by one Spark job when it
    is read (:meth:`tables`) and cast to the features."""

    def __init__(self, df: Any, features: Any = None) -> None:
        require("pyspark", "spark", "from_spark")
        self.df = df
        self.stored = spark_features(df.schema)
        self.features = target_features(self.stored, features, "from_spark")
        self.num_partitions = df.rdd.getNumPartitions()
        self._rdd: Any = None

    def tables(self, part: int) -> Iterator[pa.Table]:
        """Partition ``part``'s rows as Arrow tables (one per record batch Spark made)."""
        if self._rdd is None:
            with _no_pandas_warning():
                self._rdd = self.df.mapInArrow(_ipc, "ipc binary").rdd
        sc = self.df.sparkSession.sparkContext
        where = f"from_spark (partition {part})"
        for blob in sc.runJob(self._rdd, _blobs, [part]):
            table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
            yield conform(table, self.stored, self.features, where)

    def identity(self) -> dict[str, Any]:
        """What a saved position is valid for: the DataFrame's plan and partitions."""
        return {"spark": int(self.df.semanticHash()), "partitions": self.num_partitions}
