"""Dataset operations: map, filter, select, shuffle, splits, column edits, concatenation.

Row selections (``select``, ``shuffle``, ``filter``) only build an index mapping; reads through it
gather rows in bulk. ``map`` writes its output record batch by record batch, to an Arrow file next
to a disk-backed dataset or in memory otherwise.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jaxfeed.features import Features
from jaxfeed.features.features import infer_column
from jaxfeed.features.struct import FeatureLike, decode_python, encode_column, pa_type_of
from jaxfeed.reader import normalize_rows

if TYPE_CHECKING:
    from jaxfeed.dataset import Dataset, DatasetDict


def _column_list(ds: Dataset, columns: str | Sequence[str] | None, what: str) -> list[str]:
    if columns is None:
        return []
    columns = [columns] if isinstance(columns, str) else list(columns)
    unknown = [c for c in columns if c not in ds.column_names]
    if unknown:
        raise ValueError(
            f"{what}: columns {unknown} are not in the dataset; its columns are {ds.column_names}"
        )
    return columns


# ---------------------------------------------------------------------------------- rows
def select(ds: Dataset, indices: Iterable[int] | np.ndarray) -> Dataset:
    if isinstance(indices, range) and indices.step == 1 and ds._internal.indices is None:
        rows, _ = normalize_rows(slice(indices.start, indices.stop), ds.num_rows)
        if len(indices) and (indices.start < 0 or indices.stop > ds.num_rows):
            raise IndexError(
                f"select: range {indices} is out of range for a dataset of {ds.num_rows} rows"
            )
        return ds._internal.derive(ds.data.slice(rows.start, rows.stop - rows.start))
    if not isinstance(indices, np.ndarray | list | tuple | range):
        indices = list(indices)
    rows, _ = normalize_rows(
        np.asarray(indices, dtype=np.int64) if len(indices) else [], ds.num_rows
    )
    return ds._internal.derive(ds.data, indices=ds._internal.table_rows(rows))


def shuffle(
    ds: Dataset, seed: int | None = None, generator: np.random.Generator | None = None
) -> Dataset:
    rng = generator if generator is not None else np.random.default_rng(seed)
    inner = ds._internal
    return inner.derive(ds.data, indices=inner.table_rows(rng.permutation(ds.num_rows)))


def flatten_indices(ds: Dataset) -> Dataset:
    if ds._internal.indices is None:
        return ds
    return ds._internal.derive(ds._internal.arrow().combine_chunks(), indices=None)


def _batches(ds: Dataset, batch_size: int | None) -> Iterable[tuple[int, int]]:
    n = ds.num_rows
    size = n if batch_size is None or batch_size <= 0 else int(batch_size)
    for start in range(0, n, max(size, 1)):
        yield start, min(start + size, n)


def _call(
    ds: Dataset,
    function: Callable,
    start: int,
    stop: int,
    batched: bool,
    with_indices: bool,
    input_columns: list[str],
    fn_kwargs: dict,
) -> list[Any]:
    """Run ``function`` on rows ``start:stop``: one call per batch, or one per row."""
    batch = ds._internal.read(slice(start, stop), single=False)
    if batched:
        args = [batch[c] for c in input_columns] if input_columns else [batch]
        if with_indices:
            args.append(list(range(start, stop)))
        return [function(*args, **fn_kwargs)]
    out = []
    for i in range(stop - start):
        row = {k: v[i] for k, v in batch.items()}
        args = [row[c] for c in input_columns] if input_columns else [row]
        if with_indices:
            args.append(start + i)
        out.append(function(*args, **fn_kwargs))
    return out


def filter(
    ds: Dataset,
    function: Callable,
    with_indices: bool = False,
    input_columns: str | Sequence[str] | None = None,
    batched: bool = False,
    batch_size: int | None = 1000,
    fn_kwargs: dict | None = None,
) -> Dataset:
    columns = _column_list(ds, input_columns, "filter")
    keep: list[np.ndarray] = []
    for start, stop in _batches(ds, batch_size):
        results = _call(ds, function, start, stop, batched, with_indices, columns, fn_kwargs or {})
        mask = np.asarray(results[0] if batched else results)
        if mask.shape != (stop - start,) or mask.dtype.kind not in "bi":
            raise ValueError(
                f"filter: the function must return one bool per row; rows {start}:{stop} gave "
                f"{mask.dtype} values of shape {mask.shape}"
            )
        keep.append(np.nonzero(mask)[0] + start)
    positions = np.concatenate(keep) if keep else np.zeros(0, dtype=np.int64)
    inner = ds._internal
    return inner.derive(ds.data, indices=inner.table_rows(positions.astype(np.int64)))


# ---------------------------------------------------------------------------------- map
class _Sink:
    """Collects output record batches in memory, or streams them to an Arrow file."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.tables: list[pa.Table] = []
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.path: Path | None = None
        self.tmp: Path | None = None

    def write(self, table: pa.Table) -> None:
        if self.directory is None:
            self.tables.append(table)
            return
        if self.writer is None:
            self.path = Path(self.directory) / f"cache-map-{uuid.uuid4().hex[:16]}.arrow"
            self.tmp = self.path.with_suffix(".arrow.tmp")
            self.writer = pa.ipc.new_stream(str(self.tmp), table.schema)
        self.writer.write_table(table)

    def finish(self, schema: pa.Schema) -> pa.Table:
        if self.writer is None:
            if not self.tables:
                return schema.empty_table()
            return pa.concat_tables(self.tables).combine_chunks()
        self.writer.close()
        os.replace(self.tmp, self.path)
        return pa.ipc.open_stream(pa.memory_map(str(self.path))).read_all()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.tmp.unlink(missing_ok=True)


