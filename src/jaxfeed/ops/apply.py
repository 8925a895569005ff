"""Dataset operations: map, filter, select, shuffle, splits, column edits, concatenation.

Row selections (``select``, ``shuffle``, ``filter``) only build an index mapping; reads through it
gather rows in bulk. ``map`` writes its output record batch by record batch, to an Arrow file next
to a disk-backed dataset or in memory otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import math
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.core import DatasetCore
from jaxfeed.features import ClassLabel, FeatureError, Features, Json, LargeList, List, Value
from jaxfeed.features.array import _ArrayXD as FixedArray
from jaxfeed.features.features import infer_column
from jaxfeed.features.media import MediaFeature
from jaxfeed.features.sequence import Sequence as SequenceFeature
from jaxfeed.features.struct import FeatureLike, decode_python, encode_column, pa_type_of
from jaxfeed.features.value import check_float_overflow
from jaxfeed.parallel import check_num_proc, parallel_filter, parallel_map
from jaxfeed.reader import normalize_rows
from jaxfeed.settings import progress

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class


def _column_list(ds: Dataset, columns: str | Sequence[str] | None, what: str) -> list[str]:
    if columns is None:
        return []
    columns = [columns] if isinstance(columns, str) else list(columns)
    names = set(ds.column_names)  # one list, not one per column (wide tables)
    unknown = [c for c in columns if c not in names]
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
    if len(indices) and ds._internal.indices is None:
        wanted = np.asarray(indices)
        if (
            wanted.ndim == 1
            and wanted.dtype.kind in "iu"
            and wanted[0] >= 0
            and wanted[-1] < ds.num_rows
            and (len(wanted) == 1 or bool(np.all(np.diff(wanted) == 1)))
        ):  # contiguous: a slice of the table, no index mapping (as `datasets`)
            return ds._internal.derive(ds.data.slice(int(wanted[0]), len(wanted)))
    rows, _ = normalize_rows(
        np.asarray(indices, dtype=np.int64) if len(indices) else [], ds.num_rows
    )
    return ds._internal.derive(ds.data, indices=ds._internal.table_rows(rows))


def shuffle(
    ds: Dataset, seed: int | None = None, generator: np.random.Generator | None = None
) -> Dataset:
    if seed is not None and generator is not None:
        raise ValueError(
            "Both `seed` and `generator` were provided. Please specify just one of them."
        )
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise ValueError("The provided generator must be an instance of numpy.random.Generator")
    rng = generator if generator is not None else np.random.default_rng(_seed(seed))
    inner = ds._internal
    return inner.derive(ds.data, indices=inner.table_rows(rng.permutation(ds.num_rows)))


def _seed(seed: int | None) -> int:
    """``seed``, or one drawn from numpy's global generator as `datasets` draws it."""
    if seed is not None:
        return seed
    _, state, pos, *_ = np.random.get_state()
    seed = int(state[pos] if pos < 624 else state[0])
    np.random.random()  # advance the global generator one step, as there
    return seed


def flatten_indices(ds: Dataset) -> Dataset:
    if ds._internal.indices is None:
        return ds
    return ds._internal.derive(ds._internal.arrow().combine_chunks(), indices=None)


def _batches(
    ds: Dataset, batch_size: int | None, drop_last_batch: bool = False
) -> Iterable[tuple[int, int]]:
    n = ds.num_rows
    size = n if batch_size is None or batch_size <= 0 else int(batch_size)
    size = max(size, 1)
    stop_at = n - (n % size) if drop_last_batch else n
    for start in range(0, stop_at, size):
        yield start, min(start + size, n)


def _run(function: Callable, calls: list[tuple[list, dict]]) -> list[Any]:
    """Call ``function`` once per argument list; coroutine functions run concurrently."""
    if not inspect.iscoroutinefunction(function):
        return [function(*args, **kwargs) for args, kwargs in calls]

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(function(*a, **k) for a, k in calls)))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    # Called from inside a running loop (a notebook): run ours on a helper thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, gather()).result()


def _row_of(batch: Any, i: int) -> Any:
    if isinstance(batch, pa.Table):
        return batch.slice(i, 1)
    if hasattr(batch, "iloc"):
        return batch.iloc[i : i + 1]
    return {k: v[i] for k, v in batch.items()}


def _call(
    ds: Dataset,
    function: Callable,
    start: int,
    stop: int,
    batched: bool,
    with_indices: bool,
    input_columns: list[str],
    fn_kwargs: dict,
    rank: tuple[int | None] | None = None,
    strip: Sequence[str] = (),
) -> tuple[Any, list[Any]]:
    """Run ``function`` on rows ``start:stop``: one call per batch, or one per row.

    ``rank`` (``with_rank=True``) is passed after the indices, as `datasets` passes it. A
    result that is the very dict the function was given (``lambda r: r``) loses the ``strip``
    columns (``remove_columns``), as there. Returns the batch given and the results.
    """
    batch = ds._internal.read(slice(start, stop), single=False)
    if batched:
        args = [batch[c] for c in input_columns] if input_columns else [batch]
        if with_indices:
            args.append(list(range(start, stop)))
        if rank is not None:
            args.append(rank[0])
        calls = [(args, fn_kwargs)]
    else:
        calls = []
        for i in range(stop - start):
            row = _row_of(batch, i)
            args = [row[c] for c in input_columns] if input_columns else [row]
            if with_indices:
                args.append(start + i)
            if rank is not None:
                args.append(rank[0])
            calls.append((args, fn_kwargs))
    results = _run(function, calls)
    if strip and not input_columns:
        for i, ((given, *_), _kw) in enumerate(calls):
            if results[i] is given and isinstance(given, dict):
                results[i] = {k: v for k, v in given.items() if k not in strip}
    return batch, results


