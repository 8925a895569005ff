"""Nested dict features (Arrow structs) and the dispatch shared by every feature.

A feature is either a :class:`Feature` or a dict of features (a struct column). These helpers
accept both, so container features (``Sequence``, ``Features``) need not care which they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.features.base import Feature, FeatureError, bad_value, unwrap_storage

FeatureLike = Feature | Mapping[str, Any]


def pa_type_of(feature: FeatureLike) -> pa.DataType:
    """The Arrow storage type of a feature or dict of features."""
    if isinstance(feature, Mapping):
        return pa.struct([pa.field(k, pa_type_of(v)) for k, v in feature.items()])
    return feature.pa_type


def encode_column(feature: FeatureLike, values: Any, column: str) -> pa.Array:
    """Encode one column of values; errors name ``column`` and the row."""
    if not isinstance(feature, Mapping):
        return feature.encode(values, column)
    if isinstance(values, pa.Array | pa.ChunkedArray):
        values = values.to_pylist()
    values = list(values)
    mask = np.zeros(len(values), dtype=bool)
    fields = {name: [] for name in feature}
    for row, value in enumerate(values):
        if value is None:
            mask[row] = True
            for name in feature:
                fields[name].append(None)
            continue
        if not isinstance(value, Mapping):
            raise bad_value(column, row, f"a dict with keys {list(feature)}", value)
        unknown = set(value) - set(feature)
        if unknown:
            raise bad_value(
                column,
                row,
                f"a dict with keys {list(feature)} (unknown key {sorted(unknown)[0]!r})",
                value,
            )
        for name in feature:
            fields[name].append(value.get(name))
    arrays = []
    for name, sub in feature.items():
        sub_values = fields[name]
        nulls = [i for i, v in enumerate(sub_values) if v is None and mask[i]]
        if nulls and not isinstance(sub, Mapping):
            # Null parent rows: fill children with a valid placeholder taken from a real row.
            filler = next((v for v in sub_values if v is not None), None)
            if filler is not None:
                sub_values = [filler if mask[i] else v for i, v in enumerate(sub_values)]
        arrays.append(encode_column(sub, sub_values, f"{column}.{name}"))
    return pa.StructArray.from_arrays(
        arrays, names=list(feature), mask=pa.array(mask) if mask.any() else None
    )


def decode_python(feature: FeatureLike, array: pa.Array) -> list:
    """Decode to Python values, one per row (images and audio decoded)."""
    if isinstance(feature, Mapping):
        array = unwrap_storage(array)
        columns = {name: decode_python(sub, _field(array, name)) for name, sub in feature.items()}
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return [
            {name: columns[name][i] for name in feature} if valid[i] else None
            for i in range(len(array))
        ]
    return feature.to_python(array)


def decode_numpy(feature: FeatureLike, array: pa.Array) -> np.ndarray | list:
    """Decode a column to one ndarray when every row has the same shape, else a list per row."""
    if isinstance(feature, Mapping):
        array = unwrap_storage(array)
        columns = {name: decode_numpy(sub, _field(array, name)) for name, sub in feature.items()}
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return [
            {name: columns[name][i] for name in feature} if valid[i] else None
            for i in range(len(array))
        ]
    return feature.to_numpy(array)


def _field(array: pa.StructArray, name: str) -> pa.Array:
    # `field()` ignores the struct's own offset; `flatten()` honours it.
    index = array.type.get_field_index(name)
    return array.flatten()[index]


def requires_decoding(feature: FeatureLike) -> bool:
    """Whether any part of ``feature`` decodes on read (images, audio)."""
    if isinstance(feature, Mapping):
        return any(requires_decoding(v) for v in feature.values())
    return feature.requires_decoding


def feature_to_dict(feature: FeatureLike) -> Any:
    """JSON-ready description of a feature or dict of features."""
    if isinstance(feature, Mapping):
        return {k: feature_to_dict(v) for k, v in feature.items()}
    return feature.to_dict()


__all__ = [
    "FeatureError",
    "FeatureLike",
    "decode_numpy",
    "decode_python",
    "encode_column",
    "feature_to_dict",
    "pa_type_of",
    "requires_decoding",
]
