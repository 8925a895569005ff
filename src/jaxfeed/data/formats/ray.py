"""Ray Datasets as datasets and back (the ``ray`` extra): ``Dataset.from_ray``,
``IterableDataset.from_ray``, ``Dataset.to_ray`` and ``IterableDataset.to_ray``.

Ray Data holds a dataset as Arrow blocks in its object store. ``Dataset.from_ray`` sends one
Ray task per block, on the worker that holds it, which casts the block to the features and
writes it as Arrow files (:mod:`jaxfeed.data.formats.shards`) into a new folder of the cache;
the driver collects one small row per file, never the rows, and memory-maps the files in the
dataset's order. The folder is then removed: the mapped files live as long as the dataset maps
them (``save_to_disk`` keeps one). On a cluster of several machines the cache folder must be on
a file system every worker and the driver share.

The features travel in each block's schema metadata, under the key `datasets` uses, so
``ClassLabel`` names, ``Image`` and ``Audio`` survive ``to_ray`` and ``from_ray``; a block
without them gets the features of its Arrow types (an Arrow type with no feature is a
``TypeError`` naming the column); Ray's fixed-shape tensors (``read_images``, numpy batches) become
``Array2D`` ... ``Array5D`` (a fixed-length ``List`` for vectors) without a copy. ``to_ray`` puts the dataset's Arrow tables into the object
store as blocks (one copy into shared memory, no Python rows).

``IterableDataset.from_ray`` streams the blocks (:class:`RayBlocks`) in the dataset's order:
a materialized dataset's blocks are the stream's shards; a lazy one is one shard, executed when
the stream reaches it.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from jaxfeed._base.extras import require
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features, List, Value
from jaxfeed.data.features.array import ARRAY_TYPES
from jaxfeed.data.features.features import METADATA_KEY, feature_from_arrow_type
from jaxfeed.data.features.value import dtype_name
from jaxfeed.data.formats.cache import cache_root
from jaxfeed.data.formats.shards import (
    MAX_SHARD_SIZE,
    Shards,
    ShardWriter,
    conform,
    publish_shards,
    target_features,
)

BLOCK_BYTES = 64 << 20  # Arrow bytes per block that to_ray puts into the object store


def arrow_features(schema: pa.Schema, what: str) -> Features:
    """The features of an Arrow schema: those in its metadata (``datasets``' key), else one per
    Arrow type (Ray's fixed-shape tensors: ``Array2D`` ... ``Array5D``); a type with no feature
    (a map, a decimal, Ray's variable-shaped tensors) raises ``TypeError`` naming the column.

    >>> arrow_features(pa.schema([("x", pa.int16())]), "from_ray")
    Features({'x': Value('int16')})
    >>> arrow_features(pa.schema([("m", pa.map_(pa.string(), pa.int8()))]), "from_ray")
    Traceback (most recent call last):
    ...
    TypeError: from_ray: column 'm' has the Arrow type map<string, int8>, which has no feature (expected numbers, strings, binary, booleans, dates, timestamps, lists or structs of them)
    """
    if METADATA_KEY in (schema.metadata or {}):
        known = Features.from_arrow_schema(schema)  # the stored ones when they name the columns
        with contextlib.suppress(ValueError, TypeError):
            if known.arrow_schema.remove_metadata().equals(schema.remove_metadata()):
                return known
    out = {}
    for field in schema:
        try:
            if isinstance(field.type, pa.ExtensionType) and not hasattr(field.type, "shape"):
                raise ValueError(field.type)
            feature = _tensor_feature(field.type)
            if feature is None and type(field.type).__module__.startswith("ray"):
                raise ValueError(field.type)  # Ray's variable-shaped tensors, other Ray types
            if feature is None:
                feature = feature_from_arrow_type(field.type)
            Features({field.name: feature}).arrow_schema  # noqa: B018 - checks every dtype
        except (ValueError, TypeError, KeyError):
            raise TypeError(
                f"{what}: column {field.name!r} has the Arrow type {field.type}, which has no "
                "feature (expected numbers, strings, binary, booleans, dates, timestamps, lists "
                "or structs of them)"
            ) from None
        out[field.name] = feature
    return Features(out)


def _ray_tensor(t: pa.DataType) -> bool:
    """Ray's fixed-shape tensor type (``ArrowTensorType`` / ``ArrowTensorTypeV2``)."""
    return type(t).__name__.startswith("ArrowTensorType") and type(t).__module__.startswith("ray")


def _tensor_feature(t: pa.DataType) -> Any:
    """The feature of a column of Ray's fixed-shape tensors: ``Array2D`` ... ``Array5D``, or a
    fixed-length ``List`` for vectors (stored as nested fixed-size lists, as those features
    store them); None for any other type."""
    if not _ray_tensor(t):
        return None
    shape, dtype = tuple(int(n) for n in t.shape), dtype_name(t.storage_type.value_type)
    if len(shape) == 1:
        return List(Value(dtype), length=shape[0])
    if 2 <= len(shape) <= 5:
        return ARRAY_TYPES[f"Array{len(shape)}D"](shape=shape, dtype=dtype)
    raise ValueError(t)


def _untensor(column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    """A column of Ray's tensors as nested fixed-size lists (no copy of the values)."""
    shape = column.type.shape
    chunks = []
    for chunk in column.chunks:
        storage = chunk.storage
        if storage.null_count:
            raise ValueError(f"from_ray: column {name!r} holds missing tensors")
        values = storage.flatten()
        for size in reversed(shape):
            values = pa.FixedSizeListArray.from_arrays(values, int(size))
        chunks.append(values)
    if not chunks:
        return pa.chunked_array([], _tensor_feature(column.type).pa_type)
    return pa.chunked_array(chunks)


def _block_table(block: Any) -> pa.Table:
    if not isinstance(block, pa.Table):
        block = pa.Table.from_pandas(block, preserve_index=False)  # a block Ray holds as pandas
    for i, field in enumerate(block.schema):
        if _ray_tensor(field.type):
            column = _untensor(block.column(i), field.name)
            block = block.set_column(i, pa.field(field.name, column.type), column)
    return block


def _write_block(
    block: Any, folder: str, index: int, stored: dict, target: dict, max_size: int
) -> pa.Table:
    """A Ray task: one block cast to the features and written as shards; their stats rows."""
    stored_f, target_f = Features.from_dict(stored), Features.from_dict(target)
    writer = ShardWriter(folder, target_f, index, max_size)
    table = _block_table(block)
    if table.num_rows:  # a block a filter emptied: no rows, and often no columns either
        writer.write(conform(table, stored_f, target_f, f"from_ray (block {index})"))
    return writer.finish()


@contextlib.contextmanager
def _in_order(ds: Any) -> Iterator[None]:
    """Ray Data hands blocks out in its dataset's order while this holds (its own setting,
    ``preserve_order``, restored after), set on the dataset's context and on the current one:
    with the dataset's alone, a resumed ``from_ray`` stream once got block 3 before block 2."""
    import ray.data  # noqa: PLC0415 (optional: the ray extra, present when ds is a Ray Dataset)

    contexts = [ds.context, ray.data.DataContext.get_current()]
    before = [c.execution_options.preserve_order for c in contexts]
    for c in contexts:
        c.execution_options.preserve_order = True
    try:
        yield
    finally:
        for c, value in zip(contexts, before, strict=True):
            c.execution_options.preserve_order = value


def _block_refs(ds: Any) -> Iterator[Any]:
    with _in_order(ds):
        for bundle in ds.iter_internal_ref_bundles():
            for entry in bundle.blocks:
                yield entry[0] if isinstance(entry, tuple) else entry.ref


def ray_schema(ds: Any, features: Any = None) -> pa.Schema:
    """The Arrow schema of a Ray Dataset (computing its first block when Ray does not know it);
    for a dataset without rows whose schema Ray does not know, that of ``features``."""
    schema = ds.schema()
    if schema is None and features is not None:
        return Features(features).arrow_schema
    if schema is None:
        raise ValueError(
            "from_ray: the Ray Dataset has no rows, and Ray does not know its columns: pass "
            "features= (the columns' features) to get a dataset without rows"
        )
    base = getattr(schema, "base_schema", schema)
    if not isinstance(base, pa.Schema):
        raise TypeError(f"from_ray: the Ray Dataset's schema is not an Arrow schema ({base})")
    return base


def write_ray(
    ds: Any,
    features: Any = None,
    cache_dir: str | None = None,
    max_shard_size: int = MAX_SHARD_SIZE,
) -> Shards:
    """The rows of a Ray Dataset written by Ray tasks as Arrow shards, memory-mapped (see the
    module's docstring); the folder is removed once mapped."""
    ray = require("ray", "ray", "from_ray")
    stored = arrow_features(ray_schema(ds, features), "from_ray")
    target = target_features(stored, features, "from_ray")
    root = cache_root(cache_dir) / "ray"
    folder = root / uuid.uuid4().hex[:24]
    written = root / f".{folder.name}.written"
    written.mkdir(parents=True)
    try:
        task = ray.remote(_write_block)
        args = (str(written), stored.to_dict(), target.to_dict(), int(max_shard_size))
        pending = [task.remote(ref, args[0], i, *args[1:]) for i, ref in enumerate(_block_refs(ds))]
        stats = [row for table in ray.get(pending) for row in table.to_pylist()]
        cached = publish_shards(folder, written, stats, target, {"ray": True})
    finally:
        shutil.rmtree(written, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)  # mapped: the files live until unmapped
    return cached._replace(cache_dir=None, cache_files=[])


def _with_features(table: pa.Table, features: Features | None) -> pa.Table:
    if features is None:
        return table
    return table.replace_schema_metadata(features.arrow_schema.metadata)


def ray_from_tables(tables: Iterable[pa.Table], features: Features | None) -> Any:
    """A Ray Dataset of ``tables`` (blocks of about ``BLOCK_BYTES``, the features in their
    metadata), put into the object store one at a time."""
    ray = require("ray", "ray", "to_ray")
    refs, pending, size = [], [], 0
    for table in tables:
        pending.append(table)
        size += table.nbytes
        if size >= BLOCK_BYTES:
            refs.append(ray.put(_with_features(pa.concat_tables(pending), features)))
            pending, size = [], 0
    if pending or not refs:
        if not pending and features is not None:
            pending = [features.arrow_schema.empty_table()]
        if pending:
            refs.append(ray.put(_with_features(pa.concat_tables(pending), features)))
    return ray.data.from_arrow_refs(refs)


def dataset_to_ray(ds: DatasetCore) -> Any:
    """A Ray Dataset of ``ds``'s rows (index mapping applied), in order, with its features."""
    rows = ds.num_rows
    per_row = max(ds.data.nbytes // max(ds.data.num_rows, 1), 1)
    step = max(1, min(rows, BLOCK_BYTES // per_row))
    schema = ds.features.arrow_schema
    tables = (
        ds._internal.arrow(slice(lo, min(lo + step, rows))).cast(schema)
        for lo in range(0, rows, step)
    )
    return ray_from_tables(tables, ds.features)


class RayBlocks:
    """A stream's engine: the blocks of a Ray Dataset in its order, cast to the features."""

    def __init__(self, ds: Any, features: Any = None) -> None:
        self.ray = require("ray", "ray", "from_ray")
        self.ds = ds
        schema = ray_schema(ds, features)
        self.stored = arrow_features(schema, "from_ray")
        self.features = target_features(self.stored, features, "from_ray")
        materialized = type(ds).__name__ == "MaterializedDataset"
        self.blocks = list(_block_refs(ds)) if materialized else None
        self.num_shards = len(self.blocks) if self.blocks is not None else 1
        self.schema = schema

    def tables(self, index: int) -> Iterator[pa.Table]:
        """Block ``index`` (a materialized dataset), or every block (a lazy one) as tables."""
        refs = [self.blocks[index]] if self.blocks is not None else _block_refs(self.ds)
        for i, ref in enumerate(refs):
            table = _block_table(self.ray.get(ref))
            if table.num_rows:  # a block a filter emptied has no rows, and often no columns
                yield conform(table, self.stored, self.features, f"from_ray (block {index + i})")

    def identity(self) -> dict[str, Any]:
        """What a saved position is valid for: the schema and the number of blocks."""
        return {"ray": str(self.schema), "blocks": self.num_shards}