def filter(
    ds: Dataset,
    function: Callable,
    with_indices: bool = False,
    input_columns: str | Sequence[str] | None = None,
    batched: bool = False,
    batch_size: int | None = 1000,
    fn_kwargs: dict | None = None,
    num_proc: int | None = None,
    with_rank: bool = False,
    rank: int | None = None,
    desc: str | None = None,
) -> Dataset:
    columns = _column_list(ds, input_columns, "filter")
    if check_num_proc(num_proc) > 1 and ds.num_rows:
        return parallel_filter(
            ds,
            num_proc,
            dict(
                run=filter,
                function=function,
                with_indices=with_indices,
                with_rank=with_rank,
                input_columns=input_columns,
                batched=batched,
                batch_size=batch_size,
                fn_kwargs=fn_kwargs,
            ),
        )
    keep: list[np.ndarray] = []
    ranked = (rank,) if with_rank else None
    with progress(ds.num_rows, desc or "Filter") as bar:
        for start, stop in _batches(ds, batch_size):
            _, results = _call(
                ds, function, start, stop, batched, with_indices, columns, fn_kwargs or {}, ranked
            )
            bar.update(stop - start)
            keep.append(_kept(results, batched, start, stop))
    positions = np.concatenate(keep) if keep else np.zeros(0, dtype=np.int64)
    inner = ds._internal
    return inner.derive(ds.data, indices=inner.table_rows(positions.astype(np.int64)))


def _kept(results: list[Any], batched: bool, start: int, stop: int) -> np.ndarray:
    """The dataset rows of ``start:stop`` the filter function kept."""
    mask = np.asarray(results[0] if batched else results)
    if mask.shape != (stop - start,) or mask.dtype.kind not in "bi":
        raise ValueError(
            f"filter: the function must return one bool per row; rows {start}:{stop} gave "
            f"{mask.dtype} values of shape {mask.shape}"
        )
    return np.nonzero(mask)[0] + start


# ---------------------------------------------------------------------------------- map
class _Sink:
    """Collects output record batches in memory, or streams them to an Arrow file."""

    def __init__(self, directory: str | None, path: str | os.PathLike | None = None) -> None:
        self.directory = directory
        self.tables: list[pa.Table] = []
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.path: Path | None = Path(path) if path is not None else None
        self.tmp: Path | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.directory = str(self.path.parent)

    def write(self, table: pa.Table) -> None:
        if self.directory is None:
            self.tables.append(table)
            return
        if self.writer is None:
            if self.path is None:
                self.path = Path(self.directory) / f"cache-map-{uuid.uuid4().hex[:16]}.arrow"
            self.tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp")
            self.writer = pa.ipc.new_stream(str(self.tmp), table.schema)
        self.writer.write_table(table)

    def finish(self, schema: pa.Schema) -> pa.Table:
        if self.writer is None:
            self.path = None
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


_BATCH_TYPES = (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)


def _as_columns(result: Any, batched: bool) -> dict[str, Any] | pa.Table | None:
    """A function's result as columns: a dict of column values, an Arrow table, or None."""
    if result is None:
        return None
    if isinstance(result, pa.Table):
        return result
    if hasattr(result, "iloc") and hasattr(result, "columns"):  # a pandas DataFrame
        return pa.Table.from_pandas(result, preserve_index=False)
    if not isinstance(result, Mapping):
        raise TypeError(
            "map: the function must return a dict of columns, a pyarrow.Table, a pandas.DataFrame "
            f"or None, got {type(result).__name__}"
        )
    out = {}
    for name, values in result.items():
        if hasattr(values, "to_numpy") and not isinstance(values, pa.Array | pa.ChunkedArray):
            values = values.to_numpy()  # pandas Series
        elif hasattr(values, "__array__") and not isinstance(
            values, np.ndarray | list | np.generic
        ):
            values = np.asarray(values)  # jax arrays and other array-likes
        if batched and not isinstance(values, _BATCH_TYPES):
            raise TypeError(
                f"map: with batched=True the function must return a list or array per column; "
                f"column {name!r} is a {type(values).__name__}"
            )
        out[name] = values
    return out


