"""`List` (and `Sequence`, `LargeList`): a list of values per row, fixed-length or ragged.

As in `datasets` 4+, ``Sequence(feature)`` builds a :class:`List` (so ``Sequence(x) == List(x)``),
except that ``Sequence`` of a dict of features gives a dict of lists (the TFDS layout).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed.data.features._nested import (
    decode_nested,
    decode_rows,
    list_child,
    nested_fixed_array,
    to_block,
)
from jaxfeed.data.features.base import Feature, FeatureError, bad_value, fixed_view, unwrap_storage
from jaxfeed.data.features.struct import (
    FeatureLike,
    decode_numpy,
    decode_python,
    encode_column,
    feature_to_dict,
    pa_type_of,
    requires_decoding,
)
from jaxfeed.data.features.value import (
    BFLOAT16,
    Value,
    as_bfloat16,
    bfloat16_to_float32,
    numpy_dtype,
)


@dataclass(frozen=True)
class Sequence(Feature):
    """A list of ``feature`` per row; ``length=-1`` is ragged, ``length=n`` fixed (stored fixed-size).

    ``Sequence(...)`` returns a :class:`List`, as in `datasets`; ``Sequence`` of a dict of features
    returns a dict of ``List`` features.

    >>> from jaxfeed import Dataset, Features, List, Sequence, Value
    >>> feats = Features({"xy": Sequence(Value("float32"), length=2)})
    >>> ds = Dataset.from_dict({"xy": [[0.5, 1.0], [2.0, 3.0]]}, features=feats)
    >>> ds.with_format("numpy")[:]["xy"].shape
    (2, 2)
    >>> Sequence(Value("int32")) == List(Value("int32"))
    True
    >>> Sequence({"a": Value("int32")})
    {'a': List(Value('int32'))}
    """

    feature: Any
    length: int = -1
    id: str | None = field(default=None, repr=False, compare=False)
    _type: ClassVar[str] = "Sequence"

    def __new__(cls, feature: Any = None, length: int = -1, **kwargs: Any) -> Any:
        if cls is Sequence:
            if isinstance(feature, Mapping) and any(
                not isinstance(sub, List) for sub in feature.values()
            ):
                return {k: List(v, length=length, **kwargs) for k, v in feature.items()}
            return super().__new__(List)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if not isinstance(self.length, int | np.integer) or self.length < -1:
            raise ValueError(f"Sequence: length must be -1 (ragged) or >= 0, got {self.length!r}")
        if not isinstance(self.feature, Feature | Mapping):
            raise TypeError(
                f"Sequence: feature must be a feature or a dict of features, got {self.feature!r}"
            )
        if isinstance(self.feature, Mapping) and not isinstance(self.feature, dict):
            object.__setattr__(self, "feature", dict(self.feature))

    def __repr__(self) -> str:
        length = "" if self.length == -1 else f", length={self.length}"
        return f"{type(self).__name__}({self.feature!r}{length})"

    def __hash__(self) -> int:
        return hash(repr(self))

    @property
    def pa_type(self) -> pa.DataType:
        inner = pa_type_of(self.feature)
        return pa.list_(inner) if self.length == -1 else pa.list_(inner, self.length)

    @property
    def requires_decoding(self) -> bool:
        return requires_decoding(self.feature)

    @property
    def fixed_shape(self) -> tuple[tuple[int, ...], str] | None:
        """``(shape, dtype)`` when every row has the same numeric shape, else None."""
        if self.length == -1:
            return None
        inner = self.feature
        if isinstance(inner, Value) and inner.is_numeric:
            return (self.length,), inner.dtype
        if isinstance(inner, Sequence):
            sub = inner.fixed_shape
            if sub is not None:
                return (self.length, *sub[0]), sub[1]
        return None

    @property
    def bfloat16(self) -> bool:
        """True when the innermost values are ``Value("bfloat16")`` (stored as float32)."""
        inner: Any = self.feature
        while isinstance(inner, Sequence):
            inner = inner.feature
        return isinstance(inner, Value) and inner.dtype == BFLOAT16

    def encode(self, values: Any, column: str) -> pa.Array:
        fixed = self.fixed_shape
        if isinstance(values, pa.Array | pa.ChunkedArray):
            values = values.to_pylist()
        if self.bfloat16:
            values = bfloat16_to_float32(values)
        if (
            fixed is not None
            and fixed[1] != "bool"
            and (isinstance(values, np.ndarray) or not _has_none(values))
        ):
            shape, dtype = fixed
            if dtype == BFLOAT16:
                block = to_block(values, shape, "float32", column)
                block = block.astype(numpy_dtype(BFLOAT16)).astype(np.float32)
            else:
                block = to_block(values, shape, dtype, column)
            return nested_fixed_array(block, Value(dtype).pa_type)
        if _is_plain(self.feature):
            try:
                if _numeric_leaf(self.pa_type):
                    # Infer, then cast with checks: pyarrow would silently truncate 2.5 to 2.
                    out = pa.array(list(values), from_pandas=False)
                    if _int_leaf(self.pa_type) and _float_leaf(out.type):
                        out = None  # floats, or ints past int64: the exact path below decides
                    else:
                        out = _refuse_overflow(out, out.cast(self.pa_type, safe=True), column)
                else:
                    out = pa.array(list(values), type=self.pa_type, from_pandas=False)
            except (
                pa.ArrowInvalid,
                pa.ArrowTypeError,
                pa.ArrowNotImplementedError,
                OverflowError,
                TypeError,
            ):
                out = None
            if out is not None:
                if self.length != -1 and out.null_count:
                    row = int(np.argmax(~out.is_valid().to_numpy(zero_copy_only=False)))
                    raise bad_value(column, row, f"a list of {self.length} values", None)
                return out
        return self._encode_rows(list(values), column)

    def _encode_rows(self, values: list, column: str) -> pa.Array:
        """General path: encode all items at once with the inner feature, then add offsets."""
        expected = "a list" if self.length == -1 else f"a list of {self.length} values"
        flat: list = []
        offsets = np.zeros(len(values) + 1, dtype=np.int64)
        mask = np.zeros(len(values), dtype=bool)
        for row, value in enumerate(values):
            if value is None:
                if self.length != -1:
                    raise bad_value(column, row, expected, value)
                mask[row] = True
            elif isinstance(value, str | bytes | Mapping) or not hasattr(value, "__len__"):
                raise bad_value(column, row, expected, value)
            else:
                if self.length != -1 and len(value) != self.length:
                    raise bad_value(column, row, expected, f"a list of {len(value)} values")
                flat.extend(value)
            offsets[row + 1] = len(flat)
        try:
            inner = encode_column(self.feature, flat, column)
        except FeatureError as err:
            row = (
                int(np.searchsorted(offsets, err.row, side="right") - 1)
                if err.row is not None
                else None
            )
            raise bad_value(column, row, f"a list of {err.expected}", err.value) from None
        if self.length != -1:
            return pa.FixedSizeListArray.from_arrays(inner, self.length)
        if pa.types.is_large_list(self.pa_type):
            return pa.LargeListArray.from_arrays(
                pa.array(offsets), inner, mask=pa.array(mask) if mask.any() else None
            )
        return pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), inner, mask=pa.array(mask) if mask.any() else None
        )

    def numpy_view(self, array: pa.Array) -> np.ndarray | None:
        fixed = self.fixed_shape
        if fixed is None:
            view = self._uniform_view(array)
        else:
            view = fixed_view(array, Value(fixed[1]).pa_type, fixed[0])
        return as_bfloat16(view) if self.bfloat16 and view is not None else view

    def _uniform_view(self, array: pa.Array) -> np.ndarray | None:
        """A zero-copy view of ragged lists that happen to share one length at every level (e.g.
        padded token ids stored as ``List``, the layout `datasets` writes), else None."""
        shape: list[int] = []
        feature: Any = self
        values = unwrap_storage(array)
        while isinstance(feature, Sequence):
            if values.null_count or not len(values):
                return None
            if feature.length != -1:
                dim = feature.length
            else:
                offsets = values.offsets.to_numpy(zero_copy_only=False)
                lengths = np.diff(offsets)
                if not (lengths == lengths[0]).all():
                    return None
                dim = int(lengths[0])
            shape.append(dim)
            values = list_child(values)
            feature = feature.feature
        if not (isinstance(feature, Value) and feature.is_numeric and feature.dtype != "bool"):
            return None
        return fixed_view(array, Value(feature.dtype).pa_type, tuple(shape))

    def to_numpy(self, array: pa.Array) -> np.ndarray | list:
        view = self.numpy_view(array)
        if view is not None:
            return view
        array = unwrap_storage(array)
        if not _json_inside(self.feature) and (
            _is_plain(self.feature)
            or (isinstance(self.feature, Feature) and not self.requires_decoding)
        ):
            out = decode_nested(array)
            return as_bfloat16(out) if self.bfloat16 else out
        return decode_rows(array, decode_numpy(self.feature, list_child(array)))

    def to_python(self, array: pa.Array) -> list:
        array = unwrap_storage(array)
        if not requires_decoding(self.feature) and not _json_inside(self.feature):
            return array.to_pylist()
        return decode_rows(array, decode_python(self.feature, list_child(array)), consolidate=False)

    def encode_example(self, value: Any) -> Any:
        """One row's list, each item encoded by the inner feature."""
        if value is None:
            return None
        inner = getattr(self.feature, "encode_example", None)
        return [inner(v) for v in value] if inner is not None else list(value)

    def decode_example(self, value: Any) -> Any:
        inner = getattr(self.feature, "decode_example", None)
        if value is None or inner is None:
            return value
        return [inner(v) for v in value]

    def to_dict(self) -> dict:
        out = {"_type": self._type, "feature": feature_to_dict(self.feature)}
        if self.length != -1:
            out["length"] = self.length
        return out


