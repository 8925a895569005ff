"""`IterableDataset`: a dataset read batch by batch from files, never held whole (``streaming=True``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.dataset import Dataset
from jaxfeed.features import Features

READ_ROWS = 10_000


def _file_batches(path: str, fmt: str | None) -> Iterator[pa.Table]:
    from jaxfeed.io.files import file_format, read_table

    fmt = fmt or file_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetFile(path, memory_map=True) as f:
            for batch in f.iter_batches(batch_size=READ_ROWS):
                yield pa.Table.from_batches([batch]).replace_schema_metadata(
                    f.schema_arrow.metadata
                )
        return
    if fmt == "csv":
        import pyarrow.csv as pcsv

        with pcsv.open_csv(path) as reader:
            for batch in reader:
                yield pa.Table.from_batches([batch])
        return
    table = read_table(path, fmt)  # JSON and Arrow: read (Arrow is memory-mapped), then slice
    for start in range(0, table.num_rows, READ_ROWS):
        yield table.slice(start, READ_ROWS)


class IterableDataset:
    """Rows produced on the fly from a source of Arrow tables.

    Supports ``for row in ds``, ``ds.iter(batch_size)``, ``with_format``, ``take``, ``skip``,
    ``shuffle(seed, buffer_size)`` and batched or per-row ``map``.

    >>> from jaxfeed import Dataset
    >>> from jaxfeed.iterable import IterableDataset
    >>> ids = IterableDataset.from_dataset(Dataset.from_dict({"x": list(range(5))}))
    >>> [b["x"] for b in ids.with_format("numpy").iter(batch_size=2)][-1].tolist()
    [4]
    """

    def __init__(
        self, tables: Callable[[], Iterator[pa.Table]], features: Features | None = None
    ) -> None:
        self._tables = tables
        self._features = features
        self._fmt: tuple[Any, ...] = (None, None, False, {})

    @classmethod
    def from_files(
        cls, files: Sequence[str], fmt: str | None = None, features: Features | None = None
    ) -> IterableDataset:
        files = list(files)
        return cls(lambda: (t for f in files for t in _file_batches(f, fmt)), features)

    @classmethod
    def from_dataset(cls, ds: Dataset) -> IterableDataset:
        def tables() -> Iterator[pa.Table]:
            for start in range(0, ds.num_rows, READ_ROWS):
                yield ds._internal.arrow(slice(start, min(start + READ_ROWS, ds.num_rows)))

        return cls(tables, ds.features)

    @classmethod
    def from_generator(
        cls,
        generator: Callable[..., Iterator[dict]],
        features: Features | None = None,
        gen_kwargs: dict | None = None,
    ) -> IterableDataset:
        """Rows from a generator function, read lazily in chunks of 1,000 rows.

        >>> from jaxfeed import IterableDataset
        >>> def rows():
        ...     yield from ({"x": i} for i in range(3))
        >>> [r["x"] for r in IterableDataset.from_generator(rows)]
        [0, 1, 2]
        """

        def tables() -> Iterator[pa.Table]:
            rows: list[dict] = []
            feats = features
            for row in generator(**(gen_kwargs or {})):
                rows.append(row)
                if len(rows) >= READ_ROWS:
                    chunk = Dataset.from_list(rows, features=feats)
                    feats = chunk.features
                    yield chunk.data
                    rows = []
            if rows:
                yield Dataset.from_list(rows, features=feats).data

        return cls(tables, Features(features) if features is not None else None)

    def _chunks(self) -> Iterator[Dataset]:
        for table in self._tables():
            ds = Dataset(table, self._features) if self._features is not None else Dataset(table)
            if self._features is None:
                self._features = ds.features
            type_, columns, all_columns, kwargs = self._fmt
            ds.set_format(type_, columns, all_columns, **kwargs)
            yield ds

    @property
    def features(self) -> Features | None:
        return self._features

    @property
    def column_names(self) -> list[str] | None:
        return None if self._features is None else list(self._features)

    def _copy(
        self,
        tables: Callable[[], Iterator[pa.Table]] | None = None,
        features: Features | None = None,
    ) -> IterableDataset:
        out = IterableDataset(tables or self._tables, features or self._features)
        out._fmt = self._fmt
        return out

    def with_format(
        self,
        type: str | None = None,
        columns: Any = None,
        output_all_columns: bool = False,
        **kwargs: Any,
    ) -> IterableDataset:
        from jaxfeed.formatting import make_formatter

        make_formatter(type, **kwargs)  # validate now, not at the first row
        out = self._copy()
        out._fmt = (type, columns, output_all_columns, kwargs)
        return out

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._chunks():
            yield from chunk

    def iter(self, batch_size: int, drop_last_batch: bool = False) -> Iterator[Any]:
        """Batches of exactly ``batch_size`` rows across file and record-batch boundaries."""
        if not isinstance(batch_size, int | np.integer) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        pending: list[pa.Table] = []
        count = 0
        template: Dataset | None = None
        for chunk in self._chunks():
            template = chunk
            pending.append(chunk.data)
            count += chunk.num_rows
            while count >= batch_size:
                table = pa.concat_tables(pending)
                yield self._format_table(template, table.slice(0, batch_size))
                rest = table.slice(batch_size)
                pending, count = [rest], rest.num_rows
        if count and not drop_last_batch and template is not None:
            yield self._format_table(template, pa.concat_tables(pending))

    def _format_table(self, template: Dataset, table: pa.Table) -> Any:
        ds = template._internal.derive(table.combine_chunks())
        return ds[:]

    def take(self, n: int) -> IterableDataset:
        def tables() -> Iterator[pa.Table]:
            left = n
            for table in self._tables():
                if left <= 0:
                    return
                yield table.slice(0, left)
                left -= min(left, table.num_rows)

        return self._copy(tables)

    def skip(self, n: int) -> IterableDataset:
        def tables() -> Iterator[pa.Table]:
            left = n
            for table in self._tables():
                if left >= table.num_rows:
                    left -= table.num_rows
                    continue
                yield table.slice(left)
                left = 0

        return self._copy(tables)

    def shuffle(self, seed: int | None = None, buffer_size: int = 1000) -> IterableDataset:
        """Approximate shuffle: rows pass through a random buffer of ``buffer_size`` rows."""

        def tables() -> Iterator[pa.Table]:
            rng = np.random.default_rng(seed)
            buffer: list[pa.Table] = []
            size = 0
            for table in self._tables():
                buffer.append(table)
                size += table.num_rows
                if size >= 2 * buffer_size:
                    merged = pa.concat_tables(buffer)
                    order = rng.permutation(merged.num_rows)
                    yield merged.take(order[: merged.num_rows - buffer_size])
                    buffer, size = (
                        [merged.take(order[merged.num_rows - buffer_size :])],
                        buffer_size,
                    )
            if size:
                merged = pa.concat_tables(buffer)
                yield merged.take(rng.permutation(merged.num_rows))

        return self._copy(tables)

    def map(
        self,
        function: Callable,
        batched: bool = False,
        batch_size: int | None = 1000,
        remove_columns: Any = None,
    ) -> IterableDataset:
        def tables() -> Iterator[pa.Table]:
            for chunk in self._chunks():
                yield chunk.map(
                    function, batched=batched, batch_size=batch_size, remove_columns=remove_columns
                ).data

        out = self._copy(tables)
        out._features = None  # learnt from the first mapped chunk
        return out

    def filter(
        self,
        function: Callable,
        with_indices: bool = False,
        input_columns: Any = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        fn_kwargs: dict | None = None,
    ) -> IterableDataset:
        """Rows for which ``function`` returns True, filtered chunk by chunk as they stream."""

        def tables() -> Iterator[pa.Table]:
            offset = 0
            for chunk in self._chunks():
                fn = function
                if with_indices:
                    base = offset

                    def fn(*args: Any, _base: int = base, **kwargs: Any) -> Any:
                        *rest, index = args
                        shifted = (
                            [i + _base for i in index] if isinstance(index, list) else index + _base
                        )
                        return function(*rest, shifted, **kwargs)

                kept = chunk.filter(
                    fn,
                    with_indices=with_indices,
                    input_columns=input_columns,
                    batched=batched,
                    batch_size=batch_size,
                    fn_kwargs=fn_kwargs,
                )
                offset += chunk.num_rows
                yield kept._internal.arrow()

        return self._copy(tables)


class IterableDatasetDict(dict):
    """A dict of named :class:`IterableDataset` splits."""

    def map(self, function: Callable, **kwargs: Any) -> IterableDatasetDict:
        return IterableDatasetDict({k: v.map(function, **kwargs) for k, v in self.items()})

    def filter(self, function: Callable, **kwargs: Any) -> IterableDatasetDict:
        return IterableDatasetDict({k: v.filter(function, **kwargs) for k, v in self.items()})

    def with_format(self, type: str | None = None, **kwargs: Any) -> IterableDatasetDict:
        return IterableDatasetDict({k: v.with_format(type, **kwargs) for k, v in self.items()})
