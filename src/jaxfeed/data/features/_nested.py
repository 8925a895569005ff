"""Nested-array helpers shared by the array and list features.

Encoding: an equal-shape column becomes one numpy block (:func:`to_block`, refusing values that a
cast would change, naming the row), then nested fixed-size Arrow lists over that block without a
copy (:func:`nested_fixed_array`). Decoding: (possibly nested) list columns of numbers become one
ndarray when shapes agree, else lists (:func:`decode_nested`), split by list offsets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.features.base import bad_value, unwrap_storage


def nested_fixed_type(value_type: pa.DataType, shape: tuple[int, ...]) -> pa.DataType:
    """``fixed_size_list(fixed_size_list(value, shape[-1]), ...)`` for ``shape``."""
    out = value_type
    for dim in reversed(shape):
        out = pa.list_(out, dim)
    return out


def nested_fixed_array(block: np.ndarray, pa_value_type: pa.DataType) -> pa.Array:
    """Wrap a C-contiguous ``(rows, *shape)`` block as nested fixed-size lists (no copy)."""
    block = np.ascontiguousarray(block)
    out: pa.Array = pa.array(block.reshape(-1), type=pa_value_type)
    for dim in reversed(block.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, dim)
    return out


def to_block(values: Any, shape: tuple[int | None, ...], dtype: str, column: str) -> np.ndarray:
    """Convert a column of equal-shape values to one ``(rows, *shape)`` array of ``dtype``.

    Raises :class:`FeatureError` naming the first row whose shape or values do not fit.
    """
    np_dtype = np.dtype(dtype)
    expected = f"an array of shape {tuple(shape)} and dtype {dtype}"
    if isinstance(values, np.ndarray) and values.dtype != object:
        block = values
    else:
        values = list(values)
        if not values:
            return np.zeros((0, *(d or 0 for d in shape)), dtype=np_dtype)
        try:
            block = np.asarray(values)
        except (ValueError, TypeError):
            block = np.empty(0, dtype=object)  # ragged: located below
        if block.dtype.kind == "f" and np_dtype.kind in "iu":
            block = _exact_ints(values, block, np_dtype)
        if block.dtype == object or block.ndim != len(shape) + 1:
            for row, value in enumerate(values):
                arr = np.asarray(value) if value is not None else None
                if arr is None or arr.dtype == object or not shape_ok(arr.shape, shape):
                    raise bad_value(column, row, expected, value)
            raise bad_value(column, 0, expected, values[0] if values else values)
    if block.ndim != len(shape) + 1 or not shape_ok(block.shape[1:], shape):
        row = 0
        raise bad_value(column, row, expected, f"array of shape {block.shape[1:]}")
    return cast_checked(block, np_dtype, column, expected)


def _exact_ints(values: list, block: np.ndarray, np_dtype: np.dtype) -> np.ndarray:
    """Python ints past int64 make numpy infer float64: rebuild them exactly, refusing fractions."""
    try:
        exact = np.asarray(values, dtype=np_dtype)
    except (OverflowError, ValueError, TypeError):
        return block  # cast_checked names the row
    if exact.shape != block.shape or not (exact.astype(np.float64) == block).all():
        return block
    if not all(isinstance(v, int | np.integer) for v in np.asarray(values, dtype=object).ravel()):
        return block
    return exact


def shape_ok(got: tuple[int, ...], want: tuple[int | None, ...]) -> bool:
    """``got`` matches ``want`` dimension by dimension, a ``None`` in ``want`` matching any size."""
    return len(got) == len(want) and all(
        w is None or g == w for g, w in zip(got, want, strict=True)
    )


def cast_checked(block: np.ndarray, np_dtype: np.dtype, column: str, expected: str) -> np.ndarray:
    """Cast ``block`` to ``np_dtype``, raising on values that would change (overflow, fractions)."""
    if block.dtype == np_dtype:
        return block
    if block.dtype.kind not in "biuf" and not (block.dtype.kind == "U" and np_dtype.kind == "U"):
        row = 0
        raise bad_value(column, row, expected, f"values of dtype {block.dtype}")
    if np.can_cast(block.dtype, np_dtype, casting="safe"):
        return block.astype(np_dtype)
    with np.errstate(all="ignore"):
        out = block.astype(np_dtype)
        back = out.astype(block.dtype)
    same = (
        (back == block) | (np.isnan(block) & np.isnan(back))
        if block.dtype.kind == "f"
        else back == block
    )
    if np_dtype.kind == "f" and block.dtype.kind == "f":
        # Narrowing floats loses precision by design (float64 -> float32), but a finite value
        # that becomes inf (1e300 in float32, 1e6 in float16) is refused.
        with np.errstate(invalid="ignore"):
            overflow = np.isfinite(block) & ~np.isfinite(out)
        if overflow.any():
            row = int(np.argmax(overflow.reshape(len(block), -1).any(axis=1)))
            value = block[row] if block.ndim else block
            raise bad_value(column, row, expected + " (a value overflows to inf)", value)
        return out
    if not same.all():
        flat = same.reshape(len(block), -1).all(axis=1)
        row = int(np.argmin(flat))
        raise bad_value(column, row, expected, block[row])
    return out


def _offsets(array: pa.Array) -> np.ndarray:
    """Row offsets into :func:`list_child`, starting at 0."""
    if pa.types.is_fixed_size_list(array.type):
        return np.arange(len(array) + 1, dtype=np.int64) * array.type.list_size
    offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return offsets - offsets[0]


def list_child(array: pa.Array) -> pa.Array:
    """The values a (sliced, possibly null-holding) list array refers to, as one zero-copy slice."""
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        return array.values.slice(array.offset * size, len(array) * size)
    offsets = array.offsets
    start = offsets[0].as_py()
    return array.values.slice(start, offsets[-1].as_py() - start)


def stack_if_same(items: list) -> np.ndarray | list:
    """Stack a list of arrays into one when they share shape and dtype, as `datasets` does."""
    if (
        items
        and all(isinstance(x, np.ndarray) for x in items)
        and all(x.shape == items[0].shape and x.dtype == items[0].dtype for x in items)
    ):
        return np.stack(items)
    return items


def decode_rows(
    array: pa.Array, child: np.ndarray | list, consolidate: bool = True
) -> np.ndarray | list:
    """Split a decoded child column by the list offsets of ``array``."""
    n = len(array)
    offsets = _offsets(array)
    lengths = np.diff(offsets)
    valid = None if not array.null_count else array.is_valid().to_numpy(zero_copy_only=False)
    if (
        consolidate
        and isinstance(child, np.ndarray)
        and valid is None
        and (n == 0 or (lengths == lengths[0]).all())
    ):
        width = int(lengths[0]) if n else 0
        return child[: n * width].reshape((n, width, *child.shape[1:]))
    rows: list = []
    for i in range(n):
        if valid is not None and not valid[i]:
            rows.append(None)
            continue
        part = child[offsets[i] : offsets[i + 1]]
        if not isinstance(child, np.ndarray):
            part = stack_if_same(part) if consolidate else list(part)
        rows.append(part)
    return rows


def decode_nested(array: pa.Array) -> np.ndarray | list:
    """Decode (possibly nested) lists of numbers: one ndarray when shapes agree, else lists.

    Runs vectorised over offsets: uniform lengths at every level reshape without copying; only
    ragged levels split into one array per row.
    """
    array = unwrap_storage(array)
    t = array.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return decode_rows(array, decode_nested(list_child(array)))
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        fields = array.flatten()
        columns = [decode_nested(f) for f in fields]
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return [
            {name: col[i] for name, col in zip(names, columns, strict=True)} if valid[i] else None
            for i in range(len(array))
        ]
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and not array.null_count:
        return array.to_numpy(zero_copy_only=True)
    if pa.types.is_boolean(t) and not array.null_count:
        return array.to_numpy(zero_copy_only=False)
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and array.null_count:
        return array.to_numpy(zero_copy_only=False).astype(np.float64)
    return array.to_pylist()
