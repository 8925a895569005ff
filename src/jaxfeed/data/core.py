"""The core of a dataset: an Arrow table, its features, an optional index mapping, and an output
format; reading rows in that format. :class:`jaxfeed.Dataset` adds the operations (``map``,
``filter``, ``select``, writing files...) on top of it, in :mod:`jaxfeed.data.dataset`.

Modules that work on datasets (``ops``, ``iterable``, ``parallel``, ``tabular``, ``saved``) use this
class and its :class:`DatasetInternal` view, so none of them needs :mod:`jaxfeed.data.dataset`, which sits
above them all. Results keep the class of their input (``type(ds)``).
"""

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

from jaxfeed._base.extras import require
from jaxfeed.data.column import Column
from jaxfeed.data.features import Features, Json
from jaxfeed.data.features.base import array_likes_as_numpy
from jaxfeed.data.features.features import infer_column
from jaxfeed.data.features.struct import decode_python, encode_column
from jaxfeed.data.formatting import Formatter, canonical_format, make_formatter
from jaxfeed.data.reader import Rows, TableReader, normalize_rows
from jaxfeed.data.splits import NamedSplit


def json_columns(ds: DatasetCore) -> list[str]:
    """The names of ``ds``'s :class:`~jaxfeed.Json` columns (stored as JSON text)."""
    return [name for name, f in ds.features.items() if isinstance(f, Json)]


def _holds_json(feature: Any) -> bool:
    """True when a :class:`~jaxfeed.Json` feature is nested in ``feature`` (lists, dicts)."""
    if isinstance(feature, Json):
        return True
    if isinstance(feature, Mapping):
        return any(_holds_json(f) for f in feature.values())
    inner = getattr(feature, "feature", None)
    return inner is not None and _holds_json(inner)


def arrow_batches(ds: DatasetCore, batch_size: int | None) -> Iterator[pa.Table]:
    """The dataset's rows (index mapping applied) as Arrow tables of ``batch_size`` rows."""
    size = batch_size or DEFAULT_BATCH_SIZE
    for start in range(0, ds.num_rows, size):
        yield ds._internal.arrow(slice(start, min(start + size, ds.num_rows))).combine_chunks()


DEFAULT_BATCH_SIZE = 1000  # rows per exported batch: `datasets`' config.DEFAULT_MAX_BATCH_SIZE


