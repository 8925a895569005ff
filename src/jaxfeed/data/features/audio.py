"""`Audio`: encoded sound files (WAV, FLAC, OGG, ...) decoded with soundfile to float32 arrays."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed._base.extras import require
from jaxfeed.data.features.media import MediaFeature, read_source


@dataclass(frozen=True)
class Audio(MediaFeature):
    """A sound per row, stored as file bytes or a path.

    The arguments are `datasets`' (``Audio(sampling_rate, decode, num_channels, stream_index,
    id)``), plus the keyword ``mono``. Values may be file paths, bytes,
    ``{"array", "sampling_rate"}`` dicts (stored as WAV) or ``{"bytes", "path"}`` dicts.
    Decoding gives ``{"path", "array", "sampling_rate"}`` with a float32 array: 1-d when
    ``mono`` (channels averaged, as `datasets`' ``decoder["array"]``), else (channels, frames).
    ``num_channels=1`` or ``2`` mixes the source down or up to that many channels first. With
    ``sampling_rate`` set, audio is resampled with soxr. soundfile reads the first audio stream
    of a file: ``stream_index`` may be None or 0.

    >>> import numpy as np
    >>> from jaxfeed import Audio, Dataset, Features
    >>> wave = {"array": np.zeros(800, np.float32), "sampling_rate": 8000}
    >>> ds = Dataset.from_dict({"a": [wave]}, features=Features({"a": Audio(sampling_rate=16000)}))
    >>> row = ds.with_format("numpy")[0]["a"]
    >>> row["array"].shape, row["sampling_rate"]
    ((1600,), 16000)
    """

    sampling_rate: int | None = None
    decode: bool = True
    num_channels: int | None = None
    stream_index: int | None = None
    id: str | None = field(default=None, repr=False)
    mono: bool = field(default=True, kw_only=True)
    dtype: ClassVar[str] = "dict"
    _type: ClassVar[str] = "Audio"

    def __post_init__(self) -> None:
        if self.sampling_rate is not None and (
            not isinstance(self.sampling_rate, int) or self.sampling_rate <= 0
        ):
            raise ValueError(
                f"Audio: sampling_rate must be a positive int, got {self.sampling_rate!r}"
            )
        if self.num_channels not in (None, 1, 2):
            raise ValueError(f"Audio: num_channels must be None, 1 or 2, got {self.num_channels!r}")
        if self.stream_index not in (None, 0):
            raise ValueError(
                f"Audio: stream_index={self.stream_index!r}: jaxfeed decodes with soundfile, which "
                "reads the first audio stream of a file (stream_index None or 0)"
            )
        if not isinstance(self.decode, bool):
            raise TypeError(f"Audio: decode must be a bool, got {self.decode!r}")

    def __repr__(self) -> str:
        shown = (
            f"Audio(sampling_rate={self.sampling_rate}, decode={self.decode}, "
            f"num_channels={self.num_channels}, stream_index={self.stream_index}"
        )
        return shown + (", mono=False)" if not self.mono else ")")

    def _extra_keys(self) -> set[str]:
        return {"array", "sampling_rate"}

    def _what(self) -> str:
        return (
            "audio (a path, bytes, an {'array', 'sampling_rate'} dict or a {'bytes', 'path'} dict)"
        )

    def encode_one(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str | os.PathLike):
            return {"bytes": None, "path": os.fspath(value)}
        if isinstance(value, bytes | bytearray | memoryview):
            return {"bytes": bytes(value), "path": None}
        if isinstance(value, dict) and "array" in value:
            return {
                "bytes": _to_wav(value["array"], value.get("sampling_rate")),
                "path": value.get("path"),
            }
        if isinstance(value, dict):
            return {"bytes": value.get("bytes"), "path": value.get("path")}
        raise TypeError(f"cannot store a {type(value).__name__} as audio")

    def decode_one(self, data: bytes | None, path: str | None) -> dict[str, Any]:
        soundfile = require("soundfile", "audio", "decoding audio")

        source = read_source(data, path)
        samples, rate = soundfile.read(
            io.BytesIO(source) if isinstance(source, bytes) else source,
            dtype="float32",
            always_2d=True,
        )
        if self.sampling_rate and rate != self.sampling_rate:
            soxr = require("soxr", "audio", "resampling audio")

            samples = soxr.resample(samples, rate, self.sampling_rate).astype(
                np.float32, copy=False
            )
            samples = samples.reshape(len(samples), -1)
            rate = self.sampling_rate
        if self.num_channels == 1 and samples.shape[1] != 1:
            samples = samples.mean(axis=1, dtype=np.float32, keepdims=True)
        elif self.num_channels == 2 and samples.shape[1] == 1:
            samples = np.repeat(samples, 2, axis=1)
        elif self.num_channels == 2 and samples.shape[1] != 2:
            raise ValueError(
                f"num_channels=2: the file has {samples.shape[1]} channels; jaxfeed mixes mono "
                "up or any number of channels down to 1, not to 2"
            )
        array = (
            samples.mean(axis=1, dtype=np.float32) if self.mono else np.ascontiguousarray(samples.T)
        )
        return {"path": path, "array": array, "sampling_rate": int(rate)}

    def to_numpy(self, array: pa.Array) -> list:
        return self.to_python(array)  # a batch of sounds is a list of per-row dicts

    def to_dict(self) -> dict:
        """`datasets`' layout: the arguments that differ from their defaults, and ``_type``."""
        out: dict[str, Any] = {}
        for name in ("sampling_rate", "decode", "num_channels", "stream_index", "id"):
            value = getattr(self, name)
            if value != self.__dataclass_fields__[name].default:
                out[name] = value
        if not self.mono:
            out["mono"] = False
        return {**out, "_type": "Audio"}


def _to_wav(array: Any, sampling_rate: Any) -> bytes:
    soundfile = require("soundfile", "audio", "encoding audio")

    if not isinstance(sampling_rate, int | np.integer) or sampling_rate <= 0:
        raise ValueError(
            f"an audio array needs a positive int 'sampling_rate', got {sampling_rate!r}"
        )
    samples = np.asarray(array)
    if samples.dtype.kind not in "iuf" or samples.ndim not in (1, 2):
        raise ValueError(
            f"audio arrays must be 1-d or (channels, frames) numbers, got {samples.dtype} {samples.shape}"
        )
    if samples.ndim == 2:
        samples = samples.T  # soundfile wants (frames, channels)
    subtype = {"int16": "PCM_16", "int32": "PCM_32"}.get(samples.dtype.name, "FLOAT")
    if subtype == "FLOAT":
        samples = samples.astype(np.float32, copy=False)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, int(sampling_rate), format="WAV", subtype=subtype)
    return buffer.getvalue()
