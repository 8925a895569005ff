"""Check features read from a file (Parquet/Arrow schema metadata, ``dataset_info.json``) against
the data they describe, so a file cannot make jaxfeed return values its features rule out.

The checks are cheap, vectorised passes over the columns: class ids within ``[-1, num_classes)``,
list lengths equal to a ``Sequence``'s ``length`` and an ``ArrayND``'s shape, numeric storage under
numeric features, struct fields present. A mismatch raises :class:`FeatureMismatchError`, naming
the file, the column and the first bad row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.features import ClassLabel, Features, Sequence, Value
from jaxfeed.features.array import ARRAY_TYPES
from jaxfeed.features.base import unwrap_storage

Rows = Callable[[int], int]


class FeatureMismatchError(ValueError):
    """The features a file declares do not describe its data."""

    def __init__(self, source: str, column: str, row: int | None, problem: str) -> None:
        self.source, self.column, self.row = source, column, row
        where = f"column {column!r}" + ("" if row is None else f", row {row}")
        super().__init__(f"{source}: {where}: {problem} (the features stored with the data)")

    def __reduce__(self):
        return (type(self), (self.source, self.column, self.row, str(self)))


def check_table(table: pa.Table, features: Features, source: str) -> None:
    """Raise :class:`FeatureMismatchError` when ``table``'s data contradicts ``features``.

    >>> import pyarrow as pa
    >>> from jaxfeed import ClassLabel, Features
    >>> check_table(pa.table({"y": [0, 1]}), Features({"y": ClassLabel(names=["a", "b"])}), "t")
    >>> check_table(pa.table({"y": [0, 7]}), Features({"y": ClassLabel(names=["a", "b"])}), "t")
    Traceback (most recent call last):
    ...
    jaxfeed.io.validate.FeatureMismatchError: t: column 'y', row 1: class id 7 outside [-1, 2) ...
    """
    names = set(table.column_names)
    missing = [name for name in features if name not in names]
    if missing:
        raise FeatureMismatchError(
            source, missing[0], None, f"declared but absent from the data {table.column_names}"
        )
    for name, feature in features.items():
        start = 0
        for chunk in table.column(name).chunks:
            _check(feature, chunk, name, source, lambda i, s=start: s + i)
            start += len(chunk)


def _check(feature: Any, array: pa.Array, column: str, source: str, row: Rows) -> None:
    array = unwrap_storage(array)
    if len(array) == 0 or array.null_count == len(array):
        return
    if isinstance(feature, ClassLabel):
        _check_class_ids(feature, array, column, source, row)
    elif isinstance(feature, Mapping):
        if not pa.types.is_struct(array.type):
            _refuse(source, column, None, f"declared as a struct but stored as {array.type}")
        names = {array.type.field(i).name for i in range(array.type.num_fields)}
        for key, sub in feature.items():
            if key not in names:
                _refuse(source, f"{column}.{key}", None, f"field absent from the data {names}")
            _check(sub, array.field(key), f"{column}.{key}", source, row)
    elif type(feature).__name__ in ARRAY_TYPES:
        shape = feature.shape
        if shape[0] is None:
            values, inner_row = _lists(array, None, column, source, row, "an array")
            _check_dims(values, shape[1:], feature.dtype, column, source, inner_row)
        else:
            _check_dims(array, shape, feature.dtype, column, source, row)
    elif (
        isinstance(feature, Sequence)
        and isinstance(feature.feature, Mapping)
        and pa.types.is_struct(array.type)
    ):  # `datasets` stores Sequence({...}) as a struct of lists
        inner = {k: Sequence(v, length=feature.length) for k, v in feature.feature.items()}
        _check(inner, array, column, source, row)
    elif isinstance(feature, Sequence):
        length = None if feature.length == -1 else feature.length
        values, inner_row = _lists(array, length, column, source, row, "a list")
        _check(feature.feature, values, column, source, inner_row)
    elif isinstance(feature, Value):
        _check_value(feature, array, column, source)


def _refuse(source: str, column: str, row: int | None, problem: str) -> None:
    raise FeatureMismatchError(source, column, row, problem)


def _check_class_ids(
    feature: ClassLabel, array: pa.Array, column: str, source: str, row: Rows
) -> None:
    if not pa.types.is_integer(array.type):
        _refuse(source, column, None, f"a ClassLabel stored as {array.type}, not integers")
    n = feature.num_classes
    low, high = pc.min_max(array).values()
    if low.as_py() >= -1 and high.as_py() < n:
        return
    bad = pc.or_(pc.less(array, -1), pc.greater_equal(array, n)).fill_null(False)
    i = int(np.argmax(bad.to_numpy(zero_copy_only=False)))
    _refuse(
        source,
        column,
        row(i),
        f"class id {array[i].as_py()} outside [-1, {n}) of ClassLabel(names={feature.names[:5]}"
        f"{'...' if n > 5 else ''})",
    )


def _lists(
    array: pa.Array, length: int | None, column: str, source: str, row: Rows, what: str
) -> tuple[pa.Array, Rows]:
    """The values of a list column, after checking every row holds ``length`` items."""
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        if length is not None and size != length:
            _refuse(source, column, row(0), f"{what} of {length} items declared, rows hold {size}")
        return array.flatten(), lambda i: row(i // size if size else 0)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        _refuse(source, column, None, f"{what} declared but stored as {array.type}")
    if length is not None:
        lengths = pc.list_value_length(array)
        bad = pc.not_equal(lengths, length).fill_null(False)
        if pc.any(bad).as_py():
            i = int(np.argmax(bad.to_numpy(zero_copy_only=False)))
            _refuse(
                source,
                column,
                row(i),
                f"{what} of {length} items declared, the row holds {lengths[i].as_py()}",
            )
    offsets = array.offsets.to_numpy(zero_copy_only=False)
    offsets = offsets - offsets[0]
    return array.flatten(), lambda i: row(int(np.searchsorted(offsets, i, side="right")) - 1)


def _check_dims(
    array: pa.Array, shape: tuple, dtype: str, column: str, source: str, row: Rows
) -> None:
    expected = f"an array of shape {tuple(shape)}"
    for dim in shape:
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) and not (
            pa.types.is_fixed_size_list(array.type)
        ):
            _refuse(source, column, row(0), f"{expected} declared, stored as {array.type}")
        array, row = _lists(array, dim, column, source, row, expected)
    _check_value(Value(dtype), array, column, source)


def _check_value(feature: Value, array: pa.Array, column: str, source: str) -> None:
    t = array.type
    if t == feature.pa_type or pa.types.is_null(t):
        return
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if feature.is_numeric and not numeric:
        _refuse(source, column, None, f"declared {feature!r} but stored as {t}")
    if pa.types.is_nested(t) and not pa.types.is_nested(feature.pa_type):
        _refuse(source, column, None, f"declared {feature!r} but stored as {t}")


UTF8_CHECK_BYTES = 1 << 30  # string columns larger than this get their offsets checked, not UTF-8


def check_arrow_data(table: pa.Table, source: str) -> None:
    """Validate the buffers of an Arrow table read from ``source`` (an IPC file or stream, or a
    JSON file), so corrupt offsets or lengths raise here instead of crashing a later read.

    Offsets, sizes and nested layouts are checked in full; string data is checked for valid UTF-8
    unless a column holds more than ``UTF8_CHECK_BYTES`` (then decoding a bad value raises at read
    time, naming the column and row).
    """
    try:
        names = table.column_names  # field names are bytes in the file: may not be UTF-8
    except UnicodeDecodeError as err:
        raise ValueError(f"{source}: a column name is not valid UTF-8 ({err.reason})") from None
    for name, column in zip(names, table.columns, strict=True):
        for chunk in column.chunks:
            if chunk.nbytes > UTF8_CHECK_BYTES:
                if pa.types.is_string(chunk.type):
                    chunk = chunk.view(pa.binary())
                elif pa.types.is_large_string(chunk.type):
                    chunk = chunk.view(pa.large_binary())
            try:
                chunk.validate(full=True)
            except pa.ArrowException as err:
                raise ValueError(f"{source}: column {name!r} holds corrupt data: {err}") from None
