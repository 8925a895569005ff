"""Spark DataFrames as datasets (the ``spark`` extra): ``Dataset.from_spark`` and
``IterableDataset.from_spark``.

Spark's types map to features (:func:`spark_features`); a type with no feature is a
``TypeError`` naming the column. ``Dataset.from_spark`` runs one Spark job
(``DataFrame.mapInArrow``) in which every executor casts its partitions to the features and
writes them as Arrow files (:mod:`jaxfeed.data.formats.shards`) into a folder of the cache, or
of ``working_dir``; the driver collects one small row per file, never the data, then
memory-maps the files in the DataFrame's order. The folder is keyed by the DataFrame's logical
plan (:func:`plan_identity`: its ``semanticHash()``, as `datasets` keys it, which is 32 bits,
with the plan in full and what it reads) and the features: the same DataFrame maps the existing
files unless ``load_from_cache_file=False``. On a cluster of several machines the folder must be
one that every executor and the driver reach (a shared file system); that is checked by one
small job before writing.

On a ``local`` master the executors run jaxfeed's functions in this interpreter, whatever
``PYSPARK_PYTHON`` says (``python3`` from ``PATH`` when unset, which may lack jaxfeed); on a
cluster they run Spark's ``PYSPARK_PYTHON``. A job that fails there, a stopped session and
executors that cannot import jaxfeed are one line naming the cause (:func:`spark_job`).

``IterableDataset.from_spark`` streams partition by partition (:class:`SparkPartitions`): each
partition is computed by one Spark job when the stream reaches it and comes to the driver as
Arrow record batches; its partitions are the stream's shards (``shard``, ``shuffle``,
``split_dataset_by_node``) and a saved position resumes at its partition and row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import sys
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
    sc = running_context(df, "Dataset.from_spark")
    stored = spark_features(df.schema)
    target = target_features(stored, features, "from_spark")
    payload = {
        "version": SHARDS_VERSION,
        "plan": int(df.semanticHash()),
        "plan_sha256": plan_identity(df) or uuid.uuid4().hex,  # unknown: never shared
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
        with spark_job(sc, "Dataset.from_spark"):
            check_reachable(df, written)
            job = _PartitionWriter(str(written), stored, target, max_shard_size)
            with _no_pandas_warning():
                mapped = df.mapInArrow(job, STATS_DDL)
            stats = [r.asDict() for r in mapped.collect()]
        return publish_shards(folder, written, stats, target, payload)


def plan_identity(df: Any) -> str | None:
    """A SHA-256 of what ``df`` computes, for the cache's key: its canonical logical plan in
    full (Spark's JSON of it), its ``semanticHash()`` (which covers the data of local rows and
    the code of Python functions that the JSON leaves out), the Spark application, and what each
    leaf reads (an RDD's id in this application, a local relation's rows, a file source's
    paths). None where the plan cannot be read (Spark Connect): the DataFrame is then written
    afresh, never matched to another one's files.

    ``semanticHash()`` alone is 32 bits: two different DataFrames could share a cache entry.
    """
    try:
        plan = df._jdf.queryExecution().analyzed().canonicalized()
        parts = [plan.toJSON(), str(df.semanticHash())]
        parts.append(str(df.sparkSession.sparkContext.applicationId))
        leaves = plan.collectLeaves()
        for i in range(leaves.size()):
            parts.append(_leaf_identity(leaves.apply(i)))
    except Exception:  # Py4J errors, a Spark without these methods, Spark Connect (no _jdf)
        return None
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _leaf_identity(leaf: Any) -> str:
    """What a leaf of a plan reads, which Spark's JSON of the plan leaves out (as null)."""
    kind = leaf.getClass().getName()
    name = kind.rsplit(".", 1)[-1]
    if name == "LogicalRDD":
        return f"{kind}: rdd {leaf.rdd().id()}"  # ids are unique in an application
    if name == "LocalRelation":
        rows = leaf.data().mkString("\n")  # UnsafeRows: their bytes, in hex
        return f"{kind}: {hashlib.sha256(rows.encode()).hexdigest()}"
    if name == "LogicalRelation":
        relation = leaf.relation()
        with contextlib.suppress(Exception):  # a file source: its folders
            return f"{kind}: {relation.toString()} {relation.location().rootPaths().mkString(',')}"
        return f"{kind}: {relation.toString()}"
    return f"{kind}: {leaf.toString()}"


