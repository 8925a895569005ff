"""`Features`: the column -> feature mapping of a dataset, its Arrow schema and its inference."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.features.array import ARRAY_TYPES
from jaxfeed.data.features.base import Feature, FeatureError
from jaxfeed.data.features.class_label import ClassLabel
from jaxfeed.data.features.json import Json
from jaxfeed.data.features.mixed import encode_at, json_paths, with_json_at
from jaxfeed.data.features.sequence import LargeList, List, Sequence
from jaxfeed.data.features.struct import (
    FeatureLike,
    encode_column,
    feature_to_dict,
    pa_type_of,
    requires_decoding,
)
from jaxfeed.data.features.translation import Translation, TranslationVariableLanguages
from jaxfeed.data.features.value import (
    BFLOAT16,
    Value,
    bfloat16_to_float32,
    dtype_name,
    is_bfloat16,
)

METADATA_KEY = b"huggingface"  # the key `datasets` uses, so either library reads the other's files
_MEDIA_TYPES: dict[str, type] = {}


def register_feature_type(cls: type) -> type:
    """Make a feature class known to :meth:`Features.from_dict` (used by Image and Audio)."""
    _MEDIA_TYPES[cls.__name__] = cls
    return cls


class Features(dict):
    """An ordered mapping of column name to feature (a :class:`Feature` or a dict of them).

    >>> from jaxfeed import ClassLabel, Features, Value
    >>> feats = Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])})
    >>> feats.arrow_schema.types
    [DataType(string), DataType(int64)]
    >>> Features.from_dict(feats.to_dict()) == feats
    True
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, feature in self.items():
            self[name] = _check_feature(feature, name)

    @property
    def arrow_schema(self) -> pa.Schema:
        """Arrow schema, with the features stored in its metadata."""
        meta = {METADATA_KEY: json.dumps({"info": {"features": self.to_dict()}}).encode()}
        return pa.schema([pa.field(k, pa_type_of(v)) for k, v in self.items()], metadata=meta)

    @property
    def type(self) -> pa.StructType:
        return pa.struct([pa.field(k, pa_type_of(v)) for k, v in self.items()])

    def to_dict(self) -> dict:
        """JSON-ready dict in the layout `datasets` uses."""
        return {k: feature_to_dict(v) for k, v in self.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Features:
        """Rebuild features from :meth:`to_dict` output (or a `datasets` features dict)."""
        return cls({k: feature_from_dict(v) for k, v in data.items()})

    @classmethod
    def from_arrow_schema(cls, schema: pa.Schema) -> Features:
        """Features stored in the schema's metadata, else inferred from the Arrow types."""
        meta = schema.metadata or {}
        if METADATA_KEY in meta:
            try:
                stored = json.loads(meta[METADATA_KEY])["info"]["features"]
            except (KeyError, TypeError, ValueError, RecursionError):
                stored = None
            if stored is not None and set(stored) == set(schema.names):
                return cls({name: feature_from_dict(stored[name]) for name in schema.names})
        return cls({field.name: feature_from_arrow_type(field.type) for field in schema})

    def copy(self) -> Features:
        return Features(dict(self))

    def matching(self, columns: Iterable[str]) -> Features:
        """These features in the order of ``columns``; ``ValueError`` unless they name exactly
        those columns.

        >>> from jaxfeed import Features, Value
        >>> list(Features({"b": Value("int8"), "a": Value("bool")}).matching(["a", "b"]))
        ['a', 'b']
        """
        columns = list(columns)
        missing = [k for k in columns if k not in self]
        if missing:
            raise ValueError(f"columns {missing} are not in the given features {list(self)}")
        absent = [k for k in self if k not in columns]
        if absent:
            raise ValueError(f"features {absent} have no column in the data {columns}")
        return Features({k: self[k] for k in columns})

    def flatten(self, max_depth: int = 16) -> Features:
        """Nested dict features as dotted columns (``{"a": {"b": f}}`` -> ``{"a.b": f}``), the
        columns ``Dataset.flatten`` makes; a flattened column goes to the end, as `datasets`
        orders them.

        >>> from jaxfeed import Features, Value
        >>> list(Features({"a": {"b": Value("int8")}, "c": Value("bool")}).flatten())
        ['c', 'a.b']
        """
        out = Features(self)
        for _ in range(1, max_depth):  # as there: max_depth=1 leaves them nested
            nested = [k for k, f in out.items() if isinstance(f, Mapping)]
            if not nested:
                break
            flat = {k: f for k, f in out.items() if k not in nested}
            for k in nested:
                flat.update({f"{k}.{sub}": f for sub, f in out[k].items()})
            out = Features(flat)
        return out

    def encode_example(self, example: Mapping[str, Any]) -> dict[str, Any]:
        """One row as `datasets` encodes it: each value by its feature's ``encode_example``
        (class names to ids, numbers to the column's Python type, media to ``{"bytes", "path"}``).

        >>> from jaxfeed import ClassLabel, Features, Value
        >>> Features({"y": ClassLabel(names=["a", "b"]), "x": Value("int32")}).encode_example({"y": "b", "x": 3})
        {'y': 1, 'x': 3}
        """
        return {k: _encode_value(self[k], v) for k, v in example.items()}

    def encode_column(self, column: Iterable[Any], column_name: str) -> list:
        """One column's values encoded by its feature (see :meth:`encode_example`)."""
        return [_encode_value(self[column_name], v) for v in column]

    def decode_example(self, example: Mapping[str, Any]) -> dict[str, Any]:
        """One stored row decoded by its features' ``decode_example`` (images to PIL, ...).

        >>> from jaxfeed import ClassLabel, Features
        >>> Features({"y": ClassLabel(names=["a", "b"])}).decode_example({"y": 1})
        {'y': 1}
        """
        return {k: _decode_value(self[k], v) for k, v in example.items()}

    def decode_column(self, column: Iterable[Any], column_name: str) -> list:
        """One stored column decoded value by value (see :meth:`decode_example`)."""
        return [_decode_value(self[column_name], v) for v in column]

    def decode_batch(self, batch: Mapping[str, Any]) -> dict[str, list]:
        """A dict of stored columns decoded value by value (see :meth:`decode_example`)."""
        return {k: [_decode_value(self[k], v) for v in values] for k, values in batch.items()}

    def encode_batch(self, batch: Mapping[str, Any]) -> dict[str, list]:
        """A dict of columns encoded value by value, as :meth:`encode_example` (a dict, as
        `datasets` returns; ``Dataset.from_dict`` builds the Arrow table).

        >>> from jaxfeed import ClassLabel, Features
        >>> Features({"y": ClassLabel(names=["a", "b"])}).encode_batch({"y": ["b", 0]})
        {'y': [1, 0]}
        """
        return {k: [_encode_value(self[k], v) for v in values] for k, values in batch.items()}

    def __repr__(self) -> str:
        return f"Features({dict.__repr__(self)})"


def _encode_value(feature: FeatureLike, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(feature, Mapping):
        return {k: _encode_value(feature[k], v) for k, v in value.items()}
    encode = getattr(feature, "encode_example", None)
    return value if encode is None else encode(value)


def _decode_value(feature: FeatureLike, value: Any) -> Any:
    """As `datasets`: only features that need decoding (media with ``decode=True``, ...) change
    the stored value."""
    if value is None:
        return None
    if isinstance(feature, Mapping):
        return {k: _decode_value(feature[k], v) for k, v in value.items()}
    decode = getattr(feature, "decode_example", None)
    stored_as_text = isinstance(feature, Json) and feature.decode  # JSON text: parsed, as there
    if decode is None or not (requires_decoding(feature) or stored_as_text):
        return value
    return decode(value)


def _check_feature(feature: Any, name: str) -> FeatureLike:
    if isinstance(feature, Feature):
        return feature
    if isinstance(feature, Mapping):
        return {k: _check_feature(v, f"{name}.{k}") for k, v in feature.items()}
    if isinstance(feature, list) and len(feature) == 1:
        return List(_check_feature(feature[0], name))
    raise TypeError(
        f"feature of column {name!r} must be a Value, ClassLabel, ArrayND, Sequence, Image, Audio "
        f"or a dict of them, got {feature!r}"
    )


def feature_from_dict(data: Any) -> FeatureLike:
    """One feature from its JSON description."""
    if isinstance(data, list):
        if len(data) != 1:
            raise ValueError(f"a list feature must hold exactly one feature, got {data!r}")
        return List(feature_from_dict(data[0]))
    if not isinstance(data, Mapping):
        raise ValueError(f"cannot read feature description {data!r}")
    if "_type" not in data:
        return {k: feature_from_dict(v) for k, v in data.items()}
    kind = data["_type"]
    args = {k: v for k, v in data.items() if k != "_type" and not k.startswith("_")}
    if kind == "Value":
        return Value(args["dtype"], id=args.get("id"))
    if kind == "Json":
        return Json(decode=args.get("decode", True))
    if kind == "Translation":
        return Translation(languages=args["languages"])
    if kind == "TranslationVariableLanguages":
        return TranslationVariableLanguages(languages=args.get("languages"))
    if kind == "ClassLabel":
        return ClassLabel(
            names=args.get("names"),
            num_classes=None if args.get("names") else args.get("num_classes"),
        )
    if kind in ARRAY_TYPES:
        shape = tuple(None if d is None else int(d) for d in args["shape"])
        return ARRAY_TYPES[kind](shape=shape, dtype=args["dtype"])
    if kind in ("Sequence", "List", "LargeList"):
        inner = feature_from_dict(args["feature"])
        if kind == "LargeList":
            return LargeList(inner)
        length = int(args.get("length", -1))
        # A legacy "Sequence" of a dict is a dict of lists, as `datasets` reads it.
        return (Sequence if kind == "Sequence" else List)(inner, length=length)
    if kind in _MEDIA_TYPES:
        cls = _MEDIA_TYPES[kind]
        return cls(**{k: v for k, v in args.items() if k in cls.__dataclass_fields__})
    raise ValueError(
        f"unknown feature type {kind!r}; known: Value, ClassLabel, Array2D-5D, Sequence, List, "
        f"LargeList, Json, Translation, TranslationVariableLanguages, {', '.join(_MEDIA_TYPES)}"
    )


def feature_from_arrow_type(t: pa.DataType) -> FeatureLike:
    """Infer a feature from an Arrow type."""
    if isinstance(t, pa.JsonType):
        return Json()
    if isinstance(t, pa.ExtensionType):
        shape = getattr(t, "shape", None)
        name = type(t).__name__.replace("ExtensionType", "")
        if shape is not None and name in ARRAY_TYPES:
            return ARRAY_TYPES[name](shape=tuple(shape), dtype=getattr(t, "value_type", "float32"))
        return feature_from_arrow_type(t.storage_type)
    if pa.types.is_fixed_size_list(t):
        return List(feature_from_arrow_type(t.value_type), length=t.list_size)
    if pa.types.is_large_list(t):
        return LargeList(feature_from_arrow_type(t.value_type))
    if pa.types.is_list(t):
        return List(feature_from_arrow_type(t.value_type))
    if pa.types.is_struct(t):
        return {
            t.field(i).name: feature_from_arrow_type(t.field(i).type) for i in range(t.num_fields)
        }
    if pa.types.is_dictionary(t):
        return Value(dtype_name(t.value_type))
    return Value(dtype_name(t))


def infer_column(
    values: Any, column: str, on_mixed_types: str | None = None
) -> tuple[FeatureLike, pa.Array]:
    """Infer the feature of a column of Python or numpy values, and encode it.

    ints -> int64, floats -> float64, str -> string, bytes -> binary, bools -> bool, nested lists
    -> Sequence, dicts -> nested features, numpy arrays of one shape -> fixed-shape storage.
    numpy ``bfloat16`` arrays (JAX's) keep their dtype: ``Value("bfloat16")`` (stored as float32).
    ``on_mixed_types="use_json"`` stores ``Json`` where the values mix types (dicts with other
    keys, dicts or lists beside scalars, ints beside strings), as `datasets` does.
    """
    if _has_bfloat16(values):
        feature, _ = infer_column(bfloat16_to_float32(values), column)
        feature = _float32_as_bfloat16(feature)
        return feature, encode_column(feature, bfloat16_to_float32(values), column)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return feature_from_arrow_type(values.type), values
    if isinstance(values, np.ndarray) and values.dtype != object:
        feature = _feature_for_block(values.shape[1:], values.dtype)
        return feature, encode_column(feature, values, column)
    values = list(values)
    first = next((v for v in values if v is not None), None)
    if isinstance(first, np.ndarray | np.generic):
        arrays = [np.asarray(v) if v is not None else None for v in values]
        shapes = {a.shape for a in arrays if a is not None}
        dtypes = {a.dtype for a in arrays if a is not None}
        if (
            len(shapes) == 1
            and len(dtypes) == 1
            and all(a is not None for a in arrays)
            and first.dtype.kind in "biuf"
        ):
            feature = _feature_for_block(next(iter(shapes)), next(iter(dtypes)))
            return feature, encode_column(feature, np.stack(arrays), column)
        values = [a.tolist() if a is not None else None for a in arrays]
    for hook in _INFER_HOOKS:
        feature = hook(first)
        if feature is not None:
            return feature, encode_column(feature, values, column)
    if on_mixed_types == "use_json":
        paths = json_paths(values)
        if paths:
            encoded = values
            for path in paths:
                encoded = [encode_at(v, path) for v in encoded]
            feature = infer_column(encoded, column)[0]
            for path in paths:
                feature = with_json_at(feature, path)
            return feature, encode_column(feature, values, column)
    try:
        array = pa.array(values, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as err:
        raise _locate_mixed(values, column, err) from None
    return feature_from_arrow_type(array.type), array


def _has_bfloat16(values: Any) -> bool:
    """True when ``values`` is a bfloat16 array, or a list whose first non-None value is (or
    holds, nested in lists) a bfloat16 array or scalar."""
    if isinstance(values, np.ndarray | np.generic):
        return is_bfloat16(values.dtype)
    if isinstance(values, list | tuple):
        first = next((v for v in values if v is not None), None)
        return first is not None and _has_bfloat16(first)
    return False


def _float32_as_bfloat16(feature: FeatureLike) -> FeatureLike:
    """The feature inferred from bfloat16 values cast to float32, its float leaves as bfloat16."""
    if isinstance(feature, Value) and feature.dtype in ("float32", "float64"):
        return Value(BFLOAT16)
    if isinstance(feature, Sequence):
        return type(feature)(_float32_as_bfloat16(feature.feature), length=feature.length)
    if isinstance(feature, tuple(ARRAY_TYPES.values())) and feature.dtype in ("float32", "float64"):
        return type(feature)(shape=feature.shape, dtype=BFLOAT16)
    return feature


def _pil_image_hook(value: Any) -> FeatureLike | None:
    pil = sys.modules.get("PIL.Image")
    if pil is not None and isinstance(value, pil.Image):
        return _MEDIA_TYPES["Image"]()
    return None


_INFER_HOOKS: list = [_pil_image_hook]  # functions value -> feature | None


def _locate_mixed(values: list, column: str, err: Exception) -> FeatureError:
    """Name the first row whose Python type differs from the first value's."""
    first = next((v for v in values if v is not None), None)
    for row, value in enumerate(values):
        if value is not None and not _same_kind(value, first):
            return FeatureError(column, row, f"a value like row 0 ({type(first).__name__})", value)
    return FeatureError(column, None, f"values Arrow can store ({err})", values[:3])


def _same_kind(a: Any, b: Any) -> bool:
    numbers = (int, float, np.integer, np.floating)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return True
    return type(a) is type(b)


def _feature_for_block(shape: tuple[int, ...], dtype: np.dtype) -> FeatureLike:
    name = dtype_name(pa.from_numpy_dtype(dtype)) if dtype.kind in "biuf" else None
    if name is None:
        raise TypeError(f"cannot infer a feature for numpy dtype {dtype}")
    if len(shape) == 0:
        return Value(name)
    if len(shape) == 1:
        return List(Value(name), length=shape[0])
    if len(shape) <= 5 and dtype.kind != "b":
        return ARRAY_TYPES[f"Array{len(shape)}D"](shape=shape, dtype=name)
    inner: FeatureLike = Value(name)
    for dim in reversed(shape):
        inner = List(inner, length=dim)
    return inner
