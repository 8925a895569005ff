"""Where a stream's rows come from: its *units* (files, row groups of Parquet files, row ranges
of an in-memory dataset or a generator), how they are read and decoded ahead in threads
(:class:`Lookahead` carries that from one pass into the next), and ``_SourceStage``, the first
stage of a pass, which remembers the unit and row it reached."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxfeed.data import ops
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features
from jaxfeed.data.features.features import METADATA_KEY
from jaxfeed.data.formats.batches import file_batches, parquet_file
from jaxfeed.data.formats.files import file_format, source_identity
from jaxfeed.data.formats.validate import confine_media_paths, holds_media

READ_ROWS = 10_000  # rows per unit / per table when streaming an in-memory dataset
READ_AHEAD_UNITS = 2  # Parquet units (row groups, files) decoding in threads ahead of the stream
READ_AHEAD_BYTES = 64 << 20  # ...holding at most this many uncompressed bytes
FIRST_BYTES = 1 << 19  # tables of the first unit a stream reads (later ones: io.batches' size)


@dataclass(frozen=True)
class Unit:
    """One independently readable piece: a file, some row groups of a Parquet file, or a row
    range of an in-memory dataset."""

    path: str | None = None
    row_groups: tuple[int, ...] | None = None
    rows: tuple[int, int] | None = None
    generator: bool = False
    shard: int | None = None  # from_generator: the item of the list-valued gen_kwargs it reads


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
    # from_spark / from_ray: units are the engine's pieces; engine.tables(unit.shard) reads one
    # (Arrow tables with the stream's features), engine.identity() is what a position is valid for
    engine: Any = None

    def identity(self) -> dict[str, Any]:
        """What a saved position is only valid for: each file's path, size and modification
        time or ETag (taken when the stream was made), and the layout of the units read (files,
        row groups, shards, columns, shuffle)."""
        if self.engine is not None:
            content: dict[str, Any] = {"engine": self.engine.identity()}
        elif self.dataset is not None:
            content = {
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
            [
                [u.path, u.row_groups, u.rows, u.generator]
                + ([u.shard] if u.shard is not None else [])
                for u in self.units
            ],
            self.fmt,
            self.columns,
            self.stride,
            self.shuffled,
            self.shuffle_seed,
        ]
        digest = hashlib.sha256(json.dumps(layout, default=str).encode()).hexdigest()[:16]
        if self.shuffle_seed is not None:  # named in the refusal of another seed's state
            content["shuffle_seed"] = self.shuffle_seed
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
            yield from self._generated(skip, unit.shard)
            return
        if self.engine is not None:
            for table in _skip_rows(self.engine.tables(unit.shard), skip):
                yield table if self.columns is None else table.select(self.columns)
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

    def _generated(self, skip: int, shard: int | None = None) -> Iterator[pa.Table]:
        """A generator cannot seek: it is run again and its first ``skip`` rows are dropped.
        A ``shard`` runs it on that item of its list-valued ``gen_kwargs`` (as `datasets`)."""
        function, kwargs, features = self.generator
        if shard is not None:
            kwargs = {
                k: v[shard : shard + 1] if isinstance(v, list) else v for k, v in kwargs.items()
            }
        rows: list[dict] = []
        for i, row in enumerate(function(**kwargs)):
            if i < skip:
                continue
            if features is not None and isinstance(row, dict) and len(row) < len(features):
                # a column the features declare but the row lacks is None, as in `datasets`
                row = {**dict.fromkeys(features), **row}
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

    >>> from jaxfeed.data.iterable import Lookahead, Unit
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


def _skip_rows(tables: Iterator[pa.Table], skip: int) -> Iterator[pa.Table]:
    """``tables`` without their first ``skip`` rows."""
    for table in tables:
        if skip >= table.num_rows:
            skip -= table.num_rows
            continue
        yield table.slice(skip) if skip else table
        skip = 0


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