class DatasetCore:
    """A table of rows backed by Apache Arrow, read as Python, numpy, JAX, Arrow or pandas values
    (the core of :class:`jaxfeed.Dataset`).

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
            table = conform_table(table, features)
        self._table = table
        self._features = features
        self._reader = TableReader(table, features)
        self._index_map: np.ndarray | None = None  # row i reads table row _index_map[i]
        self._cache_dir: str | None = None  # set for datasets loaded from disk
        self._source_files: set[str] = set()  # files in _cache_dir that this table maps
        self._split: str | None = None
        self._format: dict[str, Any] = {
            "type": None,
            "format_kwargs": {},
            "columns": None,
            "output_all_columns": False,
        }
        self._formatter: Formatter = make_formatter(None)

    @classmethod
    def from_dict(
        cls,
        mapping: Mapping[str, Any],
        features: Features | None = None,
        info: Any = None,
        split: str | None = None,
        on_mixed_types: str | None = None,
    ) -> DatasetCore:
        """Build a dataset from a dict of columns (lists or numpy arrays of equal length).

        ``on_mixed_types="use_json"`` stores ``Json`` where a column mixes types (dicts with
        other keys, ints beside strings), as `datasets`; by default that is a ``FeatureError``.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2, 3], "y": ["a", "b", "c"]}).features
        Features({'x': Value('int64'), 'y': Value('string')})
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(
                f"from_dict needs a mapping of column name to values, got {type(mapping).__name__}"
            )
        mapping = {name: array_likes_as_numpy(values) for name, values in mapping.items()}
        lengths = {name: _length(values, name) for name, values in mapping.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k!r}: {v}" for k, v in lengths.items())
            raise ValueError(f"all columns must have the same number of rows; got {shown}")
        if features is not None:
            features = Features(features).matching(mapping)
            arrays = [encode_column(features[k], v, k) for k, v in mapping.items()]
        else:
            _check_on_mixed_types(on_mixed_types)
            inferred = {k: infer_column(v, k, on_mixed_types) for k, v in mapping.items()}
            features = Features({k: f for k, (f, _) in inferred.items()})
            arrays = [a for _, a in inferred.values()]
        table = (
            pa.Table.from_arrays(arrays, schema=features.arrow_schema) if arrays else pa.table({})
        )
        return cls(table, features)._named(split, None)

    @classmethod
    def from_list(
        cls,
        rows: Sequence[Mapping[str, Any]],
        features: Features | None = None,
        info: Any = None,
        split: str | None = None,
        on_mixed_types: str | None = None,
    ) -> DatasetCore:
        """Build a dataset from a list of row dicts; the first row names the columns (as in
        `datasets`: a later row's other keys are not columns, its missing ones are None).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_list([{"a": 1}, {"a": 2, "b": 3}]).column_names
        ['a']
        """
        names = list(rows[0]) if len(rows) else []
        columns = {k: [row.get(k) for row in rows] for k in names}
        return cls.from_dict(columns, features=features, split=split, on_mixed_types=on_mixed_types)

    @classmethod
    def from_arrow(
        cls, table: pa.Table | pa.RecordBatch, features: Features | None = None
    ) -> DatasetCore:
        """Wrap an Arrow table (no copy). Features come from its schema metadata or its types."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        return cls(table, features)

    @classmethod
    def from_pandas(
        cls,
        df: Any,
        features: Features | None = None,
        info: Any = None,
        split: str | None = None,
        preserve_index: bool | None = None,
    ) -> DatasetCore:
        """Build a dataset from a pandas DataFrame (string columns keep pandas' Arrow type:
        ``large_string`` for pandas 3 ``str`` columns, as in `datasets`)."""
        if features is not None:
            data = {c: df[c].tolist() for c in df.columns}
            return cls.from_dict(data, features=features, split=split)
        table = pa.Table.from_pandas(df, preserve_index=preserve_index)
        return cls(table.replace_schema_metadata(None))._named(split, None)

    @classmethod
    def from_hf(cls, hf_dataset: Any) -> DatasetCore:
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
    def _wrap(cls, table: pa.Table, features: Features) -> DatasetCore:
        """Wrap ``table`` as is: its storage may differ from ``features.arrow_schema`` (e.g. HF's
        extension types), which every reader decodes through the storage it finds."""
        out = cls(pa.table({}))
        out._table = table
        out._features = features
        out._reader = TableReader(table, features)
        return out

    @property
    def _indices(self) -> pa.Table | None:
        """The index mapping as `datasets` exposes it (a one-column ``indices`` table, no copy),
        or None when rows are read in table order (code written for `datasets` reads it)."""
        if self._index_map is None:
            return None
        return pa.table({"indices": pa.array(np.asarray(self._index_map, dtype=np.uint64))})

    @property
    def data(self) -> pa.Table:
        """The underlying Arrow table."""
        return self._table

    @property
    def features(self) -> Features:
        return self._features

    @property
    def num_rows(self) -> int:
        return self._table.num_rows if self._index_map is None else len(self._index_map)

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
        format_kwargs = {**(format_kwargs.pop("format_kwargs", None) or {}), **format_kwargs}
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
    ) -> DatasetCore:
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

        A column name gives a lazy :class:`~jaxfeed.data.column.Column`, as `datasets` 4+ does, except
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
        if self._index_map is None:
            return rows
        return self._index_map[rows]

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
        names = json_columns(self)
        nested = [n for n, f in self.features.items() if n not in names and _holds_json(f)]

        def part(table: pa.Table) -> dict[str, list]:
            out = table.to_pydict()
            for name in names:
                out[name] = [None if v is None else json.loads(v) for v in out[name]]
            for name in nested:  # Json inside lists and structs: decoded too
                out[name] = decode_python(self.features[name], table.column(name).combine_chunks())
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
        names = json_columns(self)
        nested = [n for n, f in self.features.items() if n not in names and _holds_json(f)]

        def frame(table: pa.Table) -> Any:
            df = table.to_pandas()
            for name in names:  # decoded, as `datasets` gives them
                df[name] = [None if v is None else json.loads(v) for v in df[name]]
            for name in nested:  # Json inside lists and structs: those values decoded too
                column = table.column(name).combine_chunks()
                df[name] = decode_python(self.features[name], column)
            return df

        if not batched:
            return frame(self._internal.arrow())
        return (frame(t) for t in arrow_batches(self, batch_size))

    @property
    def split(self) -> str | None:
        """The split this dataset was read as (``from_*(split=)``, ``load_dataset``), or None."""
        return self._split

    def _named(self, split: str | None, default: str | None = "train") -> DatasetCore:
        self._split = None if split is None and default is None else NamedSplit(split or default)
        return self

    def __enter__(self) -> DatasetCore:
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
    ) -> DatasetCore:
        """A new dataset with :meth:`set_transform` applied."""
        out = copy.copy(self)
        out.set_transform(transform, columns, output_all_columns)
        return out

    @property
    def _internal(self) -> DatasetInternal:
        """The package-internal interface (for ops, io, iterable and the loader)."""
        return DatasetInternal(self)

    @property
    def cache_files(self) -> list[dict[str, str]]:
        """The Arrow files this dataset memory-maps, as ``[{"filename": path}]`` (empty when it
        lives in memory), as `datasets` lists them."""
        if self._cache_dir is None:
            return []
        return [{"filename": str(Path(self._cache_dir) / f)} for f in sorted(self._source_files)]


class DatasetInternal:
    """What the rest of the package may use of a :class:`Dataset` besides its public API.

    ``ops``, ``io``, ``iterable`` and the loader go through this view (``ds._internal``) instead
    of reading the dataset's private attributes, so the dataset's representation (a table, an
    optional index mapping, a format, an optional cache folder) can change in one place.
    """

    __slots__ = ("_ds",)

    def __init__(self, ds: DatasetCore) -> None:
        self._ds = ds

    @property
    def reader(self) -> TableReader:
        """Reads rows of the underlying table (table coordinates: map rows with table_rows)."""
        return self._ds._reader

    @property
    def indices(self) -> np.ndarray | None:
        """The index mapping (row i reads table row indices[i]), or None for table order."""
        return self._ds._index_map

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
    ) -> DatasetCore:
        """A dataset over ``table`` (as is) that keeps this one's format and cache folder.

        ``source_files`` names the cache files the new table maps (default: this dataset's).
        """
        ds = self._ds
        out = type(ds)._wrap(table, features if features is not None else ds._features)
        out._index_map = indices
        out._cache_dir = ds._cache_dir
        out._source_files = set(ds._source_files if source_files is None else source_files)
        out._split = ds._split
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

    def set_split(self, split: str | None) -> None:
        """Name the split this dataset was read as (``load_dataset`` does, as `datasets`)."""
        self._ds._split = None if split is None else NamedSplit(split)

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


def _check_on_mixed_types(value: Any) -> None:
    if value not in (None, "use_json"):
        raise ValueError(f'on_mixed_types must be None or "use_json", got {value!r}')


def _length(values: Any, column: str) -> int:
    try:
        return len(values)
    except TypeError:
        raise TypeError(
            f"column {column!r} must be a list or array of values, got {type(values).__name__}"
        ) from None


def conform_table(table: pa.Table, features: Features) -> pa.Table:
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
