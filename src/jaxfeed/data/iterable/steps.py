"""The steps of a stream (map, filter, shuffle, take, skip, column edits, casts, batch, stride).

Each ``_Step`` is a frozen description of a transformation; its ``stage(epoch, state)`` builds the
running state of one pass, which turns upstream Arrow tables into downstream ones and reports its
position with ``snapshot()`` (a shuffle buffer or rows waiting for a batch included), so a stream
resumes exactly where it stopped."""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data import ops
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features
from jaxfeed.data.features.sequence import List
from jaxfeed.data.iterable.sources import _seed


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

    async def call_async(first: dict, *args: Any, **kwargs: Any) -> Any:
        return record(await function(restore(first), *args, **kwargs))

    # an async function stays one, so map/filter run a chunk's calls concurrently (as datasets)
    return call_async if inspect.iscoroutinefunction(function) else call


def _offset_indices(function: Callable, offset: int, batched: bool) -> Callable:
    def shifted(*args: Any, **kwargs: Any) -> Any:
        *head, indices = args
        moved = [i + offset for i in indices] if batched else indices + offset
        return function(*head, moved, **kwargs)

    async def shifted_async(*args: Any, **kwargs: Any) -> Any:
        return await shifted(*args, **kwargs)

    return shifted_async if inspect.iscoroutinefunction(function) else shifted


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