class MapOutputError(KeyError, ValueError):
    """Rows of one ``map`` returned different columns (a ``KeyError``, as in `datasets`)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _rows_to_columns(results: list[Any], start: int) -> dict[str, list] | pa.Table | None:
    """Per-row results as columns. As in `datasets`, the first row's keys decide the columns: a
    later row missing one is a ``KeyError``; a later row with more keys (which `datasets` drops
    silently) is refused too."""
    if all(r is None for r in results):
        return None
    tables = [isinstance(r, pa.Table) or hasattr(r, "iloc") for r in results]
    if any(tables):
        for i, result in enumerate(results):
            if tables[i] and len(result) != 1:
                raise ValueError(
                    "Only single-row pyarrow tables are allowed but got table with "
                    f"{len(result)} rows (map, row {start + i}: without batched=True the function "
                    "returns one row per row)"
                )
        return pa.concat_tables([_as_columns(r, False) for r in results])
    columns: dict[str, list] = {}
    keys: list[str] | None = None
    for i, result in enumerate(results):
        row = _as_columns(result, False) or {}
        if keys is None:
            keys = list(row)
            columns = {k: [] for k in keys}
        elif set(row) != set(keys):
            missing = sorted(set(keys) - set(row))
            raise MapOutputError(
                f"map: row {start + i} returned keys {sorted(row)}, but row {start} returned "
                f"{sorted(keys)}" + (f" (missing {missing})" if missing else "")
            )
        for k in keys:
            value = row[k]
            if hasattr(value, "__array__") and not isinstance(value, np.ndarray | np.generic):
                value = np.asarray(value)
            columns[k].append(value)
    return columns


def map(
    ds: Dataset,
    function: Callable | None = None,
    with_indices: bool = False,
    input_columns: str | Sequence[str] | None = None,
    batched: bool = False,
    batch_size: int | None = 1000,
    drop_last_batch: bool = False,
    remove_columns: str | Sequence[str] | None = None,
    keep_in_memory: bool = False,
    cache_file_name: str | os.PathLike | None = None,
    features: Features | None = None,
    fn_kwargs: dict | None = None,
    try_original_type: bool | None = True,
    num_proc: int | None = None,
    with_rank: bool = False,
    rank: int | None = None,
    desc: str | None = None,
    on_mixed_types: str | None = "use_json",
) -> Dataset:
    """See :meth:`jaxfeed.Dataset.map`.

    The output follows `datasets`' merge rule: ``{**input columns minus remove_columns,
    **returned columns}`` (a returned column keeps its input position, even if it is in
    ``remove_columns``), except on arrow/pandas-formatted datasets, where the returned table is the
    whole output, as there. A returned column named like an input column keeps that column's
    feature when its values still fit it (``try_original_type``); other columns are inferred.
    """
    columns = _column_list(ds, input_columns, "map")
    remove = _column_list(ds, remove_columns, "map remove_columns")
    if ds.num_rows == 0:
        return remove_columns_(ds, remove) if remove else ds
    if check_num_proc(num_proc) > 1 and function is not None:
        out = parallel_map(
            ds,
            num_proc,
            dict(
                run=map,
                function=function,
                with_indices=with_indices,
                with_rank=with_rank,
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
                on_mixed_types=on_mixed_types,
            ),
        )
        if out is not None:
            return out
        return ds  # only side effects: unchanged, remove_columns unused (as below, and there)
    function = function if function is not None else (lambda *args: None)
    directory = None if keep_in_memory else ds._internal.cache_dir
    sink = _Sink(directory, None if keep_in_memory else cache_file_name)
    out_features: Features | None = None
    given = Features(features) if features is not None else None
    tabular = ds.format["type"] in ("arrow", "pandas")
    strip = remove if ds.format["type"] is None else ()
    stack = contextlib.ExitStack()
    ranked = (rank,) if with_rank else None
    updated = False
    try:
        bar = stack.enter_context(progress(ds.num_rows, desc or "Map"))
        for start, stop in _batches(
            ds, batch_size if batched else 1000, drop_last_batch and batched
        ):
            args = (batched, with_indices, columns, fn_kwargs or {}, ranked, strip)
            _, results = _call(ds, function, start, stop, *args)
            bar.update(stop - start)
            new = _as_columns(results[0], True) if batched else _rows_to_columns(results, start)
            if new is None:
                if updated:
                    raise ValueError(
                        f"map: rows {start}:{stop} returned None after earlier rows returned values"
                    )
                continue
            updated = True
            table = _merge(ds, start, stop, new, remove, tabular)
            if out_features is None:
                out_features = _output_features(
                    ds, table, new, given, try_original_type, on_mixed_types
                )
            sink.write(_encode_output(table, out_features))
        if (
            not updated
        ):  # only side effects: the dataset as it was (remove_columns unused, as there)
            sink.abort()
            return ds
        table = sink.finish(out_features.arrow_schema)
    except BaseException:
        sink.abort()
        raise
    finally:
        stack.close()
    out = ds._internal.derive(
        table,
        features=out_features,
        indices=None,
        source_files=None if sink.path is None else {sink.path.name},
    )
    formatted = ds._internal.format_state()["_format_columns"]
    if formatted is not None:  # as `datasets`: new columns join the formatted ones
        fmt = ds.format
        kept = [c for c in formatted if c in out.column_names]
        before = set(ds.column_names)
        added = [c for c in out.column_names if c not in before]
        out.set_format(fmt["type"], kept + added, fmt["output_all_columns"], **fmt["format_kwargs"])
    return out


def _merge(
    ds: Dataset,
    start: int,
    stop: int,
    new: dict[str, Any] | pa.Table,
    remove: list[str],
    tabular: bool,
) -> dict[str, Any]:
    """``{**inputs minus remove_columns, **returned}`` for one batch: Arrow arrays for the inputs."""
    if isinstance(new, pa.Table):
        returned = {name: new.column(name) for name in new.column_names}
    else:
        returned = dict(new)
    lengths = {k: len(v) for k, v in returned.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"map: the returned columns differ in length: {lengths}")
    if tabular or isinstance(new, pa.Table):
        return returned  # a table (or a table-formatted input) is the whole output, as there
    kept = [c for c in ds.column_names if c not in remove]
    n_out = next(iter(lengths.values()), stop - start)
    stale = [c for c in kept if c not in returned]
    if n_out != stop - start and stale:
        raise ValueError(
            f"map: rows {start}:{stop} gave {n_out} rows instead of {stop - start}; a function "
            f"that changes the number of rows must remove the other columns {stale} (remove_columns=)"
        )
    inputs = ds._internal.arrow(slice(start, stop), stale) if stale else None
    # `datasets`' writer keeps the input columns' order, then appends the new columns.
    merged: dict[str, Any] = {}
    for c in ds.column_names:
        if c in returned:
            merged[c] = returned[c]
        elif c in stale:
            merged[c] = inputs.column(c)
    merged.update({k: v for k, v in returned.items() if k not in merged})
    return merged


def _output_features(
    ds: Dataset,
    merged: dict[str, Any],
    new: dict[str, Any] | pa.Table,
    given: Features | None,
    try_original_type: bool | None,
    on_mixed_types: str | None = "use_json",
) -> Features:
    """The output features, decided on the first batch, as `datasets`' writer decides them."""
    returned = set(new.column_names if isinstance(new, pa.Table) else new)
    out: dict[str, FeatureLike] = {}
    for name, values in merged.items():
        if given is not None and name in given:
            out[name] = given[name]
        elif name not in returned:
            out[name] = ds.features[name]
        elif isinstance(values, pa.Array | pa.ChunkedArray):
            out[name] = infer_column(values, name)[0]
            if name in ds.features and pa_type_of(ds.features[name]) == values.type:
                out[name] = ds.features[name]
        else:
            out[name] = _infer_returned(ds, name, values, try_original_type, on_mixed_types)
    return Features(out)