def _as_columns(result: Any, rows: int | None) -> dict[str, Any]:
    if result is None:
        return {}
    if not isinstance(result, Mapping):
        raise TypeError(
            f"map: the function must return a dict of columns (or None), got {type(result).__name__}"
        )
    out = {}
    for name, values in result.items():
        if hasattr(values, "__array__") and not isinstance(values, np.ndarray | list):
            values = np.asarray(values)  # jax arrays and other array-likes
        out[name] = values
    return out


def _rows_to_columns(results: list[Any], start: int) -> dict[str, list]:
    columns: dict[str, list] = {}
    keys: list[str] | None = None
    for i, result in enumerate(results):
        row = _as_columns(result, None)
        if keys is None:
            keys = list(row)
            columns = {k: [] for k in keys}
        elif set(row) != set(keys):
            raise ValueError(
                f"map: row {start + i} returned keys {sorted(row)}, but earlier rows returned {sorted(keys)}"
            )
        for k in keys:
            value = row[k]
            columns[k].append(
                np.asarray(value)
                if hasattr(value, "__array__") and not isinstance(value, np.ndarray)
                else value
            )
    return columns


def map(
    ds: Dataset,
    function: Callable | None = None,
    with_indices: bool = False,
    input_columns: str | Sequence[str] | None = None,
    batched: bool = False,
    batch_size: int | None = 1000,
    remove_columns: str | Sequence[str] | None = None,
    features: Features | None = None,
    fn_kwargs: dict | None = None,
) -> Dataset:
    columns = _column_list(ds, input_columns, "map")
    remove = _column_list(ds, remove_columns, "map remove_columns")
    function = function if function is not None else (lambda *args: None)
    sink = _Sink(ds._internal.cache_dir)
    out_features: dict[str, FeatureLike] | None = None
    given = Features(features) if features is not None else None
    try:
        for start, stop in _batches(ds, batch_size):
            results = _call(
                ds, function, start, stop, batched, with_indices, columns, fn_kwargs or {}
            )
            new = (
                _as_columns(results[0], stop - start)
                if batched
                else _rows_to_columns(results, start)
            )
            lengths = {k: len(v) for k, v in new.items()}
            kept = [c for c in ds.column_names if c not in remove and c not in new]
            n_out = next(iter(lengths.values()), stop - start)
            if len(set(lengths.values())) > 1:
                raise ValueError(f"map: the returned columns differ in length: {lengths}")
            if n_out != stop - start and kept:
                raise ValueError(
                    f"map: rows {start}:{stop} gave {n_out} rows instead of {stop - start}; a function "
                    f"that changes the number of rows must remove the other columns {kept} (remove_columns=)"
                )
            if out_features is None:
                out_features = _output_features(ds, kept, new, given)
            arrays = []
            if kept:
                part = ds._internal.arrow(slice(start, stop), kept)
                arrays += [part.column(c) for c in kept]
            for name in new:
                arrays.append(encode_column(out_features[name], new[name], name))
            names = kept + list(new)
            schema = Features({k: out_features[k] for k in names}).arrow_schema
            sink.write(
                pa.Table.from_arrays(
                    [
                        _as_storage(a, schema.field(k).type)
                        for a, k in zip(arrays, names, strict=True)
                    ],
                    schema=schema,
                )
            )
        if out_features is None:  # empty dataset
            out_features = {c: ds.features[c] for c in ds.column_names if c not in remove}
        final = Features(out_features)
        table = sink.finish(final.arrow_schema)
    except BaseException:
        sink.abort()
        raise
    return ds._internal.derive(
        table,
        features=Features({k: final[k] for k in table.column_names}),
        indices=None,
        source_files=None if sink.path is None else {sink.path.name},
    )


