"""The contract every feature type follows: encode Python/numpy values to Arrow, decode Arrow to numpy.

A feature knows three things about its column:

* ``pa_type``: the Arrow storage type (fixed-shape values use fixed-size lists so a slice of the
  column is a numpy view without a copy);
* ``encode(values, column)``: build an Arrow array from Python or numpy values, raising
  :class:`FeatureError` that names the column and row of the first bad value;
* ``to_numpy(array)`` / ``to_python(array)``: decode an Arrow array of this feature.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa


class FeatureError(ValueError):
    """A value does not fit its feature. The message names the column and the row.

    >>> from jaxfeed import Dataset, FeatureError, Features, Value
    >>> try:
    ...     Dataset.from_dict({"n": [1, 2.5]}, features=Features({"n": Value("int32")}))
    ... except FeatureError as err:
    ...     print(err)
    column 'n', row 1: expected a int32 value, got 2.5
    """

    def __init__(self, column: str, row: int | None, expected: str, value: Any) -> None:
        self.column, self.row, self.expected, self.value = column, row, expected, value
        where = f"column {column!r}" if row is None else f"column {column!r}, row {row}"
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{where}: expected {expected}, got {shown}")

    def __reduce__(self):  # keep the exception picklable across worker processes
        return (type(self), (self.column, self.row, self.expected, self.value))


def bad_value(column: str, row: int | None, expected: str, value: Any) -> FeatureError:
    """Build the error raised for a value that does not fit its feature."""
    return FeatureError(column, row, expected, value)


class Feature:
    """Base class of feature types. Subclasses are frozen dataclasses."""

    _type: ClassVar[str] = "Feature"

    @property
    def pa_type(self) -> pa.DataType:
        raise NotImplementedError

    def encode(self, values: Any, column: str) -> pa.Array:
        """Encode a column of values (a list or an array, one item per row)."""
        raise NotImplementedError

    def to_python(self, array: pa.Array) -> list:
        """Decode to a list of Python values, one per row."""
        return array.to_pylist()

    def to_numpy(self, array: pa.Array) -> np.ndarray | list:
        """Decode a whole column chunk at once.

        Returns an ndarray of shape ``(rows, *shape)`` where every row has the same shape, else a
        list with one item per row.
        """
        raise NotImplementedError

    def numpy_view(self, array: pa.Array) -> np.ndarray | None:
        """A zero-copy ``(rows, *shape)`` numeric view of ``array``, or None when not possible."""
        return None

    @property
    def requires_decoding(self) -> bool:
        """Whether values are transformed on read (images, audio)."""
        return False

    def to_dict(self) -> dict:
        """JSON-ready description, in the layout Hugging Face `datasets` uses."""
        raise NotImplementedError


def unwrap_storage(array: pa.Array) -> pa.Array:
    """Return the storage of an extension array (e.g. HF's Array2D), else the array itself."""
    while isinstance(array.type, pa.ExtensionType):
        array = array.storage
    return array


def fixed_view(
    array: pa.Array, pa_value_type: pa.DataType, shape: tuple[int, ...]
) -> np.ndarray | None:
    """View a null-free nested fixed-size-list array as a numpy array of ``(rows, *shape)``.

    Returns None when the array has nulls at any level or its layout is not fixed-size lists.
    """
    array = unwrap_storage(array)
    n = len(array)
    values = array
    for dim in shape:
        if values.null_count:
            return None
        if pa.types.is_fixed_size_list(values.type):
            if values.type.list_size != dim:
                return None
            # `.values` ignores the parent's offset; `flatten()` honours it (zero-copy slice).
            values = values.flatten()
        elif pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
            # Variable-size lists (the layout `datasets` uses) whose offsets happen to be regular.
            offsets = values.offsets.to_numpy(zero_copy_only=False)
            if not np.array_equal(offsets - offsets[0], np.arange(len(offsets)) * dim):
                return None
            values = values.values.slice(int(offsets[0]), len(values) * dim)
        else:
            return None
    if values.null_count or values.type != pa_value_type:
        return None
    if pa.types.is_boolean(values.type):
        return None  # Arrow packs booleans into bits: no zero-copy view exists.
    out = values.to_numpy(zero_copy_only=True)
    return out.reshape((n, *shape))


def _array_like(value: Any) -> bool:
    return (
        hasattr(value, "__array__")
        and not isinstance(
            value, np.ndarray | np.generic | str | bytes | pa.Array | pa.ChunkedArray
        )
        and not hasattr(value, "getpixel")  # a PIL image is a value of its own
    )


def array_likes_as_numpy(values: Any) -> Any:
    """A column whose values (or which itself) are array-likes (objects with ``__array__``: jax,
    torch, ...) as numpy arrays, as `datasets` accepts them; other columns as they are."""
    if _array_like(values):
        return np.asarray(values)
    if isinstance(values, list | tuple) and any(_array_like(v) for v in values):
        return [np.asarray(v) if _array_like(v) else v for v in values]
    return values
