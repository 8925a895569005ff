"""`Audio`: encoded sound files (WAV, FLAC, OGG, ...) decoded with soundfile to float32 arrays."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from jaxfeed.extras import require
from jaxfeed.features.media import MediaFeature, read_source


@dataclass(frozen=True)
class Audio(MediaFeature):
    """A sound per row, stored as file bytes or a path.

    Values may be file paths, bytes, ``{"array", "sampling_rate"}`` dicts (stored as WAV) or
    ``{"bytes", "path"}`` dicts. Decoding gives ``{"path", "array", "sampling_rate"}`` with a
    float32 array: 1-d when ``mono`` (channels averaged), else (channels, frames). With
    ``sampling_rate`` set, audio is resampled with soxr.

    >>> import numpy as np
    >>> from jaxfeed import Audio, Dataset, Features
    >>> wave = {"array": np.zeros(800, np.float32), "sampling_rate": 8000}
    >>> ds = Dataset.from_dict({"a": [wave]}, features=Features({"a": Audio(sampling_rate=16000)}))
    >>> row = ds.with_format("numpy")[0]["a"]
    >>> row["array"].shape, row["sampling_rate"]
    ((1600,), 16000)
    """

    sampling_rate: int | None = None
    mono: bool = True
    decode: bool = True
    id: str | None = None
    _type: ClassVar[str] = "Audio"

    def __post_init__(self) -> None:
        if self.sampling_rate is not None and (
            not isinstance(self.sampling_rate, int) or self.sampling_rate <= 0
        ):
            raise ValueError(
                f"Audio: sampling_rate must be a positive int, got {self.sampling_rate!r}"
            )

    def __repr__(self) -> str:
        args = []
        if self.sampling_rate:
            args.append(f"sampling_rate={self.sampling_rate}")
        if not self.mono:
            args.append("mono=False")
        if not self.decode:
            args.append("decode=False")
        return f"Audio({', '.join(args)})"

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
        array = (
            samples.mean(axis=1, dtype=np.float32) if self.mono else np.ascontiguousarray(samples.T)
        )
        return {"path": path, "array": array, "sampling_rate": int(rate)}

    def to_numpy(self, array: pa.Array) -> list:
        return self.to_python(array)  # a batch of sounds is a list of per-row dicts

    def to_dict(self) -> dict:
        return {
            "_type": "Audio",
            "sampling_rate": self.sampling_rate,
            "mono": self.mono,
            "decode": self.decode,
        }


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
