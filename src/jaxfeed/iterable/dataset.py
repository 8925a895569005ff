"""`IterableDataset`: rows read on the fly from files, never held whole (``streaming=True``).

A stream is a **source** (a list of independently readable *units*: files, row groups of Parquet
files, or row ranges of an in-memory dataset) followed by **steps** (map, filter, shuffle, take,
skip, column edits, batch). Data flows as Arrow tables of a few MB, so per-row Python work only
happens where a user function asks for rows. Every stage can report its position, so a stream
resumes exactly where it stopped (:meth:`IterableDataset.state_dict`), shuffle buffer included.

``shard`` and :func:`split_dataset_by_node` split the *units*: each process opens only its own
files or row groups. When there are fewer units than processes, every process reads everything
and keeps every ``world_size``-th row (as `datasets` does).

>>> from jaxfeed import Dataset
>>> from jaxfeed.iterable import IterableDataset
>>> ids = IterableDataset.from_dataset(Dataset.from_dict({"x": list(range(6))}))
>>> [r["x"] for r in ids.shuffle(seed=0, buffer_size=2).take(3)]
[4, 1, 2]
>>> [b["x"].tolist() for b in ids.with_format("numpy").iter(batch_size=4)]
[[0, 1, 2, 3], [4, 5]]
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jaxfeed import ops
from jaxfeed.core import DatasetCore
from jaxfeed.features import Features
from jaxfeed.features.features import METADATA_KEY
from jaxfeed.features.sequence import List
from jaxfeed.formatting import make_formatter
from jaxfeed.io.batches import file_batches, file_schema, parquet_file
from jaxfeed.io.files import file_format, source_identity
from jaxfeed.io.validate import confine_media_paths, holds_media, media_root, short

READ_ROWS = 10_000  # rows per unit / per table when streaming an in-memory dataset
STATE_VERSION = 1
READ_AHEAD_UNITS = 2  # Parquet units (row groups, files) decoding in threads ahead of the stream
READ_AHEAD_BYTES = 64 << 20  # ...holding at most this many uncompressed bytes
FIRST_BYTES = 1 << 19  # tables of the first unit a stream reads (later ones: io.batches' size)


# ---------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Unit:
    """One independently readable piece: a file, some row groups of a Parquet file, or a row
    range of an in-memory dataset."""

    path: str | None = None
    row_groups: tuple[int, ...] | None = None
    rows: tuple[int, int] | None = None
    generator: bool = False


@dataclass
class Source:
    """Where a stream's rows come from, and which of them this process reads."""

    units: list[Unit]
    fmt: str | None = None
    storage_options: dict | None = None
    dataset: DatasetCore | None = None
    generator: tuple[Callable, dict, Features | None] | None = None  # from_generator
    features: Features | None = None  # cast every table to these (load_dataset(features=))
    columns: list[str] | None = None  # read only these (pushed down to Parquet)
    stride: tuple[int, int] | None = None  # (world_size, rank): keep every world_size-th row
    shuffle_seed: int | None = None  # shuffle the unit order every epoch (shuffle())
    shuffled: bool = False
    footers: dict = field(default_factory=dict)  # Parquet metadata by path, read once
    media_root: str | None = None  # where path-only Image/Audio cells may point (from_files)
    identities: dict = field(default_factory=dict)  # files' size and version, taken when opened

    def identity(self) -> dict[str, Any]:
        """What a saved position is only valid for: each file's path, size and modification
        time or ETag (taken when the stream was made), and the layout of the units read (files,
        row groups, shards, columns, shuffle)."""
        if self.dataset is not None:
            content: dict[str, Any] = {
                "rows": self.dataset.num_rows,
                "features": self.dataset.features.to_dict(),
            }
        elif self.generator is not None:
            function = self.generator[0]
            content = {"generator": getattr(function, "__qualname__", type(function).__name__)}
        else:
            paths = list(dict.fromkeys(u.path for u in self.units))
            content = {"files": [self.file_identity(p) for p in paths]}
        layout = [
            [[u.path, u.row_groups, u.rows, u.generator] for u in self.units],
            self.fmt,
            self.columns,
            self.stride,
            self.shuffled,
            self.shuffle_seed,
        ]
        digest = hashlib.sha256(json.dumps(layout, default=str).encode()).hexdigest()[:16]
        return {**content, "layout": digest}

    def file_identity(self, path: str) -> list:
        if path not in self.identities:
            found = source_identity(path, self.storage_options)
            self.identities[path] = [path, found["size"], found["version"]]
        return self.identities[path]

    def footer(self, path: str) -> pq.FileMetaData:
        if path not in self.footers:
            with parquet_file(path, self.storage_options) as f:
                self.footers[path] = f.metadata
        return self.footers[path]

    def order(self, epoch: int) -> list[Unit]:
        if not self.shuffled or len(self.units) < 2:
            return list(self.units)
        rng = np.random.default_rng(_seed(self.shuffle_seed, epoch, 1))
        return [self.units[i] for i in rng.permutation(len(self.units))]

    def read(self, unit: Unit, skip: int, batch_bytes: int | None = None) -> Iterator[pa.Table]:
        """The unit's rows after its first ``skip`` rows, as tables of a few MB (about
        ``batch_bytes`` for files)."""
        if unit.generator:
            yield from self._generated(skip)
            return
        if unit.rows is not None:
            start, stop = unit.rows
            ds = self.dataset
            for lo in range(start + skip, stop, READ_ROWS):
                table = ds._internal.arrow(slice(lo, min(lo + READ_ROWS, stop)), self.columns)
                yield table.replace_schema_metadata(ds.features.arrow_schema.metadata)
            return
        row_groups = unit.row_groups
        parquet = (self.fmt or file_format(unit.path)) == "parquet"
        if skip and parquet:
            row_groups, skip = self._skip_row_groups(unit, skip)
        batches = (
            self._parquet_batches(unit.path, row_groups, batch_bytes)
            if parquet
            else file_batches(
                unit.path,
                self.fmt,
                columns=self.columns,
                storage_options=self.storage_options,
                batch_bytes=batch_bytes,
            )
        )
        for batch in batches:
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            table = pa.Table.from_batches([batch.slice(skip) if skip else batch])
            skip = 0
            yield self._confine(self._cast(table, unit.path), unit.path)

    def _generated(self, skip: int) -> Iterator[pa.Table]:
        """A generator cannot seek: it is run again and its first ``skip`` rows are dropped."""
        function, kwargs, features = self.generator
        rows: list[dict] = []
        for i, row in enumerate(function(**kwargs)):
            if i < skip:
                continue
            rows.append(row)
            if len(rows) >= READ_ROWS:
                chunk = DatasetCore.from_list(rows, features=features)
                features = chunk.features
                yield chunk.data
                rows = []
        if rows:
            yield DatasetCore.from_list(rows, features=features).data

    def read_ahead(
        self, units: list[Unit], skip: int, lookahead: Lookahead | None = None
    ) -> Iterator[Iterator[pa.Table]]:
        """:meth:`read` for each of ``units`` in turn (``skip`` applies to the first), while the
        next few Parquet units decode in threads (Parquet decoding releases the GIL, so a stream
        reads with more than one core). At most ``READ_AHEAD_UNITS`` units and
        ``READ_AHEAD_BYTES`` (uncompressed) are decoded ahead; larger units are read lazily.

        With a ``lookahead`` (a reader going on into the next epoch), its thread pool decodes,
        within the same bounds, the first units of ``lookahead.following`` (the next epoch's
        order) once this epoch's last units are under way, and this pass starts from the units a
        previous pass decoded for it, so the cores do not wait at an epoch's end."""
        if lookahead is None:
            with ThreadPoolExecutor(READ_AHEAD_UNITS, thread_name_prefix="jaxfeed-read") as pool:
                yield from self._read_ahead(units, skip, pool, None)
        else:
            yield from self._read_ahead(units, skip, lookahead.pool(), lookahead)

    def _read_ahead(
        self, units: list[Unit], skip: int, pool: ThreadPoolExecutor, lookahead: Lookahead | None
    ) -> Iterator[Iterator[pa.Table]]:
        ahead: dict[int, Any] = {}
        following: list[Unit] = []
        if lookahead is not None:
            ahead = lookahead.adopt(units, skip)
            following = lookahead.following
        n = len(units)
        every = units + following  # this epoch's units, then the next epoch's
        sizes: dict[int, int] = {}

        def size(k: int) -> int:  # footers are read only for the units about to be read
            if k not in sizes:
                sizes[k] = self._ahead_bytes(every[k])
            return sizes[k]

        try:
            for i, unit in enumerate(units):
                j, held = i + 1, sum(size(k) for k in ahead)
                while j < len(every) and j <= i + READ_AHEAD_UNITS:
                    if j in ahead:
                        pass
                    elif size(j) and held + size(j) <= READ_AHEAD_BYTES:
                        ahead[j] = pool.submit(lambda u=every[j]: list(self.read(u, 0)))
                        held += size(j)
                    elif j >= n:
                        break  # the next epoch's units in order, none skipped
                    j += 1
                if i in ahead:
                    yield iter(ahead.pop(i).result())
                else:  # the first unit comes in small tables: the first rows come sooner
                    yield self.read(unit, skip, FIRST_BYTES if i == 0 else None)
                skip = 0
            if lookahead is not None:  # the next epoch's units under way, for its pass
                lookahead.hand_over(following, {k - n: f for k, f in ahead.items() if k >= n})
                ahead = {k: f for k, f in ahead.items() if k < n}
        finally:  # abandoned: do not decode what is still queued
            for future in ahead.values():
                future.cancel()

    def _ahead_bytes(self, unit: Unit) -> int:
        """Uncompressed bytes of a Parquet unit (0: not decoded ahead)."""
        if unit.path is None or (self.fmt or file_format(unit.path)) != "parquet":
            return 0
        meta = self.footer(unit.path)
        groups = range(meta.num_row_groups) if unit.row_groups is None else unit.row_groups
        total = sum(meta.row_group(g).total_byte_size for g in groups)
        return total if 0 < total <= READ_AHEAD_BYTES else 0

    def _parquet_batches(
        self, path: str, row_groups: list[int] | None, batch_bytes: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        return file_batches(
            path,
            self.fmt,
            columns=self.columns,
            row_groups=row_groups,
            batch_bytes=batch_bytes,
            storage_options=self.storage_options,
            metadata=self.footer(path),
        )

    def _skip_row_groups(self, unit: Unit, skip: int) -> tuple[list[int], int]:
        meta = self.footer(unit.path)
        groups = (
            list(unit.row_groups)
            if unit.row_groups is not None
            else list(range(meta.num_row_groups))
        )
        while groups and meta.row_group(groups[0]).num_rows <= skip:
            skip -= meta.row_group(groups.pop(0)).num_rows
        return groups, skip

    def _confine(self, table: pa.Table, path: str) -> pa.Table:
        """Path-only media cells of a file resolved inside ``media_root`` (others refused)."""
        features = self.features
        if features is None and METADATA_KEY in (table.schema.metadata or {}):
            features = Features.from_arrow_schema(table.schema)
        if features is None or not any(holds_media(f) for f in features.values()):
            return table
        return confine_media_paths(table, features, self.media_root, path)

    def _cast(self, table: pa.Table, path: str) -> pa.Table:
        if self.features is None:
            return table
        features = self.features
        if self.columns is not None:
            features = Features({c: features[c] for c in self.columns if c in features})
        if set(features) != set(table.column_names):
            raise ValueError(
                f"features {list(features)} do not match the columns {table.column_names} of {path}"
            )
        return ops.cast(DatasetCore.from_arrow(table), features).data


class Lookahead:
    """Decoding that goes on from one pass of a stream into the next (a loader's read-ahead):
    a thread pool kept across passes, the next pass's unit order (``following``, set before each
    pass), and the units of it already decoding, handed from one pass to the next. ``close()``
    stops the pool.

    >>> from jaxfeed.iterable import Lookahead, Unit
    >>> lookahead, units = Lookahead(), [Unit(path="a.parquet", row_groups=(0,))]
    >>> lookahead.hand_over(units, {0: lookahead.pool().submit(sum, [1, 2])})
    >>> [f.result() for f in lookahead.adopt(units, 0).values()]  # the pass it was started for
    [3]
    >>> lookahead.close()
    """

    def __init__(self) -> None:
        self.following: list[Unit] = []
        self._pool: ThreadPoolExecutor | None = None
        self._units: list[Unit] = []
        self._ahead: dict[int, Any] = {}

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(READ_AHEAD_UNITS, thread_name_prefix="jaxfeed-read")
        return self._pool

    def hand_over(self, units: list[Unit], ahead: dict[int, Any]) -> None:
        self._drop()
        self._units, self._ahead = units, ahead

    def adopt(self, units: list[Unit], skip: int) -> dict[int, Any]:
        """The units decoding for a pass over ``units`` from row ``skip`` (none if it is another
        pass than the one they were started for)."""
        ahead = self._ahead if not skip and units == self._units else {}
        if not ahead:
            self._drop()
        self._units, self._ahead = [], {}
        return ahead

    def _drop(self) -> None:
        for future in self._ahead.values():
            future.cancel()
        self._units, self._ahead = [], {}

    def close(self) -> None:
        self._drop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _seed(seed: int | None, epoch: int, salt: int) -> list[int] | None:
    return None if seed is None else [int(seed), int(epoch), salt]


class _SourceStage:
    def __init__(
        self, source: Source, epoch: int, state: dict | None, lookahead: Lookahead | None = None
    ) -> None:
        self.source = source
        self.lookahead = lookahead
        self.units = source.order(epoch)
        self.unit = 0  # index of the unit being read
        self.offset = 0  # rows of that unit already passed on (before striding)
        self.row = 0  # rows of the epoch passed on (before striding): the stride's phase
        if state:
            self.unit, self.offset, self.row = state["unit"], state["offset"], state["row"]

    def run(self) -> Iterator[pa.Table]:
        stride = self.source.stride
        for tables in self.source.read_ahead(self.units[self.unit :], self.offset, self.lookahead):
            for table in tables:
                start = self.row
                self.offset += table.num_rows
                self.row += table.num_rows
                if stride is not None:
                    world, rank = stride
                    first = (rank - start) % world
                    table = table.take(np.arange(first, table.num_rows, world))
                if table.num_rows:
                    yield table
            self.unit, self.offset = self.unit + 1, 0

    def snapshot(self) -> dict:
        return {"unit": self.unit, "offset": self.offset, "row": self.row}


# ---------------------------------------------------------------------------------- steps
class _Pending:
    """Rows waiting to form groups of an exact size (in map, filter, batch and the loader)."""

    def __init__(self, tables: list[pa.Table] | None = None) -> None:
        self.tables = [t for t in tables or [] if t.num_rows]
        self.count = sum(t.num_rows for t in self.tables)

    def push(self, table: pa.Table) -> None:
        if table.num_rows:
            self.tables.append(table)
            self.count += table.num_rows

    def pop(self, n: int | None = None) -> pa.Table:
        """The first ``n`` rows (all when None) as one table."""
        merged = _concat(self.tables)
        n = merged.num_rows if n is None else n
        rest = merged.slice(n)
        self.tables = [rest] if rest.num_rows else []
        self.count = rest.num_rows
        return merged.slice(0, n)

    def snapshot(self) -> list[pa.Table]:
        return list(self.tables)


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    return pa.concat_tables([t.replace_schema_metadata(first.metadata) for t in tables])


@dataclass(frozen=True)
class _Step:
    """A transformation of the stream; ``stage`` builds its running state for one pass."""

    def stage(self, epoch: int, state: dict | None) -> Any:
        return _StatelessStage(self)

    def apply(self, table: pa.Table) -> pa.Table:
        raise NotImplementedError


class _StatelessStage:
    def __init__(self, step: _Step) -> None:
        self.step = step

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for table in upstream:
            out = self.step.apply(table)
            if out.num_rows:
                yield out

    def snapshot(self) -> dict:
        return {}


def _dataset(table: pa.Table, fmt: tuple) -> DatasetCore:
    ds = DatasetCore(table)
    type_, columns, all_columns, kwargs = fmt
    if type_ is not None or columns is not None:
        ds.set_format(type_, columns, all_columns, **kwargs)
    return ds


@dataclass(frozen=True)
class _Columns(_Step):
    op: str
    args: tuple

    def apply(self, table: pa.Table) -> pa.Table:
        ds = DatasetCore(table)
        if self.op == "select":
            return ops.select_columns(ds, list(self.args)).data
        if self.op == "remove":
            return ops.remove_columns(ds, list(self.args)).data
        return ops.rename_columns(ds, dict(self.args)).data


@dataclass(frozen=True)
class _Cast(_Step):
    """``cast`` / ``cast_column``: the columns converted to ``features`` (values checked)."""

    features: Features

    def apply(self, table: pa.Table) -> pa.Table:
        ds = DatasetCore(table)
        for name, feature in self.features.items():
            ds = ops.cast_column(ds, name, feature)
        return ds.data


@dataclass(frozen=True)
class _Apply(_Step):
    """``map`` or ``filter``: per row on any chunk, or on groups of exactly ``batch_size`` rows."""

    kind: str
    function: Callable
    batched: bool = False
    batch_size: int | None = 1000
    with_indices: bool = False
    input_columns: Any = None
    remove_columns: Any = None
    features: Any = None
    fn_kwargs: dict | None = None
    drop_last_batch: bool = False
    fmt: tuple = (None, None, False, {})
    # python format: columns this map returned as numpy arrays, and those of the steps before it
    arrays: set = field(default_factory=set, compare=False)
    upstream: tuple = field(default=(), compare=False)

    def stage(self, epoch: int, state: dict | None) -> _ApplyStage:
        return _ApplyStage(self, state)

    def call(self, table: pa.Table, index: int) -> pa.Table:
        ds = _dataset(table, self.fmt)
        function = self.function
        if self.fmt[0] is None and not self.input_columns:
            function = _with_arrays(function, self, table.schema)
        if self.with_indices and index:
            function = _offset_indices(function, index, self.batched)
        common = dict(
            with_indices=self.with_indices,
            input_columns=self.input_columns,
            batched=self.batched,
            batch_size=None,
            fn_kwargs=self.fn_kwargs,
        )
        if self.kind == "filter":
            return ops.flatten_indices(ops.filter(ds, function, **common)).data
        return ops.map(
            ds, function, remove_columns=self.remove_columns, features=self.features, **common
        ).data


def array_columns(steps: Sequence[_Step]) -> set[str]:
    """Columns that python-format ``map`` functions of ``steps`` returned as numpy arrays."""
    return set().union(*(s.arrays for s in steps if isinstance(s, _Apply)))


def as_arrays(values: list, pa_type: pa.DataType) -> list:
    """Stored lists back as the numpy arrays a ``map`` function returned (their stored dtype)."""
    inner = pa_type
    while (
        pa.types.is_list(inner)
        or pa.types.is_large_list(inner)
        or pa.types.is_fixed_size_list(inner)
    ):
        inner = inner.value_type
    dtype = (
        inner.to_pandas_dtype()
        if pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_boolean(inner)
        else object
    )
    return [None if v is None else np.asarray(v, dtype=dtype) for v in values]


def _with_arrays(function: Callable, step: _Apply, schema: pa.Schema) -> Callable:
    """``function`` seeing (and, for ``map``, recording) the columns held as numpy arrays, as
    `datasets` passes them through a python-format stream."""
    seen = set().union(*step.upstream) if step.upstream else set()
    given = [c for c in seen if c in schema.names]

    def restore(data: dict) -> dict:
        if not given:
            return data
        data = dict(data)
        for c in given:
            if step.batched:
                data[c] = as_arrays(list(data[c]), schema.field(c).type)
            else:
                data[c] = as_arrays([data[c]], schema.field(c).type)[0]
        return data

    def record(result: Any) -> Any:
        if step.kind == "map" and isinstance(result, dict):
            for name, value in result.items():
                if step.batched:
                    if (isinstance(value, np.ndarray) and value.ndim > 1) or (
                        isinstance(value, list | tuple)
                        and value
                        and all(isinstance(v, np.ndarray) and v.ndim for v in value)
                    ):
                        step.arrays.add(name)
                elif isinstance(value, np.ndarray) and value.ndim:
                    step.arrays.add(name)
        return result

    def call(first: dict, *args: Any, **kwargs: Any) -> Any:
        return record(function(restore(first), *args, **kwargs))

    return call


def _offset_indices(function: Callable, offset: int, batched: bool) -> Callable:
    def shifted(*args: Any, **kwargs: Any) -> Any:
        *head, indices = args
        moved = [i + offset for i in indices] if batched else indices + offset
        return function(*head, moved, **kwargs)

    return shifted


class _ApplyStage:
    def __init__(self, step: _Apply, state: dict | None) -> None:
        self.step = step
        self.index = state["index"] if state else 0  # input rows seen: with_indices
        self.pending = _Pending(state["pending"] if state else None)

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        step = self.step
        size = step.batch_size if step.batched and step.batch_size else None
        for table in upstream:
            if size is None:
                start, self.index = self.index, self.index + table.num_rows
                out = step.call(table, start)
                if out.num_rows:
                    yield out
                continue
            self.pending.push(table)
            while self.pending.count >= size:
                group = self.pending.pop(size)
                start, self.index = self.index, self.index + size
                out = step.call(group, start)
                if out.num_rows:
                    yield out
        if self.pending.count and not step.drop_last_batch:
            group = self.pending.pop()
            start, self.index = self.index, self.index + group.num_rows
            out = step.call(group, start)
            if out.num_rows:
                yield out
        self.pending = _Pending()

    def snapshot(self) -> dict:
        return {"index": self.index, "pending": self.pending.snapshot()}


@dataclass(frozen=True)
class _Shuffle(_Step):
    seed: int | None
    buffer_size: int

    def stage(self, epoch: int, state: dict | None) -> _ShuffleStage:
        return _ShuffleStage(self, epoch, state)


class _ShuffleStage:
    """A buffer of ``buffer_size`` rows; every arriving table swaps rows with it at random."""

    def __init__(self, step: _Shuffle, epoch: int, state: dict | None) -> None:
        self.size = step.buffer_size
        self.rng = np.random.default_rng(_seed(step.seed, epoch, 2))
        self.buffer = _Pending()
        if state:
            self.rng.bit_generator.state = state["rng"]
            self.buffer = _Pending(state["buffer"])

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for table in upstream:
            self.buffer.push(table)
            if self.buffer.count < 2 * self.size:
                continue  # amortise: mix only when the arrivals match the buffer in size
            merged = self.buffer.pop()
            order = self.rng.permutation(merged.num_rows)
            keep = merged.num_rows - self.size
            self.buffer = _Pending([merged.take(order[keep:])])
            yield merged.take(order[:keep])
        if self.buffer.count:
            merged = self.buffer.pop()
            yield merged.take(self.rng.permutation(merged.num_rows))

    def snapshot(self) -> dict:
        return {
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "buffer": self.buffer.snapshot(),
        }


@dataclass(frozen=True)
class _Limit(_Step):
    """``take(n)`` (``skip=False``) or ``skip(n)``."""

    n: int
    skip: bool

    def stage(self, epoch: int, state: dict | None) -> _LimitStage:
        return _LimitStage(self, state)


class _LimitStage:
    def __init__(self, step: _Limit, state: dict | None) -> None:
        self.step = step
        self.seen = state["seen"] if state else 0

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        n = self.step.n
        if not self.step.skip and self.seen >= n:
            return
        for table in upstream:
            start = self.seen
            self.seen += table.num_rows
            if self.step.skip:
                if self.seen > n:
                    yield table.slice(max(0, n - start))
            else:
                yield table.slice(0, n - start)
                if self.seen >= n:
                    self.seen = n
                    return

    def snapshot(self) -> dict:
        return {"seen": self.seen}


@dataclass(frozen=True)
class _Batch(_Step):
    batch_size: int
    drop_last_batch: bool

    def stage(self, epoch: int, state: dict | None) -> _BatchStage:
        return _BatchStage(self, state)


class _BatchStage:
    def __init__(self, step: _Batch, state: dict | None) -> None:
        self.step = step
        self.pending = _Pending(state["pending"] if state else None)

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        size = self.step.batch_size
        for table in upstream:
            self.pending.push(table)
            while self.pending.count >= size:
                yield _as_one_row(self.pending.pop(size))
        if self.pending.count and not self.step.drop_last_batch:
            yield _as_one_row(self.pending.pop())

    def snapshot(self) -> dict:
        return {"pending": self.pending.snapshot()}


@dataclass(frozen=True)
class _BatchBy(_Step):
    """``batch(by_column=)``: each run of successive rows equal in ``columns`` becomes one row."""

    columns: tuple[str, ...]

    def stage(self, epoch: int, state: dict | None) -> _BatchByStage:
        return _BatchByStage(self, state)


class _BatchByStage:
    def __init__(self, step: _BatchBy, state: dict | None) -> None:
        self.columns = step.columns
        self.pending = _Pending(state["pending"] if state else None)  # the open run

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for table in upstream:
            missing = [c for c in self.columns if c not in table.column_names]
            if missing:
                raise ValueError(
                    f"batch(by_column=): columns {missing} are not in the stream's columns "
                    f"{table.column_names}"
                )
            self.pending.push(table)
            merged = self.pending.pop()
            cuts = _run_starts(merged, self.columns)
            for lo, hi in itertools.pairwise(cuts):
                yield _as_one_row(merged.slice(lo, hi - lo))
            self.pending = _Pending([merged.slice(cuts[-1])])
        if self.pending.count:
            yield _as_one_row(self.pending.pop())

    def snapshot(self) -> dict:
        return {"pending": self.pending.snapshot()}


def _run_starts(table: pa.Table, columns: Sequence[str]) -> list[int]:
    """Row numbers where a run of equal ``columns`` values starts (0 first)."""
    n = table.num_rows
    if n < 2:
        return [0]
    change = np.zeros(n - 1, dtype=bool)
    for name in columns:
        values = table.column(name)
        differs = pc.not_equal(values.slice(1), values.slice(0, n - 1))
        # a null compares as no change: it joins the run before it, as in `datasets`
        change |= pc.fill_null(differs, False).to_numpy(zero_copy_only=False)
    return [0, *(np.nonzero(change)[0] + 1).tolist()]


def _as_one_row(table: pa.Table) -> pa.Table:
    """``n`` rows as one row whose columns are lists of the ``n`` values."""
    features = Features.from_arrow_schema(table.schema)
    out = Features({k: List(v) for k, v in features.items()})
    offsets = pa.array([0, table.num_rows], type=pa.int32())
    arrays = [
        pa.ListArray.from_arrays(offsets, table.column(c).combine_chunks())
        for c in table.column_names
    ]
    schema = out.arrow_schema
    return pa.Table.from_arrays(
        [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, schema, strict=True)],
        schema=schema,
    )