@dataclass(frozen=True, repr=False)
class List(Sequence):
    """A list of ``feature`` per row (32-bit offsets); ``length=n`` stores fixed-size lists.

    >>> from jaxfeed import Dataset, Features, List, Value
    >>> Dataset.from_dict({"t": [[1, 2], [3]]}, features=Features({"t": List(Value("int32"))}))[1]
    {'t': [3]}
    """

    _type: ClassVar[str] = "List"

    def __hash__(self) -> int:
        return hash(repr(self))


@dataclass(frozen=True, repr=False)
class LargeList(Sequence):
    """A ragged list per row with 64-bit offsets (Arrow ``large_list``), as in `datasets`.

    >>> from jaxfeed import Dataset, Features, LargeList, Value
    >>> ds = Dataset.from_dict({"t": [[1, 2], [3]]}, features=Features({"t": LargeList(Value("int64"))}))
    >>> ds.data.schema.field("t").type
    LargeListType(large_list<item: int64>)
    """

    _type: ClassVar[str] = "LargeList"

    def __post_init__(self) -> None:
        if self.length != -1:
            raise ValueError("LargeList has no fixed length; use List(feature, length=n)")
        super().__post_init__()

    def __hash__(self) -> int:
        return hash(repr(self))

    @property
    def pa_type(self) -> pa.DataType:
        return pa.large_list(pa_type_of(self.feature))


