"""One audio clip as a mono float32 waveform at a given rate: shared by the loader's log-mel
transform and the AST front end, both of which run in JAX-free worker processes (numpy, and soxr
when a clip needs resampling)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxfeed._base.extras import require


def mono_waveform(
    audio: Any, *, rate: int, column: str, prefix: str = ""
) -> tuple[np.ndarray, str, bool]:
    """``audio`` (an audio dict with ``array``, ``sampling_rate`` and maybe ``path``, or an array
    of ``(samples,)`` or ``(channels, samples)`` at ``rate``) as a mono float32 waveform at
    ``rate`` Hz; also what to call the clip in errors and whether it was resampled. PCM integers
    are scaled to [-1, 1); channels are averaged. Errors start with ``prefix`` and name
    ``column`` and the clip's file.

    >>> import numpy as np
    >>> clip = {"array": np.array([[0, 16384], [0, -16384]], np.int16), "sampling_rate": 8000}
    >>> samples, where, resampled = mono_waveform(clip, rate=8000, column="audio")
    >>> samples.tolist(), where, resampled
    ([0.0, 0.0], "column 'audio'", False)
    >>> mono_waveform({"array": [0.0], "sampling_rate": 0}, rate=8000, column="audio")
    Traceback (most recent call last):
    ValueError: column 'audio': sampling_rate must be a positive int, got 0
    """
    where, clip_rate = f"column {column!r}", rate
    if isinstance(audio, dict):
        if audio.get("path"):
            where += f" ({audio['path']})"
        clip_rate = audio.get("sampling_rate")
        if isinstance(clip_rate, np.integer):
            clip_rate = int(clip_rate)
        if not isinstance(clip_rate, int) or isinstance(clip_rate, bool) or clip_rate <= 0:
            raise ValueError(
                f"{prefix}{where}: sampling_rate must be a positive int, got {clip_rate!r}"
            )
        audio = audio.get("array")
    samples = np.asarray(audio)
    if samples.dtype.kind not in "iuf" or samples.ndim not in (1, 2):
        raise ValueError(
            f"{prefix}{where}: expected a waveform of shape (samples,) or (channels, samples), "
            f"got {samples.dtype} {samples.shape}"
        )
    if samples.dtype.kind in "iu":  # PCM integers to [-1, 1)
        samples = samples / np.float32(2 ** (8 * samples.dtype.itemsize - 1))
    samples = samples.astype(np.float32, copy=False)
    if samples.ndim == 2:
        samples = samples.mean(axis=0, dtype=np.float32)
    if samples.size == 0:
        raise ValueError(f"{prefix}{where}: the clip is empty (0 samples)")
    if clip_rate != rate:
        soxr = require("soxr", "audio", "resampling audio")
        samples = soxr.resample(samples, clip_rate, rate).astype(np.float32, copy=False)
    return samples, where, clip_rate != rate
