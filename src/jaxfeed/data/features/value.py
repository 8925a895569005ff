"""`Value`: one scalar per row (numbers, bool, string, binary, null, and other Arrow scalar types)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed.data.features.base import Feature, bad_value, unwrap_storage

_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "boolean": "bool"}
NUMERIC_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "bfloat16",
)
BFLOAT16 = "bfloat16"  # stored as Arrow float32 (exact), decoded as ml_dtypes' bfloat16


def is_bfloat16(dtype: Any) -> bool:
    """True for numpy's ``bfloat16`` dtype (ml_dtypes, as JAX uses) or its name."""
    return getattr(dtype, "name", dtype) == BFLOAT16


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype name, ``"bfloat16"`` included (ml_dtypes, as JAX).

    >>> numpy_dtype("bfloat16").name, numpy_dtype("int8").name
    ('bfloat16', 'int8')
    """
    if name == BFLOAT16:
        import ml_dtypes  # noqa: PLC0415 (import cost: about a second, only for bfloat16 columns)

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def as_bfloat16(values: Any) -> Any:
    """Decoded float values (an ndarray, or nested lists of them) as bfloat16 arrays; the stored
    float32 values are bfloat16 values, so nothing is rounded."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values.astype(numpy_dtype(BFLOAT16))
    if isinstance(values, list):
        return [as_bfloat16(v) for v in values]
    return values


def bfloat16_to_float32(values: Any) -> Any:
    """Values to encode with bfloat16 arrays (or scalars) among them as float32 ones (exact):
    Arrow has no bfloat16 type."""
    if isinstance(values, np.ndarray | np.generic) and is_bfloat16(values.dtype):
        return values.astype(np.float32)
    if isinstance(values, list | tuple) and any(
        isinstance(v, np.ndarray | np.generic | list | tuple) for v in values
    ):
        return [bfloat16_to_float32(v) for v in values]
    return values


def round_to_bfloat16(array: pa.Array) -> pa.Array:
    """A float32 Arrow array with each value rounded to the nearest bfloat16 (nulls kept)."""
    rounded = array.to_numpy(zero_copy_only=False).astype(numpy_dtype(BFLOAT16))
    mask = None if not array.null_count else ~array.is_valid().to_numpy(zero_copy_only=False)
    return pa.array(rounded.astype(np.float32), type=pa.float32(), mask=mask)


def arrow_type(dtype: str) -> pa.DataType:
    """The Arrow type for a dtype name such as ``"int64"``, ``"string"`` or ``"timestamp[s]"``
    (``"bfloat16"`` is stored as float32: Arrow has no bfloat16)."""
    dtype = _ALIASES.get(dtype, dtype)
    if dtype == BFLOAT16:
        return pa.float32()
    try:
        return pa.type_for_alias(dtype)
    except ValueError:
        raise ValueError(
            f"unknown dtype {dtype!r}; expected one of {', '.join(NUMERIC_DTYPES)}, "
            "string, binary, null, large_string, large_binary or an Arrow type name"
        ) from None


def dtype_name(pa_type: pa.DataType) -> str:
    """The dtype name of an Arrow type (``pa.float32()`` -> ``"float32"``)."""
    if pa.types.is_floating(pa_type):
        return {16: "float16", 32: "float32", 64: "float64"}[pa_type.bit_width]
    return str(pa_type)