def _as_storage(array: pa.Array | pa.ChunkedArray, t: pa.DataType) -> pa.Array | pa.ChunkedArray:
    return array if array.type == t else array.cast(t)


def _output_features(
    ds: Dataset, kept: list[str], new: dict[str, Any], given: Features | None
) -> dict[str, FeatureLike]:
    out: dict[str, FeatureLike] = {c: ds.features[c] for c in kept}
    for name, values in new.items():
        if given is not None and name in given:
            out[name] = given[name]
        else:
            out[name] = infer_column(values, name)[0]
    return out


# ---------------------------------------------------------------------------------- splits
def train_test_split(
    ds: Dataset,
    test_size: float | int | None = None,
    train_size: float | int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    stratify_by_column: str | None = None,
) -> DatasetDict:
    from jaxfeed.dataset import DatasetDict

    n = ds.num_rows
    n_test, n_train = _split_sizes(n, test_size, train_size)
    rng = np.random.default_rng(seed)
    if stratify_by_column is not None:
        if stratify_by_column not in ds.column_names:
            raise ValueError(
                f"stratify_by_column: column {stratify_by_column!r} is not in the dataset"
            )
        if not shuffle:
            raise ValueError("stratify_by_column needs shuffle=True")
        labels = np.asarray(ds.with_format("numpy")[stratify_by_column])
        test_idx, train_idx = _stratified(labels, n_test, n_train, rng)
    else:
        order = rng.permutation(n) if shuffle else np.arange(n)
        train_idx, test_idx = order[:n_train], order[n_train : n_train + n_test]
    return DatasetDict({"train": select(ds, train_idx), "test": select(ds, test_idx)})


def _split_sizes(
    n: int, test_size: float | int | None, train_size: float | int | None
) -> tuple[int, int]:
    def size(value: float | int, name: str) -> int:
        if isinstance(value, float):
            if not 0 < value < 1:
                raise ValueError(f"{name}={value} must be a fraction in (0, 1) or a row count")
            return int(np.ceil(value * n)) if name == "test_size" else int(np.floor(value * n))
        if not isinstance(value, int | np.integer) or not 0 < value < n:
            raise ValueError(
                f"{name}={value} must be a fraction in (0, 1) or a row count in [1, {n - 1}]"
            )
        return int(value)

    if test_size is None and train_size is None:
        test_size = 0.25
    n_test = (
        size(test_size, "test_size")
        if test_size is not None
        else n - size(train_size, "train_size")
    )
    n_train = size(train_size, "train_size") if train_size is not None else n - n_test
    if n_train + n_test > n or n_train <= 0 or n_test <= 0:
        raise ValueError(
            f"train ({n_train}) and test ({n_test}) rows do not fit in {n} rows, or one is empty"
        )
    return n_test, n_train


def _stratified(
    labels: np.ndarray, n_test: int, n_train: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    # Largest-remainder allocation of test rows per class, in proportion to class sizes.
    exact = counts * n_test / len(labels)
    per_class = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - per_class))[: n_test - per_class.sum()]:
        per_class[i] += 1
    test, train = [], []
    for c in range(len(classes)):
        members = rng.permutation(np.nonzero(inverse == c)[0])
        test.append(members[: per_class[c]])
        train.append(members[per_class[c] :])
    test_idx = rng.permutation(np.concatenate(test))
    train_idx = rng.permutation(np.concatenate(train))[:n_train]
    return test_idx, train_idx


