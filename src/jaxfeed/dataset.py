"""`Dataset` and `DatasetDict`: an Arrow table, its features, and an output format."""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed import ops, tabular
from jaxfeed.column import Column
from jaxfeed.extras import require
from jaxfeed.features import Features
from jaxfeed.features.features import infer_column
from jaxfeed.features.struct import encode_column
from jaxfeed.formatting import Formatter, canonical_format, make_formatter
from jaxfeed.reader import Rows, TableReader, normalize_rows
from jaxfeed.saved import save_dataset, save_dataset_dict
from jaxfeed.tabular import arrow_batches

# `load_from_disk` lives in jaxfeed.io (above this module); io registers it here on import.
_DISK_LOADER: list[Callable[..., Any]] = []


def register_disk_loader(loader: Callable[..., Any]) -> None:
    """Called by :mod:`jaxfeed.io.disk` so ``Dataset.load_from_disk`` needs no upward import."""
    _DISK_LOADER[:] = [loader]


def _load_from_disk(path: str | os.PathLike, **kwargs: Any) -> Any:
    if not _DISK_LOADER:
        import jaxfeed  # the package loads jaxfeed.io lazily; asking for it registers the loader

        return jaxfeed.load_from_disk(path, **kwargs)
    return _DISK_LOADER[0](path, **kwargs)


def _json_columns(ds: Dataset) -> list[str]:
    from jaxfeed.features import Json

    return [name for name, f in ds.features.items() if isinstance(f, Json)]