def _infer_returned(
    ds: Dataset,
    name: str,
    values: Any,
    try_original_type: bool | None,
    on_mixed_types: str | None = "use_json",
) -> FeatureLike:
    original = ds.features.get(name)
    if original is not None and try_original_type:
        try:
            encode_column(original, values, name)
            return original
        except (FeatureError, TypeError, ValueError, OverflowError, pa.ArrowException):
            pass
    try:
        feature = as_ragged(infer_column(values, name)[0])
    except FeatureError:
        if on_mixed_types != "use_json":
            raise
        try:  # values of several types: one JSON value per row, as `datasets` stores them
            Json().encode(values, name)
        except (FeatureError, TypeError, ValueError):
            raise FeatureError(
                name, None, "values of one type, or JSON values", values[:3]
            ) from None
        return Json()
    if original is not None and pa_type_of(feature) == pa_type_of(original):
        return original  # same storage: keep the original feature (a ClassLabel stays one)
    return feature


def as_ragged(feature: FeatureLike) -> FeatureLike:
    """Fixed-shape inference (numpy arrays) as the variable-length lists `datasets` infers."""
    if isinstance(feature, Mapping):
        return {k: as_ragged(v) for k, v in feature.items()}
    if isinstance(feature, FixedArray):
        inner: FeatureLike = Value(feature.dtype)
        for _ in feature.shape:
            inner = List(inner)
        return inner
    if isinstance(feature, SequenceFeature) and not isinstance(feature, LargeList):
        return List(as_ragged(feature.feature))
    return feature


def _encode_output(merged: dict[str, Any], features: Features) -> pa.Table:
    arrays = []
    for name, feature in features.items():
        if name not in merged:
            raise ValueError(
                f"map: column {name!r} of the first batch's output is missing from a later batch"
            )
        values = merged[name]
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if isinstance(values, pa.Array) and values.type == pa_type_of(feature):
            arrays.append(values)
        else:
            arrays.append(encode_column(feature, values, name))
    extra = [k for k in merged if k not in features]
    if extra:
        raise ValueError(f"map: a later batch returned columns {extra} the first batch did not")
    return pa.Table.from_arrays(arrays, schema=features.arrow_schema)


# ---------------------------------------------------------------------------------- splits
def train_test_split(
    ds: Dataset,
    test_size: float | int | None = None,
    train_size: float | int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    stratify_by_column: str | None = None,
    generator: np.random.Generator | None = None,
) -> dict[str, Dataset]:
    """Split as `datasets` splits: same sizes, same checks, same rows for the same seed;
    ``{"train", "test"}`` (``Dataset.train_test_split`` makes it a ``DatasetDict``)."""
    n = ds.num_rows
    if n == 0:
        return {"train": ds, "test": ds}
    n_test, n_train = _split_sizes(n, test_size, train_size)
    if generator is None and shuffle:
        generator = np.random.default_rng(_seed(seed))
    if not shuffle:
        if stratify_by_column is not None:
            raise ValueError("Stratified train/test split is not implemented for `shuffle=False`")
        train_idx, test_idx = np.arange(n_train), np.arange(n_train, n_train + n_test)
    elif stratify_by_column is not None:
        if stratify_by_column not in ds.features:
            raise ValueError(f"Key {stratify_by_column} not found in {list(ds.features)}")
        if not isinstance(ds.features[stratify_by_column], ClassLabel):
            raise ValueError(
                f"Stratifying by column is only supported for ClassLabel column, and column "
                f"{stratify_by_column} is {type(ds.features[stratify_by_column]).__name__}."
            )
        labels = np.asarray(ds._internal.arrow(columns=[stratify_by_column]).column(0))
        train_idx, test_idx = _stratified(labels, n_train, n_test, generator, stratify_by_column)
    else:
        order = generator.permutation(n)
        test_idx, train_idx = order[:n_test], order[n_test : n_test + n_train]
    return {
        "train": select(ds, np.asarray(train_idx, dtype=np.int64)),
        "test": select(ds, np.asarray(test_idx, dtype=np.int64)),
    }