# ---------------------------------------------------------------------------------- columns
def rename_columns(ds: Dataset, mapping: Mapping[str, str]) -> Dataset:
    _column_list(ds, list(mapping), "rename_columns")
    names = [mapping.get(c, c) for c in ds.column_names]
    if len(set(names)) != len(names):
        raise ValueError(f"rename_columns: the new names {names} are not unique")
    features = Features({mapping.get(k, k): v for k, v in ds.features.items()})
    table = ds.data.rename_columns(names).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def remove_columns(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    remove = set(_column_list(ds, columns, "remove_columns"))
    keep = [c for c in ds.column_names if c not in remove]
    features = Features({k: ds.features[k] for k in keep})
    table = ds.data.select(keep).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def select_columns(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    keep = _column_list(ds, columns, "select_columns")
    return remove_columns(ds, [c for c in ds.column_names if c not in keep])


def cast(ds: Dataset, features: Features) -> Dataset:
    features = Features(features)
    if set(features) != set(ds.column_names):
        raise ValueError(
            f"cast: features {list(features)} must name exactly the columns {ds.column_names}"
        )
    table = ds.data
    columns = []
    for name in ds.column_names:
        columns.append(_cast_column(table.column(name), ds.features[name], features[name], name))
    features = Features({k: features[k] for k in ds.column_names})
    return ds._internal.derive(
        pa.Table.from_arrays(columns, schema=features.arrow_schema),
        features=features,
        indices=ds._internal.indices,
    )


def cast_column(ds: Dataset, column: str, feature: FeatureLike) -> Dataset:
    _column_list(ds, column, "cast_column")
    return cast(ds, Features({**ds.features, column: feature}))


def _cast_column(
    column: pa.ChunkedArray, old: FeatureLike, new: FeatureLike, name: str
) -> pa.ChunkedArray:
    if old == new:
        return column
    want = pa_type_of(new)
    from jaxfeed.features import ClassLabel

    if not isinstance(new, ClassLabel):  # ClassLabel must check its range: go through encode
        try:
            return column.cast(want, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    values = []
    for chunk in column.chunks:
        values.extend(
            decode_python(old, chunk)
            if not getattr(old, "requires_decoding", False)
            else chunk.to_pylist()
        )
    return pa.chunked_array([encode_column(new, values, name)], type=want)


def concatenate_datasets(dsets: Sequence[Dataset], axis: int = 0) -> Dataset:
    """Join datasets row-wise (``axis=0``, same features) or column-wise (``axis=1``, same length).

    >>> from jaxfeed import Dataset, concatenate_datasets
    >>> a, b = Dataset.from_dict({"x": [1, 2]}), Dataset.from_dict({"x": [3]})
    >>> concatenate_datasets([a, b])["x"]
    [1, 2, 3]
    """
    dsets = list(dsets)
    if not dsets:
        raise ValueError("concatenate_datasets needs at least one dataset")
    first = dsets[0]
    if axis == 0:
        for i, other in enumerate(dsets[1:], start=1):
            if other.features != first.features:
                diff = next(
                    (
                        c
                        for c in set(first.features) | set(other.features)
                        if first.features.get(c) != other.features.get(c)
                    ),
                    None,
                )
                raise ValueError(
                    f"concatenate_datasets: dataset {i} differs from dataset 0 in column {diff!r}: "
                    f"{other.features.get(diff)!r} vs {first.features.get(diff)!r}"
                )
        schema = first.features.arrow_schema
        tables = [d._internal.arrow().cast(schema) for d in dsets]
        return first._internal.derive(pa.concat_tables(tables), indices=None)
    if axis == 1:
        names = [c for d in dsets for c in d.column_names]
        if len(set(names)) != len(names):
            raise ValueError(f"concatenate_datasets(axis=1): duplicate column names in {names}")
        if len({d.num_rows for d in dsets}) > 1:
            raise ValueError(
                f"concatenate_datasets(axis=1): row counts differ: {[d.num_rows for d in dsets]}"
            )
        features = Features({k: v for d in dsets for k, v in d.features.items()})
        columns = [d._internal.arrow().column(c) for d in dsets for c in d.column_names]
        return first._internal.derive(
            pa.Table.from_arrays(columns, schema=features.arrow_schema), features=features
        )
    raise ValueError(f"axis must be 0 or 1, got {axis!r}")


def from_generator(
    generator: Callable[..., Iterable[Mapping[str, Any]]],
    features: Features | None = None,
    gen_kwargs: dict | None = None,
    chunk_rows: int = 1000,
) -> Dataset:
    from jaxfeed.dataset import Dataset

    tables: list[pa.Table] = []
    rows: list[Mapping[str, Any]] = []
    names: list[str] | None = None

    def flush() -> None:
        nonlocal features
        chunk = Dataset.from_dict({k: [r.get(k) for r in rows] for k in names}, features=features)
        features = chunk.features
        tables.append(chunk.data)
        rows.clear()

    for i, row in enumerate(generator(**(gen_kwargs or {}))):
        if not isinstance(row, Mapping):
            raise TypeError(
                f"from_generator: item {i} is a {type(row).__name__}, expected a dict of column values"
            )
        if names is None:
            names = list(features) if features is not None else list(row)
        elif set(row) - set(names):
            raise ValueError(
                f"from_generator: item {i} has unknown columns {sorted(set(row) - set(names))}"
            )
        rows.append(row)
        if len(rows) >= chunk_rows:
            flush()
    if rows:
        flush()
    if not tables:
        if features is None:
            raise ValueError(
                "from_generator: the generator yielded no rows and no features were given"
            )
        return Dataset(Features(features).arrow_schema.empty_table(), features)
    return Dataset(pa.concat_tables(tables), features)
