"""`Json`: any JSON-serialisable object per row, stored as JSON text (Arrow's ``json`` type)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed.data.features.base import Feature, bad_value, unwrap_storage


def _default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(value: Any) -> str:
    """JSON text of ``value`` (numpy scalars and arrays as their Python values)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_default)


@dataclass(frozen=True)
class Json(Feature):
    """Objects of any shape (dicts with varying keys, mixed lists), stored as JSON text.

    A string that already is valid JSON is stored as is, as `datasets` does.

    >>> from jaxfeed import Dataset, Features, Json
    >>> ds = Dataset.from_dict({"a": [{"b": 0}, [1, "x"]]}, features=Features({"a": Json()}))
    >>> ds[1]
    {'a': [1, 'x']}
    """

    decode: bool = True
    id: str | None = field(default=None, repr=False)
    _type: ClassVar[str] = "Json"

    def __repr__(self) -> str:
        return "Json()" if self.decode else "Json(decode=False)"

    @property
    def pa_type(self) -> pa.DataType:
        return pa.json_(pa.string())

    def encode_example(self, value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                json.loads(value)
                return value
            except ValueError:
                pass
        return dumps(value)

    def decode_example(self, value: str | None) -> Any:
        if not self.decode:
            raise RuntimeError("decoding is disabled for this feature; use Json(decode=True)")
        return None if value is None else json.loads(value)

    def encode(self, values: Any, column: str) -> pa.Array:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if isinstance(values, pa.Array):
            if isinstance(values.type, pa.JsonType):
                return values
            values = values.to_pylist()
        text = []
        for row, value in enumerate(values):
            try:
                text.append(self.encode_example(value))
            except (TypeError, ValueError) as err:
                raise bad_value(column, row, f"a JSON-serialisable value ({err})", value) from None
        return pa.ExtensionArray.from_storage(self.pa_type, pa.array(text, type=pa.string()))

    def to_python(self, array: pa.Array) -> list:
        text = unwrap_storage(array).to_pylist()
        if not self.decode:
            return text
        return [None if t is None else json.loads(t) for t in text]

    def to_numpy(self, array: pa.Array) -> list:
        return self.to_python(array)

    def to_dict(self) -> dict:
        out: dict = {"_type": "Json"}
        if not self.decode:
            out["decode"] = False
        return out