def _split_sizes(
    n: int, test_size: float | int | None, train_size: float | int | None
) -> tuple[int, int]:
    """Row counts of the test and train splits, with `datasets`' (scikit-learn's) checks."""
    if test_size is None and train_size is None:
        test_size = 0.25
    for name, value in (("test_size", test_size), ("train_size", train_size)):
        if value is not None and not isinstance(value, int | float):
            raise ValueError(f"Invalid value for {name}: {value} of type {type(value)}")
        if (isinstance(value, int) and not 0 < value < n) or (
            isinstance(value, float) and not 0 < value < 1
        ):
            raise ValueError(
                f"{name}={value} should be either positive and smaller than the number of "
                f"samples {n} or a float in the (0, 1) range"
            )
    if (
        isinstance(train_size, float)
        and isinstance(test_size, float)
        and train_size + test_size > 1
    ):
        raise ValueError(
            f"The sum of test_size and train_size = {train_size + test_size}, should be in the "
            "(0, 1) range. Reduce test_size and/or train_size."
        )
    n_test = math.ceil(test_size * n) if isinstance(test_size, float) else test_size
    n_train = math.floor(train_size * n) if isinstance(train_size, float) else train_size
    if train_size is None:
        n_train = n - n_test
    elif test_size is None:
        n_test = n - n_train
    if n_train + n_test > n:
        raise ValueError(
            f"The sum of train_size and test_size = {n_train + n_test}, should be smaller than "
            f"the number of samples {n}. Reduce test_size and/or train_size."
        )
    if n_train == 0:
        raise ValueError(
            f"With n_samples={n}, test_size={test_size} and train_size={train_size}, the resulting "
            "train set will be empty. Adjust any of the aforementioned parameters."
        )
    return int(n_test), int(n_train)