# ---------------------------------------------------------------------------------- one pass
class Stream:
    """One pass over a stream: tables in order, and :meth:`snapshot` of the position reached."""

    def __init__(
        self, ds: IterableDataset, state: dict | None = None, lookahead: Lookahead | None = None
    ) -> None:
        steps = state["steps"] if state else [None] * len(ds._steps)
        if len(steps) != len(ds._steps):
            raise ValueError(
                f"the saved stream state has {len(steps)} steps but this dataset has {len(ds._steps)}"
            )
        self.source = _SourceStage(
            ds._source, ds._epoch, state["source"] if state else None, lookahead
        )
        if lookahead is not None:  # the next pass's order, for decoding ahead into it
            lookahead.following = ds._source.order(ds._epoch + 1)
        self.stages = [s.stage(ds._epoch, st) for s, st in zip(ds._steps, steps, strict=True)]

    def __iter__(self) -> Iterator[pa.Table]:
        tables = self.source.run()
        for stage in self.stages:
            tables = stage.run(tables)
        return tables

    def snapshot(self) -> dict:
        """The position after the last table handed out (tables in it are referenced, not copied)."""
        return {
            "source": self.source.snapshot(),
            "steps": [s.snapshot() for s in self.stages],
        }


def encode_state(value: Any) -> Any:
    """A snapshot as JSON values: Arrow tables become base64 Arrow IPC streams."""
    if isinstance(value, pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write_table(value)
        return {"__arrow__": base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")}
    if isinstance(value, dict):
        return {k: encode_state(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_state(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    return value


def decode_state(value: Any) -> Any:
    """Undo :func:`encode_state` (Arrow IPC data only: nothing is unpickled or executed)."""
    if isinstance(value, dict):
        if set(value) == {"__arrow__"}:
            data = base64.b64decode(value["__arrow__"])
            return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        return {k: decode_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_state(v) for v in value]
    return value


# ---------------------------------------------------------------------------------- the dataset
class IterableDataset:
    """Rows produced on the fly, with the `datasets` streaming API.

    Build one with ``load_dataset(..., streaming=True)``, :meth:`from_files` or
    :meth:`from_dataset`; feed it to :class:`jaxfeed.DataLoader` for device batches.

    >>> from jaxfeed import IterableDataset
    >>> def rows():
    ...     yield from ({"x": i} for i in range(10))
    >>> ds = IterableDataset.from_generator(rows).map(lambda r: {"y": r["x"] * 2}).skip(1)
    >>> [r["y"] for r in ds.take(3)]
    [2, 4, 6]
    """

    def __init__(
        self,
        source: Source,
        steps: Sequence[_Step] = (),
        features: Features | None = None,
        fmt: tuple = (None, None, False, {}),
    ) -> None:
        self._source = source
        self._steps = tuple(steps)
        self._features = features
        self._fmt = fmt
        self._epoch = 0
        self._resume: dict | None = None
        self._stream: Stream | None = None
        self._rows: tuple[pa.Table, int] | None = None  # __iter__'s table, rows yielded of it

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_files(
        cls,
        files: Sequence[str],
        fmt: str | None = None,
        features: Features | None = None,
        storage_options: dict | None = None,
        split_row_groups: bool = True,
        data_dir: str | os.PathLike | None = None,
    ) -> IterableDataset:
        """Stream ``files`` (Parquet, CSV, JSON Lines, Arrow; local paths or URLs).

        Each Parquet row group is a unit of its own (``split_row_groups``), so ``shard`` and
        :func:`split_dataset_by_node` can give processes disjoint row groups of one file.
        Image/Audio cells stored as a path only are read from inside ``data_dir`` (default: the
        folder holding every local file) and refused elsewhere
        (:func:`~jaxfeed.io.validate.confine_media_paths`).
        """
        files = [str(f) for f in files]
        features = None if features is None else Features(features)
        source = Source([], fmt, storage_options, features=features)
        source.media_root = media_root(files, data_dir)
        for f in files:  # the files' versions now: a saved position is valid for these only
            source.file_identity(f)
        for f in files:
            if split_row_groups and (fmt or file_format(f)) == "parquet":
                n = source.footer(f).num_row_groups
                source.units += [Unit(path=f, row_groups=(g,)) for g in range(n)]
            else:
                source.units.append(Unit(path=f))
        if features is None and files and (fmt or file_format(files[0])) in ("parquet", "arrow"):
            # The schema is in the footer (Parquet) or memory-mapped (Arrow): known without rows.
            if (fmt or file_format(files[0])) == "parquet":
                schema = source.footer(files[0]).schema.to_arrow_schema()
            else:
                schema = file_schema(files[0], fmt, storage_options)
            known = Features.from_arrow_schema(schema)
        else:
            known = features
        return cls(source, features=known)

    @classmethod
    def from_dataset(
        cls, ds: DatasetCore, rows_per_unit: int = READ_ROWS, num_shards: int | None = None
    ) -> IterableDataset:
        """Stream an in-memory (or memory-mapped) dataset, in its current row order.

        ``num_shards=n`` makes n units of contiguous rows (sizes differing by at most one, as
        `datasets`' ``to_iterable_dataset(num_shards=n)``), so ``shard`` gives n parts.
        """
        if num_shards is not None and num_shards > 1:
            per, extra = divmod(ds.num_rows, num_shards)
            bounds = np.cumsum([0] + [per + (i < extra) for i in range(num_shards)])
            units = [Unit(rows=(int(lo), int(hi))) for lo, hi in itertools.pairwise(bounds)]
        else:
            units = [
                Unit(rows=(lo, min(lo + rows_per_unit, ds.num_rows)))
                for lo in range(0, ds.num_rows, rows_per_unit)
            ]
        return cls(Source(units, dataset=ds), features=ds.features)

    @classmethod
    def from_generator(
        cls,
        generator: Callable[..., Iterator[dict]],
        features: Features | None = None,
        gen_kwargs: dict | None = None,
    ) -> IterableDataset:
        """Rows from a generator function, read lazily in chunks of 10,000 rows (a resumed
        stream runs the generator again and skips the rows already read).

        >>> from jaxfeed import IterableDataset
        >>> def rows():
        ...     yield from ({"x": i} for i in range(3))
        >>> [r["x"] for r in IterableDataset.from_generator(rows)]
        [0, 1, 2]
        """
        features = None if features is None else Features(features)
        source = Source(
            [Unit(generator=True)], generator=(generator, dict(gen_kwargs or {}), features)
        )
        return cls(source, features=features)

    def _replace(self, **changes: Any) -> IterableDataset:
        out = IterableDataset(
            changes.get("source", self._source),
            changes.get("steps", self._steps),
            changes.get("features", self._features),
            changes.get("fmt", self._fmt),
        )
        out._epoch = self._epoch
        return out

    def _array_sets(self) -> tuple[set, ...]:
        """The sets where earlier ``map`` steps record the columns they returned as arrays."""
        return tuple(s.arrays for s in self._steps if isinstance(s, _Apply))

    def _then(self, step: _Step, features: Features | None = None) -> IterableDataset:
        return self._replace(steps=(*self._steps, step), features=features)

    # ------------------------------------------------------------------ properties
    @property
    def features(self) -> Features | None:
        """The columns' features, or None when a ``map`` made them unknown until read."""
        return self._features

    @property
    def column_names(self) -> list[str] | None:
        return None if self._features is None else list(self._features)

    @property
    def num_shards(self) -> int:
        """Independently readable units (files or Parquet row groups) this process reads."""
        return len(self._source.units)

    n_shards = num_shards

    def __repr__(self) -> str:
        return f"IterableDataset({{\n    features: {self.column_names},\n    num_shards: {self.num_shards}\n}})"

    # ------------------------------------------------------------------ formats
    def with_format(
        self,
        type: str | None = None,
        columns: Any = None,
        output_all_columns: bool = False,
        **kwargs: Any,
    ) -> IterableDataset:
        """Rows and batches as python (default), numpy, jax, arrow or pandas values."""
        make_formatter(type, **kwargs)  # validate now, not at the first row
        if isinstance(columns, str):
            columns = [columns]
        return self._replace(fmt=(type, columns, output_all_columns, kwargs))

    # ------------------------------------------------------------------ steps
    def map(
        self,
        function: Callable | None = None,
        with_indices: bool = False,
        input_columns: str | Sequence[str] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        drop_last_batch: bool = False,
        remove_columns: str | Sequence[str] | None = None,
        features: Features | None = None,
        fn_kwargs: dict | None = None,
    ) -> IterableDataset:
        """Apply ``function`` to every row, or to batches of ``batch_size`` rows (``batched``),
        as rows are read; the function sees the dataset's format (numpy: vectorised).

        >>> from jaxfeed import Dataset
        >>> from jaxfeed.iterable import IterableDataset
        >>> ids = IterableDataset.from_dataset(Dataset.from_dict({"x": [1, 2, 3]}))
        >>> [r["y"] for r in ids.map(lambda b: {"y": [v * 10 for v in b["x"]]}, batched=True)]
        [10, 20, 30]
        """
        step = _Apply(
            "map",
            function if function is not None else (lambda *a: None),
            batched,
            batch_size,
            with_indices,
            input_columns,
            remove_columns,
            None if features is None else Features(features),
            fn_kwargs,
            drop_last_batch,
            self._fmt,
            upstream=self._array_sets(),
        )
        return self._then(step, None if features is None else Features(features))

    def filter(
        self,
        function: Callable,
        with_indices: bool = False,
        input_columns: str | Sequence[str] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        fn_kwargs: dict | None = None,
    ) -> IterableDataset:
        """Rows for which ``function`` returns True (a list of bools per batch when ``batched``)."""
        step = _Apply(
            "filter",
            function,
            batched,
            batch_size,
            with_indices,
            input_columns,
            fn_kwargs=fn_kwargs,
            fmt=self._fmt,
            upstream=self._array_sets(),
        )
        return self._then(step, self._features)

    def shuffle(
        self, seed: int | None = None, generator: Any = None, buffer_size: int = 1000
    ) -> IterableDataset:
        """Approximate shuffle: rows pass through a random buffer of ``buffer_size`` rows, and the
        order of the files / row groups is shuffled too. ``set_epoch`` reshuffles."""
        if generator is not None and seed is None:
            seed = int(np.random.default_rng(generator).integers(1 << 31))
        if not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
        source = copy.copy(self._source)
        source.shuffled, source.shuffle_seed = True, seed
        out = self._replace(source=source)
        return out._then(_Shuffle(seed, buffer_size), self._features)

    def set_epoch(self, epoch: int) -> None:
        """Seeds of ``shuffle`` depend on the epoch: each epoch gets another order."""
        self._epoch = int(epoch)

    def take(self, n: int) -> IterableDataset:
        """The first ``n`` rows."""
        return self._then(_Limit(int(n), skip=False), self._features)

    def skip(self, n: int) -> IterableDataset:
        """All but the first ``n`` rows."""
        return self._then(_Limit(int(n), skip=True), self._features)

    def select_columns(self, column_names: str | Sequence[str]) -> IterableDataset:
        names = [column_names] if isinstance(column_names, str) else list(column_names)
        self._check_columns(names, "select_columns")
        features = (
            None if self._features is None else Features({c: self._features[c] for c in names})
        )
        generated = any(u.generator for u in self._source.units)
        if not self._steps and not generated:  # read only these columns (Parquet: their chunks)
            source = copy.copy(self._source)
            source.columns = names
            return self._replace(source=source, features=features)
        return self._then(_Columns("select", tuple(names)), features)

    def remove_columns(self, column_names: str | Sequence[str]) -> IterableDataset:
        names = [column_names] if isinstance(column_names, str) else list(column_names)
        self._check_columns(names, "remove_columns")
        if self._features is not None:
            return self.select_columns([c for c in self._features if c not in names])
        return self._then(_Columns("remove", tuple(names)), None)

    def rename_column(self, original_column_name: str, new_column_name: str) -> IterableDataset:
        return self.rename_columns({original_column_name: new_column_name})

    def rename_columns(self, column_mapping: dict[str, str]) -> IterableDataset:
        self._check_columns(list(column_mapping), "rename_columns")
        features = None
        if self._features is not None:
            features = Features({column_mapping.get(k, k): v for k, v in self._features.items()})
        return self._then(_Columns("rename", tuple(column_mapping.items())), features)

    def cast(self, features: Features) -> IterableDataset:
        """Every column converted to ``features`` (names must match), as rows are read."""
        features = Features(features)
        if self._features is not None and set(features) != set(self._features):
            raise ValueError(
                f"cast: the features {list(features)} must name the columns {list(self._features)}"
            )
        return self._then(_Cast(features), features)

    def cast_column(self, column: str, feature: Any) -> IterableDataset:
        """One column converted to ``feature``, as rows are read."""
        self._check_columns([column], "cast_column")
        features = None
        if self._features is not None:
            features = Features({**self._features, column: feature})
        return self._then(_Cast(Features({column: feature})), features)

    @property
    def num_columns(self) -> int | None:
        return None if self._features is None else len(self._features)

    def batch(
        self,
        batch_size: int | None = None,
        by_column: str | Sequence[str] | None = None,
        drop_last_batch: bool = False,
    ) -> IterableDataset:
        """Rows grouped: each row of the result holds lists of ``batch_size`` values, or (with
        ``by_column``) of a run of successive rows with the same value(s) in those columns.

        >>> from jaxfeed import Dataset
        >>> from jaxfeed.iterable import IterableDataset
        >>> ids = IterableDataset.from_dataset(Dataset.from_dict({"x": [1, 2, 3], "k": [0, 0, 1]}))
        >>> list(ids.batch(2))
        [{'x': [1, 2], 'k': [0, 0]}, {'x': [3], 'k': [1]}]
        >>> [r["x"] for r in ids.batch(by_column="k")]
        [[1, 2], [3]]
        """
        if batch_size is None and by_column is None:
            raise ValueError("IterableDataset.batch() misses `batch_size` or `by_column` argument.")
        features = None
        if self._features is not None:
            features = Features({k: List(v) for k, v in self._features.items()})
        if by_column is not None:
            columns = [by_column] if isinstance(by_column, str) else list(by_column)
            self._check_columns(columns, "batch(by_column=)")
            return self._then(_BatchBy(tuple(columns)), features)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        return self._then(_Batch(batch_size, drop_last_batch), features)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> IterableDataset:
        """The ``index``-th of ``num_shards`` parts of the units (files / row groups).

        With fewer units than ``num_shards``, use :func:`split_dataset_by_node` (it falls back
        on keeping every n-th row).
        """
        _check_split(index, num_shards)
        units = self._source.units
        if num_shards > len(units):
            raise ValueError(
                f"cannot split {len(units)} files/row groups into {num_shards} shards; use "
                "split_dataset_by_node, which then keeps every n-th row"
            )
        if contiguous:
            per, extra = divmod(len(units), num_shards)
            lo = index * per + min(index, extra)
            mine = units[lo : lo + per + (index < extra)]
        else:
            mine = units[index::num_shards]
        source = copy.copy(self._source)
        source.units = list(mine)
        return self._replace(source=source, steps=_split_limits(self._steps, index, num_shards))

    def _check_columns(self, names: list[str], what: str) -> None:
        if self._features is None:
            return
        unknown = [c for c in names if c not in self._features]
        if unknown:
            raise ValueError(
                f"{what}: columns {unknown} are not in the dataset; its columns are {list(self._features)}"
            )

    # ------------------------------------------------------------------ reading
    def _tables(self) -> Iterator[pa.Table]:
        """A new pass (from the resume point, if one was loaded)."""
        state, self._resume = self._resume, None
        self._stream = Stream(self, state["stream"] if state else None)
        self._rows = None
        left = _Pending(state["rows"] if state else None)
        if left.count:
            yield left.pop()
        yield from self._stream

    def __iter__(self) -> Iterator[Any]:
        single = self._fmt[0] not in ("arrow", "pandas")
        for table in self._tables():
            self._rows = (table, 0)
            ds = _dataset(table, self._fmt)
            arrays = [c for c in array_columns(self._steps) if c in table.column_names]
            for start in range(0, table.num_rows, 1000):
                stop = min(start + 1000, table.num_rows)
                batch = ds[start:stop]
                if single and arrays and self._fmt[0] is None:
                    batch = dict(batch)
                    for c in arrays:
                        batch[c] = as_arrays(batch[c], table.schema.field(c).type)
                for i in range(stop - start):
                    self._rows = (table, start + i + 1)
                    if single:
                        yield {k: v[i] for k, v in batch.items()}
                    else:
                        yield (
                            batch.slice(i, 1) if hasattr(batch, "slice") else batch.iloc[i : i + 1]
                        )
        self._stream, self._rows = None, None

    def source_identity(self) -> dict[str, Any]:
        """The files (path, size, modification time or ETag) and layout this stream reads; saved
        with its state, and compared by :meth:`check_source` when the state is loaded."""
        return self._source.identity()

    def check_source(self, saved: Any, what: str) -> None:
        """Refuse a state saved for another stream, or for files changed since (a saved
        position would then point at other rows). States saved before identities were
        recorded (``saved`` None) are accepted."""
        if saved is None:
            return
        current = self.source_identity()
        if saved == current:
            return
        if not isinstance(saved, dict):
            raise ValueError(f"{what}: the state's 'source' must be an object, got {short(saved)}")
        old, new = saved.get("files"), current.get("files")
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            for was, now in zip(old, new, strict=True):
                if was != now and isinstance(was, list) and len(was) == 3 and was[0] == now[0]:
                    raise ValueError(
                        f"{what}: {now[0]} changed since the state was saved (size {was[1]} -> "
                        f"{now[1]}, version {short(was[2])} -> {short(now[2])}); the saved "
                        "position would point at other rows: start the stream from its beginning"
                    )
        raise ValueError(
            f"{what}: the state was saved for another stream (other files, row groups, shards, "
            "columns or shuffle), not this one"
        )

    def iter(self, batch_size: int, drop_last_batch: bool = False) -> Iterator[Any]:
        """Batches of exactly ``batch_size`` rows across file and record-batch boundaries."""
        if not isinstance(batch_size, int | np.integer) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        for table in _rebatch(self._tables(), batch_size, drop_last_batch):
            batch = _dataset(table, self._fmt)[:]
            arrays = [c for c in array_columns(self._steps) if c in table.column_names]
            if arrays and self._fmt[0] is None:
                batch = dict(batch)
                for c in arrays:
                    batch[c] = as_arrays(batch[c], table.schema.field(c).type)
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The position reached by the current ``for row in ds`` pass (JSON values); give it to
        :meth:`load_state_dict` of the same dataset to continue with the next row."""
        snapshot = {
            "stream": None if self._stream is None else self._stream.snapshot(),
            "rows": [] if self._rows is None else [self._rows[0].slice(self._rows[1])],
        }
        return {
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "source": self.source_identity(),
            **encode_state(snapshot),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next pass starts where ``state`` (from :meth:`state_dict`) stopped. A state of
        another stream, or of files changed since it was saved, is refused."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not an IterableDataset state (version {STATE_VERSION})")
        self.check_source(state.get("source"), "IterableDataset.load_state_dict")
        self._epoch = int(state["epoch"])
        decoded = decode_state({"stream": state["stream"], "rows": state["rows"]})
        self._resume = decoded if decoded["stream"] is not None else None


def _rebatch(tables: Iterator[pa.Table], batch_size: int, drop_last: bool) -> Iterator[pa.Table]:
    pending = _Pending()
    for table in tables:
        pending.push(table)
        while pending.count >= batch_size:
            yield pending.pop(batch_size)
    if pending.count and not drop_last:
        yield pending.pop()


@dataclass(frozen=True)
class _Stride(_Step):
    """Keep every ``world``-th row from ``rank`` on: a node's share of a stream with fewer units
    than nodes, taken after ``skip`` / ``take`` as `datasets` takes it."""

    world: int
    rank: int

    def stage(self, epoch: int, state: dict | None) -> _StrideStage:
        return _StrideStage(self, state)


class _StrideStage:
    def __init__(self, step: _Stride, state: dict | None) -> None:
        self.step = step
        self.seen = state["seen"] if state else 0

    def run(self, upstream: Iterator[pa.Table]) -> Iterator[pa.Table]:
        world, rank = self.step.world, self.step.rank
        for table in upstream:
            first = (rank - self.seen) % world
            self.seen += table.num_rows
            rows = np.arange(first, table.num_rows, world)
            if len(rows):
                yield table.take(pa.array(rows))

    def snapshot(self) -> dict:
        return {"seen": self.seen}


def _split_limits(steps: Sequence[_Step], index: int, world: int) -> tuple[_Step, ...]:
    """``skip(n)`` / ``take(n)`` made before a split: each part skips / takes its share of n
    (n // world, one more for the first n % world parts), as `datasets` splits them."""
    return tuple(
        _Limit(s.n // world + (index < s.n % world), s.skip) if isinstance(s, _Limit) else s
        for s in steps
    )


def _check_split(index: int, world: int) -> None:
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"the number of shards / world_size must be a positive int, got {world!r}")
    if not isinstance(index, int) or not 0 <= index < world:
        raise ValueError(f"index / rank must be an int in [0, {world}), got {index!r}")


def split_dataset_by_node(dataset: Any, rank: int, world_size: int) -> Any:
    """The part of ``dataset`` that process ``rank`` of ``world_size`` reads.

    For an :class:`IterableDataset`, files or Parquet row groups are dealt out round-robin, so
    each process opens only its own; with fewer of them than processes, every process reads all
    and keeps every ``world_size``-th row. ``skip(n)`` / ``take(n)`` made before count as in
    `datasets`: split over the processes with the units, of the whole stream's rows otherwise.
    A :class:`Dataset` gives a contiguous block of rows.

    >>> from jaxfeed import Dataset, split_dataset_by_node
    >>> list(split_dataset_by_node(Dataset.from_dict({"x": list(range(5))}), rank=1, world_size=2)["x"])
    [3, 4]
    """
    _check_split(rank, world_size)
    if isinstance(dataset, DatasetCore):
        per, extra = divmod(dataset.num_rows, world_size)
        lo = rank * per + min(rank, extra)
        return ops.select(dataset, range(lo, lo + per + (rank < extra)))
    if not isinstance(dataset, IterableDataset):
        raise TypeError(
            f"split_dataset_by_node needs a Dataset or IterableDataset, got {type(dataset).__name__}"
        )
    source = copy.copy(dataset._source)
    if len(source.units) >= world_size:
        source.units = source.units[rank::world_size]
    elif any(isinstance(s, _Limit) for s in dataset._steps):
        # skip/take count the whole stream's rows: keep every n-th row after them, as there
        return dataset._replace(steps=(*dataset._steps, _Stride(world_size, rank)))
    else:
        if source.stride is not None:
            world, inner = source.stride
            source.stride = (world * world_size, inner + world * rank)
        else:
            source.stride = (world_size, rank)
    steps = dataset._steps
    if len(dataset._source.units) >= world_size:
        steps = _split_limits(steps, rank, world_size)
    return dataset._replace(source=source, steps=steps)


class IterableDatasetDict(dict):
    """A dict of named :class:`IterableDataset` splits; methods apply to every split.

    >>> from jaxfeed import IterableDataset, IterableDatasetDict
    >>> def rows():
    ...     yield from ({"x": i} for i in range(4))
    >>> splits = IterableDatasetDict({"train": IterableDataset.from_generator(rows)})
    >>> [r["x"] for r in splits.filter(lambda r: r["x"] % 2 == 0)["train"]]
    [0, 2]
    """

    def _each(self, method: str, *args: Any, **kwargs: Any) -> IterableDatasetDict:
        return IterableDatasetDict(
            {k: getattr(v, method)(*args, **kwargs) for k, v in self.items()}
        )

    def with_format(self, type: str | None = None, **kwargs: Any) -> IterableDatasetDict:
        return self._each("with_format", type, **kwargs)

    def map(self, function: Callable | None = None, **kwargs: Any) -> IterableDatasetDict:
        return self._each("map", function, **kwargs)

    def filter(self, function: Callable, **kwargs: Any) -> IterableDatasetDict:
        return self._each("filter", function, **kwargs)

    def shuffle(self, seed: int | None = None, buffer_size: int = 1000) -> IterableDatasetDict:
        return self._each("shuffle", seed=seed, buffer_size=buffer_size)

    def select_columns(self, column_names: str | Sequence[str]) -> IterableDatasetDict:
        return self._each("select_columns", column_names)

    def remove_columns(self, column_names: str | Sequence[str]) -> IterableDatasetDict:
        return self._each("remove_columns", column_names)

    def rename_column(self, original: str, new: str) -> IterableDatasetDict:
        return self._each("rename_column", original, new)

    def rename_columns(self, column_mapping: dict[str, str]) -> IterableDatasetDict:
        return self._each("rename_columns", column_mapping)

    def cast(self, features: Features) -> IterableDatasetDict:
        return self._each("cast", features)

    def cast_column(self, column: str, feature: Any) -> IterableDatasetDict:
        return self._each("cast_column", column, feature)

    @property
    def column_names(self) -> dict[str, list[str] | None]:
        return {k: v.column_names for k, v in self.items()}

    @property
    def num_columns(self) -> dict[str, int | None]:
        return {k: v.num_columns for k, v in self.items()}
