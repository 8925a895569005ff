"""`Array2D` ... `Array5D`: fixed-shape N-d arrays stored as nested fixed-size Arrow lists.

Fixed-size lists have no offsets, so a slice of ``n`` rows is one contiguous buffer and decodes to
a numpy array of shape ``(n, *shape)`` without a copy. A first dimension of ``None`` (variable
length) is stored as a list of fixed-size lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed.data.features._nested import (
    decode_nested,
    nested_fixed_array,
    nested_fixed_type,
    shape_ok,
    to_block,
)
from jaxfeed.data.features.base import Feature, FeatureError, bad_value, fixed_view, unwrap_storage
from jaxfeed.data.features.value import (
    BFLOAT16,
    NUMERIC_DTYPES,
    arrow_type,
    as_bfloat16,
    bfloat16_to_float32,
    numpy_dtype,
)


@dataclass(frozen=True)
class ArrayXD(Feature):
    """The base of `Array2D` ... `Array5D`: ``ndims`` dimensions (the first may be ``None``)."""

    shape: tuple
    dtype: str
    ndims: ClassVar[int] = 0

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if len(shape) != self.ndims:
            raise ValueError(
                f"{type(self).__name__} needs a shape of {self.ndims} dims, got {shape}"
            )
        for i, dim in enumerate(shape):
            if dim is None and i == 0:
                continue
            if not isinstance(dim, int | np.integer) or dim < 0:
                raise ValueError(
                    f"{type(self).__name__}: dimension {i} of shape {shape} must be a non-negative int"
                    + (" (only the first dimension may be None)" if dim is None else "")
                )
        if self.dtype not in NUMERIC_DTYPES and self.dtype != "string":
            raise ValueError(
                f"{type(self).__name__}: dtype must be one of {', '.join(NUMERIC_DTYPES)} or "
                f"string, got {self.dtype!r}"
            )
        object.__setattr__(self, "shape", tuple(int(d) if d is not None else None for d in shape))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype!r})"

    @property
    def variable(self) -> bool:
        return self.shape[0] is None

    @property
    def value_type(self) -> pa.DataType:
        return arrow_type(self.dtype)

    @property
    def pa_type(self) -> pa.DataType:
        if self.variable:
            return pa.list_(nested_fixed_type(self.value_type, self.shape[1:]))
        return nested_fixed_type(self.value_type, self.shape)

    def encode(self, values: Any, column: str) -> pa.Array:
        if isinstance(values, pa.Array | pa.ChunkedArray):
            values = values.to_pylist()
        if not isinstance(values, np.ndarray) and any(v is None for v in values):
            return self._encode_with_nulls(list(values), column)
        if self.dtype == "string":
            return self._encode_strings(list(values), column)
        if self.dtype == BFLOAT16:
            values = bfloat16_to_float32(values)
        if not self.variable:
            block = self._block(values, self.shape, column)
            return nested_fixed_array(block, self.value_type)
        values = list(values)
        blocks = []
        lengths = np.zeros(len(values) + 1, dtype=np.int32)
        for row, value in enumerate(values):
            try:
                block = self._block(value, self.shape[1:], column)
            except FeatureError:
                expected = f"an array of shape {self.shape} and dtype {self.dtype}"
                raise bad_value(column, row, expected, value) from None
            blocks.append(block)
            lengths[row + 1] = len(block)
        inner_shape = (0, *self.shape[1:])
        flat = (
            np.concatenate(blocks)
            if blocks
            else np.zeros(inner_shape, self.value_type.to_pandas_dtype())
        )
        inner = nested_fixed_array(flat, self.value_type)
        return pa.ListArray.from_arrays(pa.array(np.cumsum(lengths, dtype=np.int32)), inner)

    def _block(self, values: Any, shape: tuple, column: str) -> np.ndarray:
        """Equal-shape values as one block of the stored dtype (bfloat16 rounded, kept float32)."""
        if self.dtype != BFLOAT16:
            return to_block(values, shape, self.dtype, column)
        block = to_block(values, shape, "float32", column)
        return block.astype(numpy_dtype(BFLOAT16)).astype(np.float32)

    def _encode_with_nulls(self, values: list, column: str) -> pa.Array:
        """Missing rows (``None``) are stored as nulls, as `datasets` stores them."""
        valid = np.array([v is not None for v in values])
        dense = self.encode([v for v in values if v is not None], column)
        if not valid.any():
            return pa.nulls(len(values), type=self.pa_type)
        # Gather the encoded rows into place; null rows take row 0 as a placeholder, then mask it.
        positions = np.cumsum(valid) - 1
        positions[~valid] = 0
        full = dense.take(pa.array(positions, type=pa.int64()))
        mask = pa.array(~valid)
        if pa.types.is_fixed_size_list(full.type):
            return pa.FixedSizeListArray.from_arrays(full.flatten(), type=full.type, mask=mask)
        return pa.ListArray.from_arrays(full.offsets, full.values, type=full.type, mask=mask)

    def _encode_strings(self, values: list, column: str) -> pa.Array:
        expected = f"an array of strings of shape {self.shape}"
        for row, value in enumerate(values):
            arr = np.asarray(value, dtype=object)
            if not shape_ok(arr.shape, self.shape) or not all(
                isinstance(x, str) for x in arr.ravel()
            ):
                raise bad_value(column, row, expected, value)
        return pa.array([np.asarray(v, dtype=object).tolist() for v in values], type=self.pa_type)

    def numpy_view(self, array: pa.Array) -> np.ndarray | None:
        if self.variable or self.dtype == "string":
            return None
        view = fixed_view(array, self.value_type, self.shape)
        return as_bfloat16(view) if self.dtype == BFLOAT16 and view is not None else view

    def to_numpy(self, array: pa.Array) -> np.ndarray | list:
        view = self.numpy_view(array)
        if view is not None:
            return view
        storage = unwrap_storage(array)
        if storage.null_count and not self.variable and self.dtype not in ("string", "bool"):
            return self._with_nans(storage)
        out = decode_nested(unwrap_storage(array))
        return as_bfloat16(out) if self.dtype == BFLOAT16 else out

    def _with_nans(self, storage: pa.Array) -> np.ndarray:
        """Missing rows as NaN-filled arrays (ints widen to float64), as `datasets` gives them."""
        dtype = numpy_dtype(self.dtype)
        out_dtype = dtype if dtype.kind == "f" or self.dtype == BFLOAT16 else np.dtype(np.float64)
        out = np.full((len(storage), *self.shape), np.nan, dtype=out_dtype)
        valid = storage.is_valid().to_numpy(zero_copy_only=False)
        filled = storage.filter(pa.array(valid))
        if len(filled):
            out[valid] = fixed_view(filled, self.value_type, self.shape)
        return out

    def to_python(self, array: pa.Array) -> list:
        return unwrap_storage(array).to_pylist()

    def to_dict(self) -> dict:
        return {"_type": type(self).__name__, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True, repr=False)
class Array2D(ArrayXD):
    """A 2-d array per row.

    >>> import numpy as np
    >>> from jaxfeed import Array2D, Dataset, Features
    >>> images = np.zeros((4, 28, 28), dtype=np.uint8)
    >>> ds = Dataset.from_dict({"x": images}, features=Features({"x": Array2D((28, 28), "uint8")}))
    >>> ds.with_format("numpy")[:2]["x"].shape
    (2, 28, 28)
    """

    ndims: ClassVar[int] = 2


@dataclass(frozen=True, repr=False)
class Array3D(ArrayXD):
    """A 3-d array per row, e.g. ``Array3D((32, 32, 3), "uint8")`` for colour images.

    >>> import numpy as np
    >>> from jaxfeed import Array3D, Dataset, Features
    >>> features = Features({"x": Array3D((2, 2, 3), "uint8")})
    >>> Dataset.from_dict({"x": np.zeros((4, 2, 2, 3), np.uint8)}, features=features).with_format("jax")[:4]["x"].shape
    (4, 2, 2, 3)
    """

    ndims: ClassVar[int] = 3


@dataclass(frozen=True, repr=False)
class Array4D(ArrayXD):
    """A 4-d array per row.

    >>> import numpy as np
    >>> from jaxfeed import Array4D, Dataset, Features
    >>> features = Features({"x": Array4D((2, 1, 2, 3), "float32")})
    >>> Dataset.from_dict({"x": np.ones((2, 2, 1, 2, 3))}, features=features).with_format("numpy")[0]["x"].shape
    (2, 1, 2, 3)
    """

    ndims: ClassVar[int] = 4


@dataclass(frozen=True, repr=False)
class Array5D(ArrayXD):
    """A 5-d array per row.

    >>> import numpy as np
    >>> from jaxfeed import Array5D, Dataset, Features
    >>> features = Features({"x": Array5D((1, 1, 1, 2, 2), "int32")})
    >>> Dataset.from_dict({"x": np.ones((3, 1, 1, 1, 2, 2))}, features=features).with_format("numpy")[:]["x"].shape
    (3, 1, 1, 1, 2, 2)
    """

    ndims: ClassVar[int] = 5


ARRAY_TYPES = {cls.__name__: cls for cls in (Array2D, Array3D, Array4D, Array5D)}
