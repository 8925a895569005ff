"""``map`` and ``filter``: run a function over a dataset's rows or batches.

``filter`` only builds an index mapping; reads through it gather rows in bulk. ``map`` writes its
output record batch by record batch, to an Arrow file next to a disk-backed dataset or in memory
otherwise. Both hand ``num_proc > 1`` to :mod:`jaxfeed.data.ops.parallel`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jaxfeed._base.settings import progress
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import FeatureError, Features, Json, LargeList, List, Value
from jaxfeed.data.features.array import ArrayXD as FixedArray
from jaxfeed.data.features.features import infer_column
from jaxfeed.data.features.sequence import Sequence as SequenceFeature
from jaxfeed.data.features.struct import (
    FeatureLike,
    encode_column,
    pa_type_of,
    requires_decoding,
)
from jaxfeed.data.ops._common import _column_list
from jaxfeed.data.ops.columns import remove_columns as remove_columns_  # map's argument shadows it
from jaxfeed.data.ops.parallel import check_num_proc, parallel_filter, parallel_map

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class


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
    columns (``remove_columns``), as there. Returns what the function was given (the batch, or
    each row's dict: None with ``input_columns``) and the results.
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
    if batched:
        return batch, results
    return [args[0] if not input_columns else None for args, _kw in calls], results


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


def _rows_to_columns(
    results: list[Any], start: int, inputs: Callable[[str], list] | None = None
) -> dict[str, list] | pa.Table | None:
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
            filled = _fill_from_inputs(row, missing, i, inputs) if set(row) <= set(keys) else None
            if filled is not None:
                row = filled
        if set(row) != set(keys):
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


def _input_values(
    ds: Dataset, start: int, stop: int, remove: Sequence[str], given: list | None = None
) -> Callable[[str], list | None]:
    """The values of rows ``start:stop`` of an input column that ``map`` keeps (read on first
    use), or None for any other name: in the python format, the row dicts the function was given
    (a value it changed in place is kept, as `datasets` merges the row it gave), except columns
    that decode (images, audio: their stored bytes); else the stored values."""
    cache: dict[str, list] = {}
    rows = given if given and ds.format["type"] is None else None
    if rows is not None and not all(isinstance(r, dict) for r in rows):
        rows = None

    def values(column: str) -> list | None:
        if column not in ds.column_names or column in remove:
            return None
        if column not in cache:
            feature = ds.features[column]
            if (
                rows is not None
                and all(column in r for r in rows)
                and not requires_decoding(feature)
            ):
                cache[column] = [r[column] for r in rows]
            else:
                table = ds._internal.arrow(slice(start, stop), [column])
                cache[column] = table.column(0).to_pylist()
        return cache[column]

    return values


def _fill_from_inputs(
    row: dict, missing: list[str], i: int, inputs: Callable[[str], list] | None
) -> dict | None:
    """A row that returned fewer keys than the first row, each missing one an input column that
    ``remove_columns`` keeps: it keeps that input value (`datasets` merges ``{**inputs,
    **returned}`` row by row, so ``{}`` is "no change"); None when a key is not such a column."""
    if inputs is None:
        return None
    out = dict(row)
    for key in missing:
        values = inputs(key)
        if values is None:
            return None
        out[key] = values[i]
    return out


class ColumnLengthError(pa.ArrowInvalid):
    """A batched ``map`` returned another number of rows while other columns are kept: the
    ``pyarrow.ArrowInvalid`` (a ``ValueError``) that `datasets` raises there."""


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
    directory = None if keep_in_memory else ds._internal.cache_dir
    if function is None:  # as `datasets`: the rows as they are, less remove_columns, written out
        if not remove and (directory is None and (keep_in_memory or cache_file_name is None)):
            return ds  # nothing to remove and nowhere to write: the same rows, no copy
        # `datasets` maps ``lambda x: x``: in the python format that is "no change" (the stored
        # values are kept as Arrow arrays); a formatted batch comes back whole, as there
        same = _no_change if ds.format["type"] is None else _itself
        function, batched, with_indices, with_rank, columns = same, True, False, False, []
    sink = _Sink(directory, None if keep_in_memory else cache_file_name)
    call = (batched, with_indices, columns, fn_kwargs or {}, (rank,) if with_rank else None)
    batches = (batch_size if batched else 1000, drop_last_batch and batched)
    given = Features(features) if features is not None else None
    retyping = (try_original_type, on_mixed_types)
    written = _write_map(ds, function, sink, call, remove, batches, given, retyping, desc)
    if written is None:  # only side effects: the dataset as it was (remove_columns unused)
        return ds
    return _mapped(ds, *written, sink)


def _write_map(
    ds: Dataset,
    function: Callable,
    sink: _Sink,
    call: tuple,
    remove: list[str],
    batches: tuple[int | None, bool],
    given: Features | None,
    retyping: tuple[bool | None, str | None],
    desc: str | None,
) -> tuple[pa.Table, Features] | None:
    """Call ``function`` batch by batch (``call``: batched, with_indices, columns, fn_kwargs,
    rank) over ``batches`` (size, drop last) and write the merged output to ``sink``: its table
    and features, or None when no batch returned values (the sink is then discarded)."""
    batched = call[0]
    tabular = ds.format["type"] in ("arrow", "pandas")
    strip = remove if ds.format["type"] is None else ()
    out_features: Features | None = None
    stack = contextlib.ExitStack()
    updated = False
    try:
        bar = stack.enter_context(progress(ds.num_rows, desc or "Map"))
        for start, stop in _batches(ds, *batches):
            given_rows, results = _call(ds, function, start, stop, *call, strip)
            bar.update(stop - start)
            new = (
                _as_columns(results[0], True)
                if batched
                else _rows_to_columns(
                    results, start, _input_values(ds, start, stop, remove, given_rows)
                )
            )
            if new is None:
                if updated:
                    raise ValueError(
                        f"map: rows {start}:{stop} returned None after earlier rows returned values"
                    )
                continue
            updated = True
            table = _merge(ds, start, stop, new, remove, tabular)
            if out_features is None:
                out_features = _output_features(ds, table, new, given, *retyping)
            sink.write(_encode_output(table, out_features))
        if not updated:
            sink.abort()
            return None
        return sink.finish(out_features.arrow_schema), out_features
    except BaseException:
        sink.abort()
        raise
    finally:
        stack.close()


def _mapped(ds: Dataset, table: pa.Table, out_features: Features, sink: _Sink) -> Dataset:
    """The dataset over ``table``, mapping the file written, formatted as ``ds`` was."""
    out = ds._internal.derive(
        table,
        features=out_features,
        indices=None,
        source_files=None if sink.path is None else {sink.path.name},
    )
    if sink.path is not None:  # as `datasets`: the output maps the file written (cache_files)
        out._internal.set_cache(sink.path.parent, [sink.path.name])
    formatted = ds._internal.format_state()["_format_columns"]
    if formatted is not None:  # as `datasets`: new columns join the formatted ones
        fmt = ds.format
        kept = [c for c in formatted if c in out.column_names]
        before = set(ds.column_names)
        added = [c for c in out.column_names if c not in before]
        out.set_format(fmt["type"], kept + added, fmt["output_all_columns"], **fmt["format_kwargs"])
    return out


def _no_change(*args: Any, **kwargs: Any) -> dict:
    return {}


def _itself(batch: Any, *args: Any, **kwargs: Any) -> Any:
    return batch


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
        raise ColumnLengthError(
            f"Column lengths mismatch: map: rows {start}:{stop} gave {n_out} rows instead of "
            f"{stop - start} (the kept columns have the expected length {stop - start}); a "
            f"function that changes the number of rows must remove the other columns {stale} "
            "(remove_columns=)"
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
    if original is not None and try_original_type and not _text_meets_numbers(original, values):
        try:
            encode_column(original, values, name)
            return original
        except (FeatureError, TypeError, ValueError, OverflowError, pa.ArrowException):
            pass
    try:
        feature = as_ragged(infer_column(values, name, on_mixed_types)[0])
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


def _text_meets_numbers(original: FeatureLike, values: Any) -> bool:
    """True when returned numbers meet an original text column or returned text an original
    number column: `datasets`' writer tries the original Arrow type, which takes neither (its
    declared-feature conversions do not apply there), so the returned type is inferred."""
    if not isinstance(original, Value):
        return False
    first = next((v for v in values if v is not None), None) if isinstance(values, list) else None
    if first is None:
        return False
    text = pa.types.is_string(original.pa_type) or pa.types.is_large_string(original.pa_type)
    number = isinstance(first, int | float | np.number | bool | np.bool_)
    if text:
        return number
    return original.is_numeric and isinstance(first, str)


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