@dataclass(frozen=True)
class Value(Feature):
    """A scalar column.

    >>> from jaxfeed import Dataset, Features, Value
    >>> ds = Dataset.from_dict({"x": [1, 2]}, features=Features({"x": Value("int16")}))
    >>> ds.features["x"]
    Value('int16')
    """

    dtype: str
    id: str | None = field(default=None, repr=False)
    _type: ClassVar[str] = "Value"

    def __post_init__(self) -> None:
        dtype = _ALIASES.get(self.dtype, self.dtype)
        arrow_type(dtype)  # validates
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self) -> str:
        return f"Value({self.dtype!r})"

    @property
    def pa_type(self) -> pa.DataType:
        return arrow_type(self.dtype)

    @property
    def is_numeric(self) -> bool:
        return self.dtype in NUMERIC_DTYPES

    def encode(self, values: Any, column: str) -> pa.Array:
        if self.dtype == BFLOAT16:
            values = bfloat16_to_float32(values)
            out = encode_scalars(values, self.pa_type, column, "a bfloat16 value")
            if isinstance(out, pa.ChunkedArray):
                out = out.combine_chunks()
            return round_to_bfloat16(out)
        return encode_scalars(values, self.pa_type, column, f"a {self.dtype} value")

    def encode_example(self, value: Any) -> Any:
        """One value as `datasets` encodes it: ``bool``/``int``/``float``/``str`` by dtype."""
        t = self.pa_type
        if pa.types.is_boolean(t):
            return bool(value)
        if pa.types.is_integer(t):
            return int(value)
        if pa.types.is_floating(t):
            return float(value)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return str(value)
        return value

    def decode_example(self, value: Any) -> Any:
        """Values are stored as they are read: decoding returns ``value``."""
        return value

    def numpy_view(self, array: pa.Array) -> np.ndarray | None:
        array = unwrap_storage(array)
        if not self.is_numeric or self.dtype == "bool" or array.null_count:
            return None
        if array.type != self.pa_type:
            return None
        if self.dtype == BFLOAT16:
            return array.to_numpy(zero_copy_only=True).astype(numpy_dtype(BFLOAT16))
        return array.to_numpy(zero_copy_only=True)

    def to_numpy(self, array: pa.Array) -> np.ndarray | list:
        array = unwrap_storage(array)
        view = self.numpy_view(array)
        if view is not None:
            return view
        if self.dtype == "bool" and not array.null_count:
            return array.to_numpy(zero_copy_only=False)
        if self.is_numeric and array.null_count and self.dtype != "bool":
            # As `datasets` does: missing numbers become NaN; integers widen to float64.
            target = np.float64 if self.dtype.startswith(("int", "uint")) else None
            out = array.to_numpy(zero_copy_only=False)
            return out.astype(target) if target is not None else out
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            return array.to_pylist()
        if pa.types.is_temporal(array.type) and not array.null_count:
            return array.to_numpy(zero_copy_only=False)
        return array.to_pylist()

    def to_dict(self) -> dict:
        out = {"_type": "Value", "dtype": self.dtype}
        if self.id is not None:
            out["id"] = self.id
        return out


