"""`IterableDataset` and `IterableDatasetDict`, the streaming API over a source and its steps:
one pass (``Stream``) and its saved state (``encode_state`` / ``decode_state``), and
:func:`split_dataset_by_node`."""

from __future__ import annotations

import base64
import copy
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data import ops
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features
from jaxfeed.data.features.sequence import List
from jaxfeed.data.formats.batches import file_schema
from jaxfeed.data.formats.files import file_format
from jaxfeed.data.formats.ray import RayBlocks, ray_from_tables
from jaxfeed.data.formats.spark import SparkPartitions
from jaxfeed.data.formats.validate import media_root, short
from jaxfeed.data.formatting import canonical_format, make_formatter
from jaxfeed.data.iterable.sources import READ_ROWS, Lookahead, Source, Unit, _SourceStage
from jaxfeed.data.iterable.steps import (
    _Apply,
    _Batch,
    _BatchBy,
    _Cast,
    _Columns,
    _dataset,
    _Limit,
    _Pending,
    _rebatch,
    _Shuffle,
    _Step,
    _Stride,
    array_columns,
    as_arrays,
)

STATE_VERSION = 1


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
        (:func:`~jaxfeed.data.formats.validate.confine_media_paths`).
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
    def from_dict(
        cls,
        mapping: dict,
        features: Features | None = None,
        info: Any = None,
        split: str | None = None,
    ) -> IterableDataset:
        """A stream over the columns of ``mapping`` (as ``Dataset.from_dict``), as in `datasets`.

        >>> from jaxfeed import IterableDataset
        >>> list(IterableDataset.from_dict({"a": [1, 2]}))
        [{'a': 1}, {'a': 2}]
        """
        return cls.from_dataset(DatasetCore.from_dict(mapping, features=features))

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
        stream runs the generator again and skips the rows already read). List values of
        ``gen_kwargs`` (e.g. file names) are shards, as in `datasets`: one unit per item, each
        running the generator with a one-item list (``num_shards``, ``shard``,
        ``split_dataset_by_node`` and ``shuffle`` deal them out).

        >>> from jaxfeed import IterableDataset
        >>> def rows():
        ...     yield from ({"x": i} for i in range(3))
        >>> [r["x"] for r in IterableDataset.from_generator(rows)]
        [0, 1, 2]
        """
        features = None if features is None else Features(features)
        kwargs = dict(gen_kwargs or {})
        lists = {k: len(v) for k, v in kwargs.items() if isinstance(v, list)}
        if len(set(lists.values())) > 1:
            raise ValueError(
                "Sharding is ambiguous for this dataset: we found several data sources lists of "
                f"different lengths, and we don't know over which list we should parallelize: "
                f"{lists}"
            )
        count = next(iter(lists.values()), 0)
        # list-valued gen_kwargs are shards, one per item, as in `datasets`
        units = [Unit(generator=True, shard=i) for i in range(count)] or [Unit(generator=True)]
        source = Source(units, generator=(generator, kwargs, features))
        return cls(source, features=features)

    @classmethod
    def from_spark(
        cls, df: Any, split: str | None = None, features: Features | None = None, **kwargs: Any
    ) -> IterableDataset:
        """Stream a Spark DataFrame partition by partition (the ``spark`` extra), as `datasets`.

        Each partition is computed by one Spark job when the stream reaches it and comes to the
        driver as Arrow record batches; the partitions are the stream's shards (``shard``,
        ``shuffle``, ``split_dataset_by_node``), and a saved position resumes at its partition
        and row. Spark's types map to features as in :meth:`jaxfeed.Dataset.from_spark`;
        ``features=`` casts (e.g. a binary column to :class:`~jaxfeed.Image`). See
        :mod:`jaxfeed.data.formats.spark`.

        >>> from jaxfeed import IterableDataset
        >>> ds = IterableDataset.from_spark(df)  # doctest: +SKIP
        """
        engine = SparkPartitions(df, features)
        units = [Unit(shard=i) for i in range(engine.num_partitions)]
        return cls(Source(units, engine=engine), features=engine.features)

    @classmethod
    def from_ray(cls, ds: Any, features: Features | None = None) -> IterableDataset:
        """Stream a Ray Dataset's Arrow blocks in its order (the ``ray`` extra).

        A materialized dataset's blocks are the stream's shards; a lazy one is one shard,
        executed as the stream reads it. Features stored in the blocks' schema (``to_ray``
        puts them there) are kept. See :mod:`jaxfeed.data.formats.ray`.

        >>> from jaxfeed import IterableDataset
        >>> ds = IterableDataset.from_ray(ray_dataset)  # doctest: +SKIP
        """
        engine = RayBlocks(ds, features)
        units = [Unit(shard=i) for i in range(engine.num_shards)]
        return cls(Source(units, engine=engine), features=engine.features)

    def to_ray(self) -> Any:
        """This stream's rows as a Ray Dataset (the ``ray`` extra): its Arrow tables put into
        Ray's object store as blocks of about 64 MB, in order, the features in their schema.

        >>> ray_dataset = IterableDataset.from_generator(rows).to_ray()  # doctest: +SKIP
        """
        return ray_from_tables(self._tables(), self._features)

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
        >>> from jaxfeed.data.iterable import IterableDataset
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
        >>> from jaxfeed.data.iterable import IterableDataset
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
        single = self._fmt[0] is None or canonical_format(self._fmt[0]) not in ("arrow", "pandas")
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
        # the finished pass's stream stays: its state_dict() is the end, so loading it gives an
        # empty pass, as in `datasets` (the next plain pass, e.g. after set_epoch, reads all)
        self._rows = None

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
        if isinstance(saved, dict) and "shuffle_seed" not in saved:
            current.pop("shuffle_seed", None)  # saved before the seed was recorded
        if saved == current:
            return
        if not isinstance(saved, dict):
            raise ValueError(f"{what}: the state's 'source' must be an object, got {short(saved)}")
        if "shuffle_seed" in saved and saved["shuffle_seed"] != current.get("shuffle_seed"):
            now = current.get("shuffle_seed")
            raise ValueError(
                f"{what}: the state was saved for the stream shuffled with seed "
                f"{short(saved['shuffle_seed'])}, but this one is "
                f"{'not shuffled' if now is None else f'shuffled with seed {now}'}; shuffle with "
                f"seed={short(saved['shuffle_seed'])} to resume it"
            )
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
