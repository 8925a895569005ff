"""Shared storage of media features (images, audio): ``struct<bytes: binary, path: string>``.

A value is stored as its encoded file bytes, or as a path read when the row is decoded (as
`datasets` does for local files). Decoding runs one value at a time through ``decode_one``; a value
that cannot be read raises :class:`DecodeError` naming the column, row and path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.features.base import Feature, bad_value, unwrap_storage

MEDIA_TYPE = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])


class DecodeError(ValueError):
    """A stored image or audio value could not be decoded.

    >>> from jaxfeed import Dataset, DecodeError, Features, Image
    >>> ds = Dataset.from_dict({"img": [{"bytes": b"not a picture", "path": "a.png"}]},
    ...                        features=Features({"img": Image()}))
    >>> try:
    ...     ds[0]
    ... except DecodeError as err:
    ...     print(type(err).__name__)
    DecodeError
    """

    def __init__(self, column: str | None, row: int | None, path: str | None, reason: str) -> None:
        self.column, self.row, self.path, self.reason = column, row, path, reason
        where = ", ".join(
            part
            for part in (
                f"column {column!r}" if column is not None else "",
                f"row {row}" if row is not None else "",
                f"path {path!r}" if path else "",
            )
            if part
        )
        super().__init__(f"cannot decode {where}: {reason}")

    def __reduce__(self):
        return (type(self), (self.column, self.row, self.path, self.reason))

    def at(self, column: str, row: int) -> DecodeError:
        """The same error, placed at ``column`` and a dataset-wide ``row``."""
        return DecodeError(column, row, self.path, self.reason)


class MediaFeature(Feature):
    """Base of :class:`Image` and :class:`Audio`; subclasses define ``encode_one``/``decode_one``."""

    decode: bool

    @property
    def pa_type(self) -> pa.DataType:
        return MEDIA_TYPE

    @property
    def requires_decoding(self) -> bool:
        return self.decode

    def encode_one(self, value: Any) -> dict[str, Any]:
        """One value (path, bytes, array, ...) to ``{"bytes": ..., "path": ...}``."""
        raise NotImplementedError

    def decode_one(self, data: bytes | None, path: str | None) -> Any:
        """Decode one stored value (bytes if present, else the file at ``path``)."""
        raise NotImplementedError

    def encode(self, values: Any, column: str) -> pa.Array:
        if isinstance(values, pa.Array | pa.ChunkedArray):
            values = values.to_pylist()
        if isinstance(values, np.ndarray) and values.dtype != object:
            values = list(values)
        out = []
        for row, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            try:
                out.append(self._encode_checked(value))
            except (TypeError, ValueError, OSError) as err:
                raise bad_value(column, row, f"{self._what()} ({err})", value) from None
        return pa.array(out, type=MEDIA_TYPE)

    def encode_example(self, value: Any) -> dict[str, Any]:
        """One value as the stored ``{"bytes", "path"}`` dict (as `datasets`' encode_example)."""
        return self._encode_checked(value)

    def decode_example(self, value: dict[str, Any]) -> Any:
        """One stored ``{"bytes", "path"}`` dict decoded (a PIL image, an audio dict).

        ``RuntimeError`` when the feature has ``decode=False``, as in `datasets`.
        """
        if not self.decode:
            name = type(self).__name__
            raise RuntimeError(
                f"Decoding is disabled for this feature. Please use {name}(decode=True) instead."
            )
        return self.decode_one(value.get("bytes"), value.get("path"))

    def _what(self) -> str:
        return "a path, bytes or a {'bytes', 'path'} dict"

    def _encode_checked(self, value: Any) -> dict[str, Any]:
        if isinstance(value, Mapping):
            unknown = set(value) - {"bytes", "path"} - self._extra_keys()
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            if (
                value.get("bytes") is None
                and value.get("path") is None
                and not self._extra_keys() & set(value)
            ):
                raise ValueError("neither bytes nor path is set")
        if isinstance(value, str | os.PathLike):
            path = os.fspath(value)
            if not Path(path).is_file():
                raise ValueError(f"no file at {path!r}")
        return self.encode_one(value)

    def _extra_keys(self) -> set[str]:
        return set()

    def iter_stored(self, array: pa.Array) -> list[tuple[bytes | None, str | None] | None]:
        """``(bytes, path)`` per row (None for a null row), without decoding."""
        array = unwrap_storage(array)
        if pa.types.is_struct(array.type):
            fields = dict(zip([f.name for f in array.type], array.flatten(), strict=True))
            datas, paths = fields["bytes"], fields["path"]
            valid = array.is_valid().to_pylist()
            return [
                (d, p) if ok else None
                for d, p, ok in zip(datas.to_pylist(), paths.to_pylist(), valid, strict=True)
            ]
        if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
            return [(d, None) if d is not None else None for d in array.to_pylist()]
        return [(None, p) if p is not None else None for p in array.to_pylist()]

    def decode_at(self, stored: tuple[bytes | None, str | None] | None, row: int) -> Any:
        """Decode one stored value; errors carry ``row`` (a position the caller maps back)."""
        if stored is None:
            return None
        data, path = stored
        try:
            return self.decode_one(data, path)
        except DecodeError as err:
            if err.row is not None:
                raise
            raise DecodeError(None, row, err.path or path, err.reason) from err
        except Exception as err:
            raise DecodeError(None, row, path, f"{type(err).__name__}: {err}") from err

    def decode_value(self, stored: tuple[bytes | None, str | None] | None, row: int) -> Any:
        """One stored value decoded for the numpy and jax formats."""
        return self.decode_at(stored, row)

    def to_python(self, array: pa.Array) -> list:
        if not self.decode:
            return unwrap_storage(array).to_pylist()
        return [self.decode_at(s, i) for i, s in enumerate(self.iter_stored(array))]


def read_source(data: bytes | None, path: str | None) -> bytes | str:
    """What a codec should open: the stored bytes, else the path (which must exist)."""
    if data is not None:
        return data
    if path is None:
        raise DecodeError(None, None, None, "the value has neither bytes nor a path")
    if not Path(path).is_file():
        raise DecodeError(None, None, path, "file not found")
    return path


def embed_files(array: pa.Array) -> pa.Array:
    """A media column's cells stored as a path only, with the file's bytes read in (the path
    kept as its base name), as `datasets` embeds local files when it saves: a saved dataset is
    then self-contained, and a reader need not follow paths written in it. Other cells are kept.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.png")
    >>> _ = open(path, "wb").write(b"png!")
    >>> embed_files(pa.array([{"bytes": None, "path": path}], MEDIA_TYPE)).to_pylist()
    [{'bytes': b'png!', 'path': 'a.png'}]
    """
    storage = unwrap_storage(array)
    if not pa.types.is_struct(storage.type) or storage.type.get_field_index("path") < 0:
        return array
    datas, paths = storage.field("bytes"), storage.field("path")
    if datas.null_count == 0 or paths.null_count == len(paths):
        return array
    new_bytes, new_paths = datas.to_pylist(), paths.to_pylist()
    valid = storage.is_valid().to_pylist()
    for i, (data, path) in enumerate(zip(new_bytes, new_paths, strict=True)):
        if valid[i] and data is None and path is not None:
            try:
                with open(path, "rb") as f:
                    new_bytes[i] = f.read()
            except OSError as err:
                raise DecodeError(None, i, path, f"cannot embed the file: {err}") from None
            new_paths[i] = os.path.basename(path)
    out = pa.StructArray.from_arrays(
        [pa.array(new_bytes, datas.type), pa.array(new_paths, paths.type)],
        fields=list(storage.type),
        mask=pc.invert(storage.is_valid()),
    )
    return out if out.type == array.type else pa.ExtensionArray.from_storage(array.type, out)