def running_context(df: Any, what: str) -> Any:
    """The SparkContext of ``df``'s session; ``RuntimeError`` in one line when it was stopped."""
    try:
        sc = df.sparkSession.sparkContext
        stopped = sc._jsc is None or type(sc)._active_spark_context is None
    except Exception:  # pyspark's "SparkContext or SparkSession should be created first"
        stopped = True
    if stopped:
        raise RuntimeError(
            f"{what}: the DataFrame's Spark session is stopped (spark.stop() was called): "
            "build the DataFrame again in a running session"
        )
    return sc


def runs_here(sc: Any) -> bool:
    """Whether ``sc``'s executors run on this machine (a ``local`` master)."""
    return str(sc.master).startswith("local")


@contextlib.contextmanager
def spark_job(sc: Any, what: str) -> Iterator[None]:
    """Spark jobs of jaxfeed's functions, run in this interpreter on a local master (the Python
    functions created meanwhile carry ``sys.executable``, not Spark's ``python3``: it has jaxfeed
    and pyarrow), and their failures in one line: the executors' own error (its last line, not
    Spark's ``An exception was thrown from the Python worker``), executors that cannot import
    jaxfeed or pyarrow (set ``PYSPARK_PYTHON``), a session stopped meanwhile."""
    before = sc.pythonExec
    if runs_here(sc):
        sc.pythonExec = sys.executable
    try:
        yield
    except Exception as err:
        if not type(err).__module__.startswith(("pyspark", "py4j")):
            raise
        raise _one_line(err, sc, before, what) from None
    finally:
        sc.pythonExec = before


_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::\s*(.*))?$")


def _one_line(err: BaseException, sc: Any, python: str, what: str) -> Exception:
    """A Spark job's failure as an exception whose one-line message names the cause."""
    if sc._jsc is None:
        return RuntimeError(f"{what}: the Spark session was stopped while the job ran")
    text = str(err)
    cause = None
    for line in reversed(text.splitlines()):
        found = _PYTHON_ERROR.match(line.strip())
        if found and not found.group(1).startswith(("java.", "org.", "scala.", "py4j.")):
            cause = found
            break
    if cause is None:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return RuntimeError(f"{what}: Spark's job failed: {type(err).__name__}: {first[:300]}")
    name, message = cause.group(1), (cause.group(2) or "").strip()
    missing = re.match(r"No module named '(jaxfeed|pyarrow)[.']", message + "'")
    if name.endswith("ModuleNotFoundError") and missing:
        return RuntimeError(
            f"{what}: Spark's executors run {python}, which cannot import {missing.group(1)}: "
            f"set PYSPARK_PYTHON to a Python that has jaxfeed and pyarrow (as {sys.executable}) "
            "before the Spark session starts"
        )
    kind = ValueError if name.rsplit(".", 1)[-1] in ("ValueError", "FeatureError") else RuntimeError
    return kind(f"{what}: a Spark executor failed: {name.rsplit('.', 1)[-1]}: {message[:500]}")


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
        sc = running_context(df, "IterableDataset.from_spark")
        self.stored = spark_features(df.schema)
        self.features = target_features(self.stored, features, "from_spark")
        with spark_job(sc, "IterableDataset.from_spark"):
            self.num_partitions = df.rdd.getNumPartitions()
        self._rdd: Any = None

    def tables(self, part: int) -> Iterator[pa.Table]:
        """Partition ``part``'s rows as Arrow tables (one per record batch Spark made)."""
        what = "IterableDataset.from_spark"
        sc = running_context(self.df, what)
        with spark_job(sc, what):
            if self._rdd is None:
                with _no_pandas_warning():
                    self._rdd = self.df.mapInArrow(_ipc, "ipc binary").rdd
            blobs = sc.runJob(self._rdd, _blobs, [part])
        where = f"from_spark (partition {part})"
        for blob in blobs:
            table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
            yield conform(table, self.stored, self.features, where)

    def identity(self) -> dict[str, Any]:
        """What a saved position is valid for: the DataFrame's plan and partitions."""
        return {"spark": int(self.df.semanticHash()), "partitions": self.num_partitions}