def encode_scalars(values: Any, pa_type: pa.DataType, column: str, expected: str) -> pa.Array:
    """Encode one scalar per row into ``pa_type``; on failure name the first row that does not fit."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        try:
            return check_float_overflow(values, values.cast(pa_type, safe=True), column, expected)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            values = values.to_pylist()
    if isinstance(values, np.ndarray) and values.dtype != object:
        if values.ndim != 1:
            raise bad_value(column, 0, expected, values[0] if len(values) else values)
        if _is_text(pa_type) and values.dtype.kind in "biuf":
            values = values.tolist()  # numbers to text as Python writes them, as `datasets`
        else:
            try:
                source = pa.array(values)
                return check_float_overflow(
                    source, source.cast(pa_type, safe=True), column, expected
                )
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                values = values.tolist()
    values = _convert_like_datasets(list(values), pa_type, column, expected)
    errors = (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OverflowError,
        TypeError,
    )
    try:
        out = _from_python(values, pa_type)
    except errors:
        for row, value in enumerate(values):
            try:
                _from_python([value], pa_type)
            except errors:
                raise bad_value(column, row, expected, value) from None
        raise
    if pa.types.is_floating(pa_type) and pa_type.bit_width < 64:
        finite = [isinstance(v, int | float | np.number) and np.isfinite(v) for v in values]
        got = out.to_numpy(zero_copy_only=False)
        bad = np.asarray(finite, dtype=bool) & ~np.isfinite(got) if len(got) else got
        if len(got) and bad.any():
            row = int(np.argmax(bad))
            raise bad_value(column, row, expected + " (it overflows to inf)", values[row])
    return out


def _is_text(pa_type: pa.DataType) -> bool:
    return pa.types.is_string(pa_type) or pa.types.is_large_string(pa_type)


def _convert_like_datasets(values: list, pa_type: pa.DataType, column: str, expected: str) -> list:
    """The conversions `datasets` makes when a value meets a declared ``Value`` and that lose
    nothing: numbers and bools into a string column as Python writes them (``1`` -> ``"1"``,
    ``2.0`` -> ``"2.0"``), and strings into a number column as ``int()`` / ``float()`` read them
    (``"0"`` -> ``0``, ``" 1.5"`` -> ``1.5``). A string that ``int()`` cannot read (``"2.5"``) is a
    ``FeatureError`` naming the row; strings into a bool column stay refused (``bool("False")``
    is True)."""
    if _is_text(pa_type):
        if any(isinstance(v, int | float | np.number | np.bool_) for v in values):
            return [
                str(v) if isinstance(v, int | float | np.number | np.bool_) else v for v in values
            ]
        return values
    integer, floating = pa.types.is_integer(pa_type), pa.types.is_floating(pa_type)
    if not (integer or floating) or not any(isinstance(v, str) for v in values):
        return values
    out = list(values)
    for row, value in enumerate(values):
        if isinstance(value, str):
            try:
                out[row] = int(value) if integer else float(value)
            except ValueError:
                reader = "int()" if integer else "float()"
                raise bad_value(
                    column, row, f"{expected} (a string that {reader} reads)", value
                ) from None
    return out


def check_float_overflow(
    source: pa.Array | pa.ChunkedArray, out: pa.Array | pa.ChunkedArray, column: str, expected: str
) -> pa.Array | pa.ChunkedArray:
    """Refuse a cast to a narrower float type that turned finite values into infinities."""
    if not (
        pa.types.is_floating(out.type)
        and out.type.bit_width < 64
        and (pa.types.is_floating(source.type) or pa.types.is_integer(source.type))
        and len(out)
    ):
        return out
    src = source.to_numpy(zero_copy_only=False).astype(np.float64)
    got = out.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(src) & ~np.isfinite(got)
    if bad.any():
        row = int(np.argmax(bad))
        raise bad_value(column, row, expected + " (it overflows to inf)", src[row].item())
    return out


def _all_ints(values: list) -> bool:
    return all(
        v is None or (isinstance(v, int | np.integer) and not isinstance(v, bool)) for v in values
    )


def _from_python(values: list, pa_type: pa.DataType) -> pa.Array:
    """Python values to Arrow; numbers go through a checked cast (pyarrow truncates 2.5 to 2)."""
    if pa.types.is_integer(pa_type) or pa.types.is_floating(pa_type):
        try:
            inferred = pa.array(values, from_pandas=False)
        except (pa.ArrowInvalid, OverflowError):
            # e.g. 2**63 for uint64, past int64 inference: build ints directly (Arrow range-checks).
            if pa.types.is_integer(pa_type) and _all_ints(values):
                return pa.array(values, type=pa_type, from_pandas=False)
            raise
        if (
            pa.types.is_integer(pa_type)
            and pa.types.is_floating(inferred.type)
            and _all_ints(values)
        ):
            # Huge ints (past int64) infer as double: build them exactly instead of via floats.
            return pa.array(values, type=pa_type, from_pandas=False)
        if not (
            pa.types.is_integer(inferred.type)
            or pa.types.is_floating(inferred.type)
            or pa.types.is_null(inferred.type)
        ):
            raise TypeError(f"expected numbers, got {inferred.type}")
        return inferred.cast(pa_type, safe=True)
    return pa.array(values, type=pa_type, from_pandas=False)