def _approximate_mode(counts: np.ndarray, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Per-class counts of a draw of ``n_draws`` (scikit-learn's rule, as `datasets` uses it)."""
    continuous = n_draws * counts / counts.sum()
    floored = np.floor(continuous)
    need = int(n_draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add = min(len(inds), need)
            inds = rng.choice(inds, size=add, replace=False)
            floored[inds] += 1
            need -= add
            if need == 0:
                break
    return floored.astype(np.int64)


def _stratified(
    labels: np.ndarray, n_train: int, n_test: int, rng: np.random.Generator, column: str
) -> tuple[np.ndarray, np.ndarray]:
    classes, y = np.unique(labels, return_inverse=True)
    counts = np.bincount(y)
    if counts.min() < 2:
        raise ValueError(
            f"The least populated class in {column} column has only 1 member, which is too few. "
            "The minimum number of groups for any class cannot be less than 2."
        )
    if n_train < len(classes):
        raise ValueError(
            f"The train_size = {n_train} should be greater or equal to the number of classes = "
            f"{len(classes)}"
        )
    if n_test < len(classes):
        raise ValueError(
            f"The test_size = {n_test} should be greater or equal to the number of classes = "
            f"{len(classes)}"
        )
    members = np.split(np.argsort(y, kind="mergesort"), np.cumsum(counts)[:-1])
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i in range(len(classes)):
        picked = members[i].take(rng.permutation(counts[i]), mode="clip")
        train.extend(picked[: n_i[i]])
        test.extend(picked[n_i[i] : n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)


# ---------------------------------------------------------------------------------- columns
def rename_columns(ds: Dataset, mapping: Mapping[str, str]) -> Dataset:
    _column_list(ds, list(mapping), "rename_columns")
    for old, new in mapping.items():
        if not new:
            raise ValueError(f"New column name is empty (renaming column {old!r}).")
        if new in ds.column_names and mapping.get(new, new) == new and new != old:
            raise ValueError(
                f"New column name {new} already in the dataset. Please choose a column name "
                f"which is not already in the dataset. Current columns in the dataset: "
                f"{ds.column_names}"
            )
    names = [mapping.get(c, c) for c in ds.column_names]
    if len(set(names)) != len(names):
        raise ValueError(
            f"New column names must all be different, but this column mapping has "
            f"{len(names) - len(set(names))} duplicates (new names {names})"
        )
    features = Features({mapping.get(k, k): v for k, v in ds.features.items()})
    table = ds.data.rename_columns(names).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def remove_columns_(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    return remove_columns(ds, columns)


def remove_columns(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    remove = set(_column_list(ds, columns, "remove_columns"))
    keep = [c for c in ds.column_names if c not in remove]
    features = Features({k: ds.features[k] for k in keep})
    table = ds.data.select(keep).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def select_columns(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    """The given columns, in the order given (as `datasets`)."""
    keep = list(dict.fromkeys(_column_list(ds, columns, "select_columns")))
    features = Features({k: ds.features[k] for k in keep})
    table = ds.data.select(keep).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def cast(ds: Dataset, features: Features, batch_size: int | None = 1000) -> Dataset:
    features = Features(features)
    if set(features) != set(ds.column_names):
        raise ValueError(
            f"cast: features {list(features)} must name exactly the columns {ds.column_names}"
        )
    table = ds.data
    columns = []
    for name in ds.column_names:
        columns.append(
            _cast_column(table.column(name), ds.features[name], features[name], name, batch_size)
        )
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
    column: pa.ChunkedArray,
    old: FeatureLike,
    new: FeatureLike,
    name: str,
    batch_size: int | None = 1000,
) -> pa.ChunkedArray:
    if old == new:
        return column
    want = pa_type_of(new)
    if not isinstance(new, ClassLabel):  # ClassLabel must check its range: go through encode
        try:
            out = column.cast(want, safe=True)
            return check_float_overflow(column, out, name, f"a {want} value")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    # Python path, ``batch_size`` rows at a time; errors name the row in the whole column.
    size = batch_size if batch_size and batch_size > 0 else max(len(column), 1)
    parts = []
    for start in range(0, len(column), size):
        chunk = column.slice(start, size).combine_chunks()
        values = (
            decode_python(old, chunk)
            if not getattr(old, "requires_decoding", False)
            else chunk.to_pylist()
        )
        try:
            parts.append(encode_column(new, values, name))
        except FeatureError as err:
            row = None if err.row is None else err.row + start
            raise FeatureError(name, row, err.expected, err.value) from None
    return pa.chunked_array(parts, type=want)


def _check_map_style(dsets: Sequence[Any], what: str) -> None:
    """Refuse streams: jaxfeed joins and interleaves datasets with rows, not IterableDatasets."""
    for i, d in enumerate(dsets):
        if not isinstance(d, DatasetCore):
            raise TypeError(
                f"{what}: item {i} is a {type(d).__name__}; jaxfeed joins Datasets (an "
                "IterableDataset is not supported here)"
            )


def concatenate_datasets(dsets: Sequence[Dataset], axis: int = 0) -> Dataset:
    """Join datasets row-wise (``axis=0``, same features) or column-wise (``axis=1``, same length).

    >>> from jaxfeed import Dataset, concatenate_datasets
    >>> a, b = Dataset.from_dict({"x": [1, 2]}), Dataset.from_dict({"x": [3]})
    >>> concatenate_datasets([a, b])["x"][:]
    [1, 2, 3]
    """
    dsets = list(dsets)
    _check_map_style(dsets, "concatenate_datasets")
    if not dsets:
        raise ValueError("concatenate_datasets needs at least one dataset")
    first = dsets[0]
    if axis == 0:
        # As `datasets`: columns are the union in order of appearance; a column one dataset
        # lacks is filled with nulls; features of a shared column must agree.
        features: dict[str, FeatureLike] = {}
        for i, d in enumerate(dsets):
            for name, feature in d.features.items():
                known = features.get(name)
                if known is None or known == Value("null"):
                    features[name] = feature
                elif feature != known and feature != Value("null"):
                    raise ValueError(
                        f"concatenate_datasets: dataset {i} differs from an earlier dataset in "
                        f"column {name!r}: {feature!r} vs {known!r}"
                    )
        merged = Features(features)
        schema = merged.arrow_schema
        tables = []
        for d in dsets:
            part = d._internal.arrow()
            columns = [
                part.column(c)
                if c in part.column_names
                else pa.nulls(len(part), schema.field(c).type)
                for c in merged
            ]
            tables.append(pa.Table.from_arrays(columns, schema=schema) if columns else part)
        out = first._internal.derive(pa.concat_tables(tables), features=merged, indices=None)
        if any(d.format != first.format for d in dsets):
            out.reset_format()  # disparate formats: reset, as `datasets` does
        return out
    if axis == 1:
        names = [c for d in dsets for c in d.column_names]
        if len(set(names)) != len(names):
            twice = sorted({c for c in names if names.count(c) > 1})
            raise ValueError(
                f"The table can't have duplicated columns but columns {twice} are duplicated. "
                f"(concatenate_datasets(axis=1) of columns {names})"
            )
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


# ---------------------------------------------------------------------------------- more
def unique(ds: Dataset, column: str) -> list:
    _column_list(ds, column, "unique")
    # As `datasets`: the table's order, unless the index mapping drops or repeats rows.
    indices = ds._internal.indices
    if indices is not None and len(indices) != ds.data.num_rows:
        values = ds._internal.arrow(columns=[column]).column(column)
    else:
        values = ds.data.column(column)
    return values.unique().to_pylist()


def sort(
    ds: Dataset,
    column_names: str | Sequence[str],
    reverse: bool | Sequence[bool] = False,
    null_placement: str = "at_end",
) -> Dataset:
    if ds.num_rows == 0:
        return ds
    names = [column_names] if isinstance(column_names, str) else list(column_names)
    for name in names:
        if not isinstance(name, str) or name not in ds.column_names:
            raise ValueError(
                f"Column '{name}' not found in the dataset. Please provide a column selected in: "
                f"{ds.column_names}"
            )
    if isinstance(reverse, bool):
        reverse = [reverse] * len(names)
    elif len(reverse) != len(names):
        raise ValueError(
            "Parameter 'reverse' should be either a boolean or a list of booleans with the same "
            "length as 'column_names'."
        )
    placement = {"first": "at_start", "last": "at_end"}.get(null_placement, null_placement)
    if placement not in ("at_start", "at_end"):
        raise ValueError(
            f"null_placement '{null_placement}' is an invalid parameter value. Must be either "
            "'last', 'at_end', 'first' or 'at_start'."
        )
    keys = [
        (n, "descending" if r else "ascending", placement)
        for n, r in zip(names, reverse, strict=True)
    ]
    order = pc.sort_indices(ds._internal.arrow(columns=names), sort_keys=keys)
    return select(ds, order.to_numpy(zero_copy_only=False))


def add_column(ds: Dataset, name: str, column: Any, feature: FeatureLike | None = None) -> Dataset:
    if name in ds.column_names:
        raise ValueError(
            f"The table can't have duplicated columns but columns {[name]} are duplicated."
        )
    if len(column) != ds.num_rows:
        raise ValueError(
            f"add_column: column {name!r} has {len(column)} values for {ds.num_rows} rows"
        )
    if feature is not None:
        array = encode_column(feature, column, name)
    else:
        feature, array = infer_column(column, name)
    features = Features({**ds.features, name: feature})
    base = ds._internal.arrow()
    table = pa.Table.from_arrays(
        [base.column(c) for c in ds.column_names] + [array], schema=features.arrow_schema
    )
    return ds._internal.derive(table, features=features, indices=None)


def add_item(ds: Dataset, item: Mapping[str, Any]) -> Dataset:
    if not isinstance(item, Mapping):
        raise TypeError(f"add_item needs a dict of column values, got {type(item).__name__}")
    # As `datasets`: new keys become columns (earlier rows None), and a column of nulls takes the
    # item's type.
    base = ds._internal.arrow().cast(ds.features.arrow_schema)
    features = dict(ds.features)
    for name in ds.column_names:
        value = item.get(name)
        if base.column(name).type == pa.null() and value is not None:
            features[name] = infer_column([value], name)[0]
    for name, value in item.items():
        if name not in features:
            features[name] = infer_column([value], name)[0]
    out = Features(features)
    columns = [
        base.column(c).cast(pa_type_of(out[c]))
        if c in base.column_names
        else pa.nulls(base.num_rows, pa_type_of(out[c]))
        for c in out
    ]
    base = pa.Table.from_arrays(columns, schema=out.arrow_schema)
    row = type(ds).from_dict({k: [item.get(k)] for k in out}, features=out)
    table = pa.concat_tables([base, row.data])
    return ds._internal.derive(table, features=out, indices=None)


def flatten(ds: Dataset, max_depth: int = 16) -> Dataset:
    table = ds._internal.arrow()
    features: dict[str, FeatureLike] = dict(ds.features)
    for _ in range(1, max_depth):
        flat: dict[str, FeatureLike] = {}
        changed = False
        for name, feature in features.items():
            sub = _struct_fields(feature)
            if sub is None:
                flat[name] = feature
                continue
            changed = True
            for key, f in sub.items():
                flat[f"{name}.{key}"] = f
        if not changed:
            break
        features = flat
        table = table.flatten()
    out = Features(features)
    table = table.select(list(out)).cast(out.arrow_schema)
    return ds._internal.derive(table, features=out, indices=None)


def _struct_fields(feature: FeatureLike) -> dict[str, FeatureLike] | None:
    if isinstance(feature, Mapping):
        return dict(feature)
    if isinstance(feature, MediaFeature) and not feature.decode:  # stored dicts, as `datasets`
        return {"bytes": Value("binary"), "path": Value("string")}
    flat = getattr(feature, "flatten", None)
    if callable(flat) and not isinstance(feature, Features):
        return flat()
    return None


def class_encode_column(ds: Dataset, column: str, include_nulls: bool = False) -> Dataset:
    _column_list(ds, column, "class_encode_column")
    feature = ds.features[column]
    if not isinstance(feature, Value):
        raise ValueError(
            f"Class encoding is only supported for Value column, and column {column} is "
            f"{type(feature).__name__}."
        )
    values = ds._internal.arrow(columns=[column]).column(column).to_pylist()
    present = [v for v in dict.fromkeys(values) if include_nulls or v is not None]
    names = sorted(str(v) for v in present)
    label = ClassLabel(names=names)
    ids = [label.str2int(str(v)) if (include_nulls or v is not None) else None for v in values]
    features = Features({**ds.features, column: label})
    base = ds._internal.arrow()
    arrays = [label.encode(ids, column) if c == column else base.column(c) for c in ds.column_names]
    table = pa.Table.from_arrays(arrays, schema=features.arrow_schema)
    return ds._internal.derive(table, features=features, indices=None)


def batch(
    ds: Dataset,
    batch_size: int | None = None,
    by_column: str | Sequence[str] | None = None,
    drop_last_batch: bool = False,
) -> Dataset:
    """Rows grouped: each row holds lists of ``batch_size`` values of every column (or of a run of
    rows equal in ``by_column``), features ``List(feature)``; built with Arrow offsets, no copy
    of the values."""
    if batch_size is None and by_column is None:
        raise ValueError("Dataset.batch() misses `batch_size` or `by_column` argument.")
    table = ds._internal.arrow()
    n = table.num_rows
    if by_column is not None:
        names = _column_list(ds, by_column, "batch(by_column=)")
        keys = table.select(names)
        change = np.zeros(max(n - 1, 0), dtype=bool)
        for name in names:
            values = keys.column(name)
            differs = pc.not_equal(values.slice(1), values.slice(0, max(n - 1, 0)))
            change |= pc.fill_null(differs, False).to_numpy(zero_copy_only=False)
        offsets = np.concatenate([[0], np.nonzero(change)[0] + 1, [n]]) if n else np.zeros(1)
    else:
        if not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        stop = n - n % batch_size if drop_last_batch else n
        offsets = np.append(np.arange(0, stop, batch_size), stop) if stop else np.zeros(1)
    features = Features({k: List(v) for k, v in ds.features.items()})
    offsets = pa.array(offsets.astype(np.int32))
    columns = [
        pa.ListArray.from_arrays(offsets, table.column(c).combine_chunks()).cast(
            features.arrow_schema.field(c).type
        )
        for c in ds.column_names
    ]
    out = pa.Table.from_arrays(columns, schema=features.arrow_schema)
    return ds._internal.derive(out, features=features, indices=None)


def shard(ds: Dataset, num_shards: int, index: int, contiguous: bool = True) -> Dataset:
    if not 0 <= index < num_shards:
        raise ValueError("index should be in [0, num_shards-1]")
    n = ds.num_rows
    if contiguous:
        div, mod = divmod(n, num_shards)
        start = div * index + min(index, mod)
        stop = start + div + (1 if index < mod else 0)
        return select(ds, np.arange(start, stop))
    return select(ds, np.arange(index, n, num_shards))


def interleave_datasets(
    dsets: Sequence[Dataset],
    probabilities: Sequence[float] | None = None,
    seed: int | None = None,
    stopping_strategy: str = "first_exhausted",
) -> Dataset:
    """Alternate rows of several datasets (or draw them with ``probabilities``), picking exactly
    the rows `datasets` picks for the same ``seed``.

    >>> from jaxfeed import Dataset, interleave_datasets
    >>> a, b = Dataset.from_dict({"x": [0, 1, 2]}), Dataset.from_dict({"x": [10, 11]})
    >>> interleave_datasets([a, b])["x"]
    Column([0, 10, 1, 11])
    """
    if not dsets:
        raise ValueError("Unable to interleave an empty list of datasets.")
    _check_map_style(dsets, "interleave_datasets")
    strategies = ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")
    if stopping_strategy not in strategies:
        raise ValueError(
            f"{stopping_strategy} is not supported. Please enter a valid stopping_strategy."
        )
    joined = concatenate_datasets(dsets)
    lengths = [len(d) for d in dsets]
    offsets = np.cumsum([0, *lengths[:-1]])
    oversampling = stopping_strategy == "all_exhausted"
    if probabilities is None and stopping_strategy == "all_exhausted_without_replacement":
        chunks = [0, *sorted(set(lengths))]
        parts = []
        for start, end in itertools.pairwise(chunks):
            parts.append((offsets.reshape(1, -1) + np.arange(start, end).reshape(-1, 1)).ravel())
            gone = [i for i in range(len(lengths)) if lengths[i] == end]
            lengths = np.delete(lengths, gone).tolist()
            offsets = np.delete(offsets, gone)
        indices = np.concatenate(parts)
    elif probabilities is None and not oversampling:
        indices = (offsets.reshape(1, -1) + np.arange(min(lengths)).reshape(-1, 1)).ravel()
    elif probabilities is None:
        grid = np.mod(np.arange(max(lengths)).reshape(-1, 1), np.array(lengths).reshape(1, -1))
        indices = (grid + offsets).ravel()
    elif stopping_strategy in ("first_exhausted", "all_exhausted"):
        indices = _draw_with_replacement(lengths, offsets, probabilities, seed, oversampling)
    else:
        exhausted = np.full(len(lengths), False)
        current = [0] * len(lengths)
        picked: list[int] = []
        rng = np.random.default_rng(seed)
        while not exhausted.all():
            for source in rng.choice(len(lengths), size=1000, p=probabilities):
                if exhausted.all():
                    break
                source = int(source)
                if not exhausted[source]:
                    picked.append(current[source] + offsets[source])
                    current[source] += 1
                if current[source] >= lengths[source]:
                    exhausted[source] = True
        indices = np.asarray(picked, dtype=np.int64)
    return select(joined, np.asarray(indices, dtype=np.int64))


def _draw_with_replacement(
    lengths: list[int],
    offsets: np.ndarray,
    probabilities: Sequence[float],
    seed: int | None,
    oversampling: bool,
) -> np.ndarray:
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    drawable = np.asarray(probabilities, dtype=np.float64) > 0
    empty = [i for i in range(n) if lengths[i] == 0 and drawable[i]]
    if empty:
        raise ValueError(
            "interleave_datasets with probabilities requires every dataset that can be sampled "
            f"(probability > 0) to be non-empty; datasets at indices {empty} are empty."
        )
    if oversampling and not drawable.all():
        unreachable = [i for i in range(n) if not drawable[i]]
        raise ValueError(
            'interleave_datasets with stopping_strategy="all_exhausted" cannot exhaust a dataset '
            f"that is never sampled; datasets at indices {unreachable} have probability 0."
        )
    rng = np.random.default_rng(seed)
    blocks = []
    counts = np.zeros(n, dtype=np.int64)
    reached = np.zeros(n, dtype=bool)
    while not (reached[drawable].all() if oversampling else reached[drawable].any()):
        block = rng.choice(n, size=1000, p=probabilities)
        blocks.append(block)
        counts += np.bincount(block, minlength=n)
        reached = counts >= lengths_arr
    draws = np.concatenate(blocks)
    exhaust = np.full(n, -1, dtype=np.int64)
    for s in range(n):
        if drawable[s]:
            occ = np.flatnonzero(draws == s)
            if len(occ) >= lengths[s]:
                exhaust[s] = occ[lengths[s] - 1]
    valid = exhaust[exhaust >= 0]
    used = draws[: (valid.max() if oversampling else valid.min()) + 1]
    out = np.empty(len(used), dtype=np.int64)
    for s in range(n):
        if drawable[s]:
            pos = np.flatnonzero(used == s)
            out[pos] = (np.arange(len(pos)) % lengths[s]) + offsets[s]
    return out


def from_generator(
    cls: type[Dataset],
    generator: Callable[..., Iterable[Mapping[str, Any]]],
    features: Features | None = None,
    gen_kwargs: dict | None = None,
    chunk_rows: int = 1000,
) -> Dataset:
    """A ``cls`` dataset of the rows ``generator`` yields, read ``chunk_rows`` at a time."""
    tables: list[pa.Table] = []
    rows: list[Mapping[str, Any]] = []
    names: list[str] | None = None

    def flush() -> None:
        nonlocal features
        chunk = cls.from_dict({k: [r.get(k) for r in rows] for k in names}, features=features)
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
        return cls(Features(features).arrow_schema.empty_table(), features)
    return cls(pa.concat_tables(tables), features)