class Dataset:
    """A table of rows backed by Apache Arrow, read as Python, numpy, JAX, Arrow or pandas values.

    >>> from jaxfeed import Dataset
    >>> ds = Dataset.from_dict({"data": [[1, 2], [3, 4]]}).with_format("jax")
    >>> ds[0]
    {'data': Array([1, 2], dtype=int32)}
    >>> ds[:2]["data"].shape
    (2, 2)
    """

    def __init__(self, table: pa.Table, features: Features | None = None) -> None:
        if not isinstance(table, pa.Table):
            raise TypeError(f"Dataset needs a pyarrow.Table, got {type(table).__name__}")
        if features is None:
            features = Features.from_arrow_schema(table.schema)
        else:
            features = features if isinstance(features, Features) else Features(features)
            table = _conform(table, features)
        self._table = table
        self._features = features
        self._reader = TableReader(table, features)
        self._indices: np.ndarray | None = None  # row i reads table row _indices[i]
        self._cache_dir: str | None = None  # set for datasets loaded from disk
        self._source_files: set[str] = set()  # files in _cache_dir that this table maps
        self._format: dict[str, Any] = {
            "type": None,
            "format_kwargs": {},
            "columns": None,
            "output_all_columns": False,
        }
        self._formatter: Formatter = make_formatter(None)

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any], features: Features | None = None) -> Dataset:
        """Build a dataset from a dict of columns (lists or numpy arrays of equal length).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2, 3], "y": ["a", "b", "c"]}).features
        Features({'x': Value('int64'), 'y': Value('string')})
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(
                f"from_dict needs a mapping of column name to values, got {type(mapping).__name__}"
            )
        lengths = {name: _length(values, name) for name, values in mapping.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k!r}: {v}" for k, v in lengths.items())
            raise ValueError(f"all columns must have the same number of rows; got {shown}")
        if features is not None:
            features = Features(features).matching(mapping)
            arrays = [encode_column(features[k], v, k) for k, v in mapping.items()]
        else:
            inferred = {k: infer_column(v, k) for k, v in mapping.items()}
            features = Features({k: f for k, (f, _) in inferred.items()})
            arrays = [a for _, a in inferred.values()]
        table = (
            pa.Table.from_arrays(arrays, schema=features.arrow_schema) if arrays else pa.table({})
        )
        return cls(table, features)

    @classmethod
    def from_list(
        cls, rows: Sequence[Mapping[str, Any]], features: Features | None = None
    ) -> Dataset:
        """Build a dataset from a list of row dicts."""
        names: dict[str, None] = {}
        for row in rows:
            names.update(dict.fromkeys(row))
        return cls.from_dict({k: [row.get(k) for row in rows] for k in names}, features=features)

    @classmethod
    def from_arrow(
        cls, table: pa.Table | pa.RecordBatch, features: Features | None = None
    ) -> Dataset:
        """Wrap an Arrow table (no copy). Features come from its schema metadata or its types."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        return cls(table, features)

    @classmethod
    def from_pandas(
        cls, df: Any, features: Features | None = None, preserve_index: bool = False
    ) -> Dataset:
        """Build a dataset from a pandas DataFrame."""
        if features is not None:
            return cls.from_dict({c: df[c].tolist() for c in df.columns}, features=features)
        table = pa.Table.from_pandas(df, preserve_index=preserve_index).replace_schema_metadata(
            None
        )
        # pandas >= 3 stores str columns as large_string; keep the `datasets` type, string.
        schema = pa.schema(
            [
                f.with_type(pa.string()) if pa.types.is_large_string(f.type) else f
                for f in table.schema
            ]
        )
        return cls(table.cast(schema))

    @classmethod
    def from_hf(cls, hf_dataset: Any) -> Dataset:
        """Wrap a Hugging Face ``datasets.Dataset``'s Arrow table without copying it.

        Its features are mapped to jaxfeed's; a ``select``/``shuffle`` index mapping is applied with
        one Arrow ``take``.
        """
        table = hf_dataset.data
        table = getattr(table, "table", table)
        indices = getattr(hf_dataset, "_indices", None)
        if indices is not None:
            idx = indices.column(0)
            table = table.take(idx)
        features = Features.from_dict(hf_dataset.features.to_dict())
        return cls._wrap(table, features)

    @classmethod
    def _wrap(cls, table: pa.Table, features: Features) -> Dataset:
        """Wrap ``table`` as is: its storage may differ from ``features.arrow_schema`` (e.g. HF's
        extension types), which every reader decodes through the storage it finds."""
        out = cls(pa.table({}))
        out._table = table
        out._features = features
        out._reader = TableReader(table, features)
        return out

    # ----------------------------------------------------------------------------- properties
    @property
    def data(self) -> pa.Table:
        """The underlying Arrow table."""
        return self._table

    @property
    def features(self) -> Features:
        return self._features

    @property
    def num_rows(self) -> int:
        return self._table.num_rows if self._indices is None else len(self._indices)

    @property
    def num_columns(self) -> int:
        return self._table.num_columns

    @property
    def column_names(self) -> list[str]:
        return self._table.column_names

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_rows, self.num_columns)

    @property
    def format(self) -> dict[str, Any]:
        """The current format: ``type``, ``format_kwargs``, ``columns``, ``output_all_columns``."""
        out = copy.copy(self._format)
        out["format_kwargs"] = dict(out["format_kwargs"])
        if out["columns"] is None:
            out["columns"] = self.column_names
        return out

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        return f"Dataset({{\n    features: {self.column_names},\n    num_rows: {self.num_rows}\n}})"

    # ----------------------------------------------------------------------------- formats
    def set_format(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> None:
        """Set the output format in place: None/"python", "numpy", "jax", "arrow" or "pandas".

        For "jax", ``device`` is a device string (``str(jax.devices()[0])``), a ``jax.Device`` or a
        ``jax.sharding.Sharding`` that splits the batch dimension; ``dtype`` overrides the dtype of
        every numeric value.
        """
        name = canonical_format(type)
        if isinstance(columns, str):
            columns = [columns]
        if columns is not None:
            columns = list(columns)
            names = set(self.column_names)  # one list, not one per column (wide tables)
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise ValueError(
                    f"columns {unknown} are not in the dataset; its columns are {self.column_names}"
                )
        formatter = make_formatter(name, **format_kwargs)
        self._formatter = formatter
        self._format = {
            "type": None if name == "python" else name,
            "format_kwargs": dict(format_kwargs),
            "columns": columns,
            "output_all_columns": bool(output_all_columns),
        }

    def with_format(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> Dataset:
        """A new dataset sharing the same table, with the given format (see :meth:`set_format`).

        >>> import jax
        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"data": [[1, 2], [3, 4]]})
        >>> ds = ds.with_format("jax", device=str(jax.devices()[0]))
        >>> ds[0]["data"].devices() == {jax.devices()[0]}
        True
        """
        out = copy.copy(self)
        out.set_format(type, columns, output_all_columns, **format_kwargs)
        return out

    def reset_format(self) -> None:
        """Back to Python objects, all columns."""
        self.set_format()

    # ----------------------------------------------------------------------------- access
    def _split_columns(self) -> tuple[list[str], list[str]]:
        formatted = self._format["columns"] or self.column_names
        rest = (
            [c for c in self.column_names if c not in formatted]
            if self._format["output_all_columns"]
            else []
        )
        return list(formatted), rest

    def __getitem__(self, key: Any) -> Any:
        """Rows (an int, a slice, ints, a bool mask, a pandas Series of them) or a column.

        A column name gives a lazy :class:`~jaxfeed.column.Column`, as `datasets` 4+ does, except
        in the arrow and pandas formats (a ChunkedArray / Series).
        """
        if isinstance(key, str):
            if key not in self.column_names:
                raise KeyError(
                    f"column {key!r} is not in the dataset; its columns are {self.column_names}"
                )
            if self._format["type"] in ("arrow", "pandas"):
                return self._formatter.column(
                    self._reader, self._table_rows(slice(0, self.num_rows)), key
                )
            return Column(self, key)
        if hasattr(key, "to_numpy") and hasattr(key, "index"):  # a pandas Series
            key = key.to_numpy()
        rows, single = normalize_rows(key, self.num_rows)
        return self._read(rows, single)

    def _table_rows(self, rows: Any) -> Any:
        """Map dataset rows (a slice or index array) to table rows through the index mapping."""
        if self._indices is None:
            return rows
        return self._indices[rows]

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any]]:
        """Rows for a list of indices (the hook PyTorch's DataLoader uses)."""
        batch = self[list(keys)]
        return [{k: v[i] for k, v in batch.items()} for i in range(len(keys))]

    def _read(self, rows: Any, single: bool) -> Any:
        rows = self._table_rows(rows)
        formatted, rest = self._split_columns()
        read = self._formatter.row if single else self._formatter.batch
        out = read(self._reader, rows, formatted)
        if rest:
            out = dict(out)
            extra = {c: self._reader.python(c, rows) for c in rest}
            out.update({c: v[0] for c, v in extra.items()} if single else extra)
        return out

    def __iter__(self) -> Iterator[Any]:
        """Rows, read in blocks of 1,000 and split, so iteration costs no per-row table access."""
        for start in range(0, self.num_rows, 1000):
            stop = min(start + 1000, self.num_rows)
            batch = self._read(slice(start, stop), single=False)
            if self._format["type"] in ("arrow", "pandas"):
                for i in range(stop - start):
                    yield batch.slice(i, 1) if hasattr(batch, "slice") else batch.iloc[i : i + 1]
                continue
            for i in range(stop - start):
                yield {k: v[i] for k, v in batch.items()}

    def iter(self, batch_size: int, drop_last_batch: bool = False) -> Iterator[Any]:
        """Batches of exactly ``batch_size`` rows in order (the last may be shorter).

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"x": list(range(5))}).with_format("numpy")
        >>> [b["x"].tolist() for b in ds.iter(batch_size=2)]
        [[0, 1], [2, 3], [4]]
        """
        if not isinstance(batch_size, int | np.integer) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        stop_at = self.num_rows - (self.num_rows % batch_size if drop_last_batch else 0)
        for start in range(0, stop_at, batch_size):
            yield self._read(slice(start, min(start + batch_size, self.num_rows)), single=False)

    def to_dict(self, batch_size: int | None = None, batched: bool = False) -> Any:
        """All columns as Python lists of their stored values (images as ``{"bytes", "path"}``
        dicts, arrays as nested lists), as `datasets` gives them; ``batched=True`` yields dicts
        of ``batch_size`` rows.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2]}).to_dict()
        {'x': [1, 2]}
        """
        json_columns = _json_columns(self)

        def part(table: pa.Table) -> dict[str, list]:
            out = table.to_pydict()
            for name in json_columns:
                out[name] = [None if v is None else json.loads(v) for v in out[name]]
            return out

        if not batched:
            return part(self._internal.arrow())
        return (part(t) for t in arrow_batches(self, batch_size))

    def to_list(self) -> list[dict[str, Any]]:
        """All rows as dicts of stored values (see :meth:`to_dict`)."""
        columns = self.to_dict()
        return [{c: columns[c][i] for c in columns} for i in range(self.num_rows)]

    def to_pandas(self, batch_size: int | None = None, batched: bool = False) -> Any:
        """A pandas DataFrame of the stored values (``batched=True``: a generator of them)."""
        require("pandas", "pandas", "to_pandas")
        if not batched:
            return self._internal.arrow().to_pandas()
        return (t.to_pandas() for t in arrow_batches(self, batch_size))

    def to_csv(
        self,
        path_or_buf: str | os.PathLike | Any,
        batch_size: int | None = None,
        **to_csv_kwargs: Any,
    ) -> int:
        """Write CSV (header, no index, pandas options as in `datasets`); return bytes written."""
        return tabular.to_csv(self, path_or_buf, batch_size, **to_csv_kwargs)

    def to_json(
        self,
        path_or_buf: str | os.PathLike | Any,
        batch_size: int | None = None,
        **to_json_kwargs: Any,
    ) -> int:
        """Write JSON Lines (``orient="records"``; pandas options as in `datasets`); return bytes
        written."""
        return tabular.to_json(self, path_or_buf, batch_size, **to_json_kwargs)

    def to_parquet(
        self,
        path_or_buf: str | os.PathLike | Any,
        batch_size: int | None = None,
        **parquet_writer_kwargs: Any,
    ) -> int:
        """Write Parquet with the features in its schema metadata; return bytes written.

        >>> import os, tempfile
        >>> from jaxfeed import ClassLabel, Dataset, Features
        >>> ds = Dataset.from_dict({"y": [0, 1]}, features=Features({"y": ClassLabel(names=["a", "b"])}))
        >>> path = os.path.join(tempfile.mkdtemp(), "y.parquet")
        >>> _ = ds.to_parquet(path)
        >>> Dataset.from_parquet(path).features
        Features({'y': ClassLabel(names=['a', 'b'])})
        """
        return tabular.to_parquet(self, path_or_buf, batch_size, **parquet_writer_kwargs)

    @classmethod
    def from_parquet(
        cls,
        path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
        features: Features | None = None,
        columns: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Dataset:
        """Read Parquet file(s) (features from the schema metadata unless given)."""
        return cls._from_table(tabular.read_parquet(path_or_paths, columns=columns), features)

    @classmethod
    def from_csv(
        cls,
        path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
        features: Features | None = None,
        **read_csv_kwargs: Any,
    ) -> Dataset:
        """Read CSV file(s) with ``pandas.read_csv`` (its type inference, as `datasets`)."""
        for name in ("cache_dir", "keep_in_memory", "num_proc"):
            read_csv_kwargs.pop(name, None)
        return cls._from_table(tabular.read_csv(path_or_paths, **read_csv_kwargs), features)

    @classmethod
    def from_json(
        cls,
        path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
        features: Features | None = None,
        field: str | None = None,
        **kwargs: Any,
    ) -> Dataset:
        """Read JSON Lines or JSON file(s) (a list of rows, a dict of columns, or ``field`` of it)."""
        return cls._from_table(tabular.read_json(path_or_paths, field=field), features)

    @classmethod
    def _from_table(cls, table: pa.Table, features: Features | None) -> Dataset:
        if features is None:
            return cls(table)
        features = Features(features)
        missing = [c for c in table.column_names if c not in features]
        if missing:
            raise ValueError(f"columns {missing} of the file are not in the given features")
        return cls(table, Features({c: features[c] for c in table.column_names}))

    # ----------------------------------------------------------------------------- context
    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @contextlib.contextmanager
    def formatted_as(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> Iterator[None]:
        """Use a format inside a ``with`` block; the previous one comes back after it.

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"x": [1, 2]})
        >>> with ds.formatted_as("numpy"):
        ...     print(ds[:]["x"])
        [1 2]
        >>> ds[:]["x"]
        [1, 2]
        """
        old = (self._format, self._formatter)
        self.set_format(type, columns, output_all_columns, **format_kwargs)
        try:
            yield
        finally:
            self._format, self._formatter = old

    def set_transform(
        self,
        transform: Callable[[dict], dict] | None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
    ) -> None:
        """Apply ``transform`` to Python batches on access (a row is a batch of one); None
        resets the format.

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"x": [1, 2]})
        >>> ds.set_transform(lambda b: {"y": [v * 10 for v in b["x"]]})
        >>> ds[0], ds[:]
        ({'y': 10}, {'y': [10, 20]})
        """
        if transform is None:
            self.set_format(None, columns, output_all_columns)
            return
        self.set_format("custom", columns, output_all_columns, transform=transform)

    def with_transform(
        self,
        transform: Callable[[dict], dict] | None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
    ) -> Dataset:
        """A new dataset with :meth:`set_transform` applied."""
        out = copy.copy(self)
        out.set_transform(transform, columns, output_all_columns)
        return out

    # ----------------------------------------------------------------------------- more ops
    def unique(self, column: str) -> list:
        """The distinct values of ``column``, in order of first appearance.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [3, 1, 3, 2]}).unique("x")
        [3, 1, 2]
        """
        return ops.unique(self, column)

    def sort(
        self,
        column_names: str | Sequence[str],
        reverse: bool | Sequence[bool] = False,
        null_placement: str = "at_end",
        **kwargs: Any,
    ) -> Dataset:
        """Rows sorted by one or more columns (a stable sort; an index mapping).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [3, 1, 2]}).sort("x")["x"]
        Column([1, 2, 3])
        """
        return ops.sort(self, column_names, reverse, null_placement)

    def add_column(self, name: str, column: Any, feature: Any = None, **kwargs: Any) -> Dataset:
        """A new dataset with one more column (``feature`` inferred unless given).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2]}).add_column("y", ["a", "b"])[1]
        {'x': 2, 'y': 'b'}
        """
        return ops.add_column(self, name, column, feature)

    def add_item(self, item: Mapping[str, Any], **kwargs: Any) -> Dataset:
        """A new dataset with ``item`` (a row dict) appended."""
        return ops.add_item(self, item)

    def flatten(self, max_depth: int = 16, **kwargs: Any) -> Dataset:
        """Struct columns split into one column per field (``"a.b"``), as `datasets` names them.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"a": [{"b": 1, "c": "x"}]}).flatten().column_names
        ['a.b', 'a.c']
        """
        return ops.flatten(self, max_depth)

    def class_encode_column(self, column: str, include_nulls: bool = False) -> Dataset:
        """Turn a column of values into a :class:`ClassLabel` (names: the sorted distinct values).

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"y": ["dog", "cat", "dog"]}).class_encode_column("y")
        >>> ds.features["y"], ds["y"]
        (ClassLabel(names=['cat', 'dog']), Column([1, 0, 1]))
        """
        return ops.class_encode_column(self, column, include_nulls)

    def shard(self, num_shards: int, index: int, contiguous: bool = True, **kwargs: Any) -> Dataset:
        """Shard ``index`` of ``num_shards``: contiguous blocks, or every ``num_shards``-th row.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": list(range(5))}).shard(2, 0)["x"]
        Column([0, 1, 2])
        """
        return ops.shard(self, num_shards, index, contiguous)

    def to_iterable_dataset(self, num_shards: int | None = 1) -> Any:
        """A streaming view of this dataset (rows in order, in this dataset's format)."""
        return ops.to_iterable_dataset(self, num_shards)

    @classmethod
    def load_from_disk(cls, dataset_path: str | os.PathLike, **kwargs: Any) -> Dataset:
        """Load a dataset written by :meth:`save_to_disk` (see :func:`jaxfeed.load_from_disk`)."""
        out = _load_from_disk(dataset_path, **kwargs)
        if not isinstance(out, Dataset):
            raise ValueError(
                f"{dataset_path} holds a DatasetDict; use DatasetDict.load_from_disk or "
                "jaxfeed.load_from_disk"
            )
        return out

    @property
    def _internal(self) -> DatasetInternal:
        """The package-internal interface (for ops, io, iterable and the loader)."""
        return DatasetInternal(self)

    # ------------------------------------------------------------------------- operations
    def select(self, indices: Any) -> Dataset:
        """Rows at ``indices`` (an index mapping: nothing is copied).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [10, 11, 12]}).select([2, 0])["x"][:]
        [12, 10]
        """
        return ops.select(self, indices)

    def shuffle(
        self, seed: int | None = None, generator: np.random.Generator | None = None
    ) -> Dataset:
        """Rows in a random order (an index mapping; reads gather in bulk).

        >>> from jaxfeed import Dataset
        >>> sorted(Dataset.from_dict({"x": [1, 2, 3]}).shuffle(seed=0)["x"])
        [1, 2, 3]
        """
        return ops.shuffle(self, seed, generator)

    def flatten_indices(self) -> Dataset:
        """Materialise an index mapping (from select/shuffle/filter) into a contiguous table."""
        return ops.flatten_indices(self)

    def filter(
        self,
        function: Any,
        with_indices: bool = False,
        input_columns: str | Sequence[str] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        fn_kwargs: dict | None = None,
        num_proc: int | None = None,
    ) -> Dataset:
        """Rows for which ``function`` returns True (one bool per row; a list of them if batched).

        ``num_proc=N`` runs it in N spawned processes (same result; see :mod:`jaxfeed.parallel`).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2, 3, 4]}).filter(lambda r: r["x"] % 2 == 0)["x"][:]
        [2, 4]
        """
        return ops.filter(
            self, function, with_indices, input_columns, batched, batch_size, fn_kwargs, num_proc
        )

    def map(
        self,
        function: Any = None,
        with_indices: bool = False,
        input_columns: str | Sequence[str] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        drop_last_batch: bool = False,
        remove_columns: str | Sequence[str] | None = None,
        keep_in_memory: bool = False,
        load_from_cache_file: bool | None = None,
        cache_file_name: str | os.PathLike | None = None,
        writer_batch_size: int | None = 1000,
        features: Features | None = None,
        disable_nullable: bool = False,
        fn_kwargs: dict | None = None,
        new_fingerprint: str | None = None,
        desc: str | None = None,
        try_original_type: bool | None = True,
        num_proc: int | None = None,
    ) -> Dataset:
        """Apply ``function`` to every row (or batch) and add or replace the columns it returns.

        Batches are given in the dataset's format (numpy with ``with_format("numpy")``: vectorised).
        On a dataset loaded from disk the result is written to an Arrow file in its folder.

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"x": [1, 2, 3]}).with_format("numpy")
        >>> ds.map(lambda b: {"y": b["x"] * 2}, batched=True)[:]["y"].tolist()
        [2, 4, 6]

        As in `datasets`: the result is ``{**inputs minus remove_columns, **returned}``; without
        ``features=`` a returned column named like an input keeps its feature when its values fit
        (``try_original_type``), new columns are inferred (1-d arrays as variable-length
        ``List``); ``async def`` functions run concurrently; on arrow/pandas-formatted datasets
        the function gets and may return a ``pyarrow.Table`` / ``pandas.DataFrame``.
        ``keep_in_memory=True`` keeps the output in memory; ``cache_file_name`` names the Arrow
        file it is written to. ``load_from_cache_file``, ``writer_batch_size``, ``desc`` and
        ``new_fingerprint`` are accepted for compatibility: jaxfeed has no fingerprint cache,
        so ``map`` always runs the function. ``num_proc=N`` splits the rows into N contiguous
        shards mapped in spawned processes, with the same result (see :mod:`jaxfeed.parallel`).
        """
        return ops.map(
            self,
            function,
            with_indices=with_indices,
            input_columns=input_columns,
            batched=batched,
            batch_size=batch_size,
            drop_last_batch=drop_last_batch,
            remove_columns=remove_columns,
            keep_in_memory=keep_in_memory,
            cache_file_name=cache_file_name,
            features=features,
            fn_kwargs=fn_kwargs,
            try_original_type=try_original_type,
            num_proc=num_proc,
        )

    def train_test_split(
        self,
        test_size: float | int | None = None,
        train_size: float | int | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        stratify_by_column: str | None = None,
    ) -> DatasetDict:
        """Split into ``{"train", "test"}``; ``stratify_by_column`` keeps class proportions.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": list(range(10))}).train_test_split(test_size=0.2, seed=0).num_rows
        {'train': 8, 'test': 2}
        """
        return ops.train_test_split(self, test_size, train_size, shuffle, seed, stratify_by_column)

    def rename_column(self, original_column_name: str, new_column_name: str) -> Dataset:
        return ops.rename_columns(self, {original_column_name: new_column_name})

    def rename_columns(self, column_mapping: Mapping[str, str]) -> Dataset:
        return ops.rename_columns(self, column_mapping)

    def remove_columns(self, column_names: str | Sequence[str]) -> Dataset:
        return ops.remove_columns(self, column_names)

    def select_columns(self, column_names: str | Sequence[str]) -> Dataset:
        return ops.select_columns(self, column_names)

    def cast_column(self, column: str, feature: Any) -> Dataset:
        """Convert one column to another feature (e.g. int -> float, strings -> ClassLabel).

        >>> from jaxfeed import ClassLabel, Dataset
        >>> ds = Dataset.from_dict({"y": ["cat", "dog"]})
        >>> ds.cast_column("y", ClassLabel(names=["cat", "dog"]))["y"][:]
        [0, 1]
        """
        return ops.cast_column(self, column, feature)

    def cast(
        self,
        features: Features,
        batch_size: int | None = 1000,
        keep_in_memory: bool = False,
        **kwargs: Any,
    ) -> Dataset:
        """Convert every column to ``features`` (names must match); values are checked, in
        batches of ``batch_size`` rows where a conversion needs Python (e.g. to ClassLabel)."""
        return ops.cast(self, features, batch_size=batch_size)

    @classmethod
    def from_generator(
        cls, generator: Any, features: Features | None = None, gen_kwargs: dict | None = None
    ) -> Dataset:
        """Build a dataset from a function that yields row dicts (read in chunks of 1,000 rows).

        >>> from jaxfeed import Dataset
        >>> def rows():
        ...     yield from ({"x": i} for i in range(3))
        >>> Dataset.from_generator(rows)["x"][:]
        [0, 1, 2]
        """
        return ops.from_generator(generator, features, gen_kwargs)

    def save_to_disk(
        self,
        dataset_path: str | os.PathLike,
        max_shard_size: str | int | None = None,
        num_shards: int | None = None,
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        """Write Arrow IPC + JSON to ``dataset_path`` atomically (see :func:`jaxfeed.load_from_disk`).

        ``num_shards`` or ``max_shard_size`` (``"500MB"``) split the rows over several
        ``data-0000i-of-0000n.arrow`` files, as `datasets` names them. ``dataset_path`` may be a
        URL (``s3://bucket/ds``); ``storage_options`` go to fsspec.
        """
        save_dataset(
            self,
            dataset_path,
            num_shards=num_shards,
            max_shard_size=max_shard_size,
            storage_options=storage_options,
        )

    def cleanup_cache_files(self) -> int:
        """Delete ``map`` output files in this dataset's folder, except the one it reads; return how many."""
        if self._cache_dir is None:
            return 0
        removed = 0
        for f in Path(self._cache_dir).glob("cache-map-*.arrow*"):
            if f.name not in self._source_files:
                f.unlink(missing_ok=True)
                removed += 1
        return removed


class DatasetInternal:
    """What the rest of the package may use of a :class:`Dataset` besides its public API.

    ``ops``, ``io``, ``iterable`` and the loader go through this view (``ds._internal``) instead
    of reading the dataset's private attributes, so the dataset's representation (a table, an
    optional index mapping, a format, an optional cache folder) can change in one place.
    """

    __slots__ = ("_ds",)

    def __init__(self, ds: Dataset) -> None:
        self._ds = ds

    @property
    def reader(self) -> TableReader:
        """Reads rows of the underlying table (table coordinates: map rows with table_rows)."""
        return self._ds._reader

    @property
    def indices(self) -> np.ndarray | None:
        """The index mapping (row i reads table row indices[i]), or None for table order."""
        return self._ds._indices

    @property
    def cache_dir(self) -> str | None:
        """The folder this dataset's Arrow files live in (where ``map`` writes), or None."""
        return self._ds._cache_dir

    @property
    def source_files(self) -> frozenset[str]:
        """Names of the files in ``cache_dir`` that this dataset's table maps."""
        return frozenset(self._ds._source_files)

    def table_rows(self, rows: Rows) -> Rows:
        """Map dataset rows (a slice or index array) to table rows through the index mapping."""
        return self._ds._table_rows(rows)

    def arrow(self, rows: Rows | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """Dataset rows (all by default) as one table, the index mapping applied with one take."""
        if rows is None:
            rows = slice(0, self._ds.num_rows)
        return self._ds._reader.arrow(self.table_rows(rows), columns)

    def read(self, rows: Rows, single: bool = False) -> Any:
        """Dataset rows in the dataset's output format (one row when ``single``)."""
        return self._ds._read(rows, single)

    def derive(
        self,
        table: pa.Table,
        features: Features | None = None,
        indices: np.ndarray | None = None,
        source_files: set[str] | frozenset[str] | None = None,
    ) -> Dataset:
        """A dataset over ``table`` (as is) that keeps this one's format and cache folder.

        ``source_files`` names the cache files the new table maps (default: this dataset's).
        """
        ds = self._ds
        out = Dataset._wrap(table, features if features is not None else ds._features)
        out._indices = indices
        out._cache_dir = ds._cache_dir
        out._source_files = set(ds._source_files if source_files is None else source_files)
        fmt = ds._format
        columns = fmt["columns"]
        if columns is not None:
            columns = [c for c in columns if c in out.column_names] or None
        out.set_format(fmt["type"], columns, fmt["output_all_columns"], **fmt["format_kwargs"])
        return out

    def set_cache(
        self, cache_dir: str | os.PathLike | None, source_files: Sequence[str] = ()
    ) -> None:
        """Record the folder whose Arrow files this (freshly built) dataset maps."""
        self._ds._cache_dir = None if cache_dir is None else str(cache_dir)
        self._ds._source_files = set(source_files)

    def format_state(self) -> dict[str, Any]:
        """The output format as JSON-ready values, in the keys of ``state.json``."""
        fmt = self._ds._format
        if fmt["type"] == "custom":  # a transform function is not saved (nor by `datasets`)
            fmt = {**fmt, "type": None}
        return {
            "_format_type": fmt["type"],
            "_format_columns": fmt["columns"],
            "_format_kwargs": self._ds._formatter.serialize(),
            "_output_all_columns": fmt["output_all_columns"],
        }


def _length(values: Any, column: str) -> int:
    try:
        return len(values)
    except TypeError:
        raise TypeError(
            f"column {column!r} must be a list or array of values, got {type(values).__name__}"
        ) from None


def _conform(table: pa.Table, features: Features) -> pa.Table:
    """Check ``table`` against ``features`` and cast it to their storage types."""
    if list(features) != table.column_names:
        if set(features) != set(table.column_names):
            raise ValueError(
                f"features {list(features)} do not match the table's columns {table.column_names}"
            )
        table = table.select(list(features))
    schema = features.arrow_schema
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(schema.metadata)
    columns = []
    for name in features:
        column = table.column(name)
        want = schema.field(name).type
        if column.type == want:
            columns.append(column)
            continue
        try:
            columns.append(column.cast(want, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            columns.append(encode_column(features[name], column.combine_chunks(), name))
    return pa.Table.from_arrays(columns, schema=schema)


class DatasetDict(dict):
    """A dict of named splits (``"train"``, ``"test"``, ...), each a :class:`Dataset`.

    >>> from jaxfeed import DatasetDict
    >>> dds = DatasetDict.from_dict({"train": {"data": [[1, 2], [3, 4]]}, "test": {"data": [[5, 6]]}})
    >>> dds.num_rows
    {'train': 2, 'test': 1}
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, split in self.items():
            if not isinstance(split, Dataset):
                raise TypeError(f"split {name!r} must be a Dataset, got {type(split).__name__}")

    @classmethod
    def from_dict(
        cls, splits: Mapping[str, Mapping[str, Any]], features: Features | None = None
    ) -> DatasetDict:
        """Build every split with :meth:`Dataset.from_dict`."""
        return cls(
            {name: Dataset.from_dict(data, features=features) for name, data in splits.items()}
        )

    @property
    def num_rows(self) -> dict[str, int]:
        return {k: v.num_rows for k, v in self.items()}

    @property
    def column_names(self) -> dict[str, list[str]]:
        return {k: v.column_names for k, v in self.items()}

    @property
    def shape(self) -> dict[str, tuple[int, int]]:
        return {k: v.shape for k, v in self.items()}

    def with_format(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> DatasetDict:
        """Format every split (see :meth:`Dataset.set_format`)."""
        return DatasetDict(
            {
                k: v.with_format(type, columns, output_all_columns, **format_kwargs)
                for k, v in self.items()
            }
        )

    def set_format(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> None:
        for split in self.values():
            split.set_format(type, columns, output_all_columns, **format_kwargs)

    def reset_format(self) -> None:
        for split in self.values():
            split.reset_format()

    def _each(self, method: str, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: getattr(v, method)(*args, **kwargs) for k, v in self.items()})

    def map(self, function: Any = None, *args: Any, **kwargs: Any) -> DatasetDict:
        """Run :meth:`Dataset.map` on every split."""
        if args:
            return self._each("map", function, *args, **kwargs)
        return self._each("map", function, **kwargs)

    def filter(self, function: Any, **kwargs: Any) -> DatasetDict:
        return self._each("filter", function, **kwargs)

    def __enter__(self) -> DatasetDict:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @contextlib.contextmanager
    def formatted_as(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> Iterator[None]:
        """Format every split inside a ``with`` block; the previous formats come back after it."""
        with contextlib.ExitStack() as stack:
            for split in self.values():
                stack.enter_context(
                    split.formatted_as(type, columns, output_all_columns, **format_kwargs)
                )
            yield

    def set_transform(
        self,
        transform: Callable[[dict], dict] | None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
    ) -> None:
        for split in self.values():
            split.set_transform(transform, columns, output_all_columns)

    def with_transform(
        self,
        transform: Callable[[dict], dict] | None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
    ) -> DatasetDict:
        return DatasetDict(
            {k: v.with_transform(transform, columns, output_all_columns) for k, v in self.items()}
        )

    @property
    def num_columns(self) -> dict[str, int]:
        return {k: v.num_columns for k, v in self.items()}

    @property
    def data(self) -> dict[str, pa.Table]:
        return {k: v.data for k, v in self.items()}

    def shuffle(
        self,
        seeds: int | dict[str, int | None] | None = None,
        seed: int | None = None,
        generators: dict[str, np.random.Generator] | None = None,
        **kwargs: Any,
    ) -> DatasetDict:
        """Shuffle every split: one ``seed`` for all, or ``seeds`` / ``generators`` per split."""
        if seed is not None and seeds is not None:
            raise ValueError("Please specify seed or seeds, but not both")
        seeds = seed if seed is not None else seeds
        if not isinstance(seeds, dict):
            seeds = dict.fromkeys(self, seeds)
        generators = generators or {}
        return DatasetDict(
            {k: v.shuffle(seed=seeds.get(k), generator=generators.get(k)) for k, v in self.items()}
        )

    def cast(self, features: Features, **kwargs: Any) -> DatasetDict:
        return self._each("cast", features, **kwargs)

    def class_encode_column(self, column: str, include_nulls: bool = False) -> DatasetDict:
        """Encode ``column`` in every split (each split gets the names it holds, as `datasets`)."""
        return self._each("class_encode_column", column, include_nulls)

    def unique(self, column: str) -> dict[str, list]:
        return {k: v.unique(column) for k, v in self.items()}

    def sort(self, column_names: str | Sequence[str], **kwargs: Any) -> DatasetDict:
        return self._each("sort", column_names, **kwargs)

    def flatten(self, max_depth: int = 16) -> DatasetDict:
        return self._each("flatten", max_depth)

    def rename_columns(self, column_mapping: Mapping[str, str]) -> DatasetDict:
        return self._each("rename_columns", column_mapping)

    def cleanup_cache_files(self) -> dict[str, int]:
        return {k: v.cleanup_cache_files() for k, v in self.items()}

    @classmethod
    def from_csv(
        cls, path_or_paths: Mapping[str, Any], features: Features | None = None, **kwargs: Any
    ) -> DatasetDict:
        return cls({k: Dataset.from_csv(p, features, **kwargs) for k, p in path_or_paths.items()})

    @classmethod
    def from_json(
        cls, path_or_paths: Mapping[str, Any], features: Features | None = None, **kwargs: Any
    ) -> DatasetDict:
        return cls({k: Dataset.from_json(p, features, **kwargs) for k, p in path_or_paths.items()})

    @classmethod
    def from_parquet(
        cls, path_or_paths: Mapping[str, Any], features: Features | None = None, **kwargs: Any
    ) -> DatasetDict:
        return cls(
            {k: Dataset.from_parquet(p, features, **kwargs) for k, p in path_or_paths.items()}
        )

    def flatten_indices(self) -> DatasetDict:
        return self._each("flatten_indices")

    def rename_column(self, original_column_name: str, new_column_name: str) -> DatasetDict:
        return self._each("rename_column", original_column_name, new_column_name)

    def remove_columns(self, column_names: str | Sequence[str]) -> DatasetDict:
        return self._each("remove_columns", column_names)

    def select_columns(self, column_names: str | Sequence[str]) -> DatasetDict:
        return self._each("select_columns", column_names)

    def cast_column(self, column: str, feature: Any) -> DatasetDict:
        return self._each("cast_column", column, feature)

    def save_to_disk(
        self,
        dataset_dict_path: str | os.PathLike,
        max_shard_size: str | int | None = None,
        num_shards: dict[str, int] | None = None,
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        """Write every split under ``dataset_dict_path`` atomically (``num_shards`` per split;
        a URL too, with ``storage_options``)."""
        save_dataset_dict(
            self,
            dataset_dict_path,
            num_shards=num_shards,
            max_shard_size=max_shard_size,
            storage_options=storage_options,
        )

    @classmethod
    def load_from_disk(cls, dataset_dict_path: str | os.PathLike, **kwargs: Any) -> DatasetDict:
        """Load a dataset dict written by :meth:`save_to_disk`."""
        out = _load_from_disk(dataset_dict_path, **kwargs)
        if not isinstance(out, DatasetDict):
            raise ValueError(
                f"{dataset_dict_path} holds a Dataset; use Dataset.load_from_disk or "
                "jaxfeed.load_from_disk"
            )
        return out

    def __repr__(self) -> str:
        body = ",\n".join(f"    {k}: {v!r}".replace("\n", "\n    ") for k, v in self.items())
        return f"DatasetDict({{\n{body}\n}})"