def _json_inside(feature: FeatureLike) -> bool:
    """True when a decoding ``Json`` feature is nested in ``feature``: its text is parsed on
    read (as `datasets` reads ``List(Json())``)."""
    if isinstance(feature, Mapping):
        return any(_json_inside(f) for f in feature.values())
    if isinstance(feature, Sequence):
        return _json_inside(feature.feature)
    return type(feature).__name__ == "Json" and bool(getattr(feature, "decode", False))


def _is_plain(feature: FeatureLike) -> bool:
    """True when Arrow can build the column straight from Python lists (no ids, no media)."""
    if isinstance(feature, Mapping):
        return all(_is_plain(f) for f in feature.values())
    if isinstance(feature, Value):
        return True
    if isinstance(feature, Sequence):
        return _is_plain(feature.feature)
    return False


def _numeric_leaf(t: pa.DataType) -> bool:
    return pa.types.is_integer(_leaf(t)) or pa.types.is_floating(_leaf(t))


def _leaf(t: pa.DataType) -> pa.DataType:
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    return t


def _int_leaf(t: pa.DataType) -> bool:
    return pa.types.is_integer(_leaf(t))


def _float_leaf(t: pa.DataType) -> bool:
    return pa.types.is_floating(_leaf(t))


def _leaves(array: pa.Array) -> pa.Array:
    while (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or (pa.types.is_fixed_size_list(array.type))
    ):
        array = array.flatten()
    return array


def _refuse_overflow(source: pa.Array, out: pa.Array, column: str) -> pa.Array:
    """Refuse lists whose finite values became inf in a narrower float type, naming the row."""
    leaf = _leaf(out.type)
    if not pa.types.is_floating(leaf) or leaf.bit_width == 64:
        return out
    src, got = _leaves(source), _leaves(out)
    if not len(src):
        return out
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(src.to_numpy(zero_copy_only=False).astype(np.float64)) & ~np.isfinite(
            got.to_numpy(zero_copy_only=False)
        )
    if not bad.any():
        return out
    for row in range(len(out)):
        try:
            _refuse_overflow_flat(source.slice(row, 1), out.slice(row, 1))
        except ValueError:
            raise bad_value(
                column,
                row,
                f"values that fit {leaf} (a value overflows to inf)",
                source[row].as_py(),
            ) from None
    return out


def _refuse_overflow_flat(source: pa.Array, out: pa.Array) -> None:
    src, got = _leaves(source), _leaves(out)
    with np.errstate(invalid="ignore"):
        if (
            np.isfinite(src.to_numpy(zero_copy_only=False).astype(np.float64))
            & ~np.isfinite(got.to_numpy(zero_copy_only=False))
        ).any():
            raise ValueError("overflow")


def _has_none(values: Any) -> bool:
    return isinstance(values, list) and any(v is None for v in values)
