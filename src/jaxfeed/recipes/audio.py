"""``jaxfeed train`` on audio: every clip checked, the log-mel features planned, the loaders' rows.

:func:`scan_clips` reads the header of every clip of every split and decodes its last frame
(soundfile, no full decode: a file cut short is found) before anything is written: a clip that
cannot be decoded, a sample rate of 0 (in a WAV header, or in a ``sampling_rate``/``sample_rate``
column of the folder's metadata) is refused naming the split,
row and file. :func:`plan_audio` chooses the features (``--sample-rate``, default 16 kHz;
``--clip-seconds``, default the longest clip of the train split up to :data:`MAX_DEFAULT_SECONDS`) and returns
the run's :class:`~jaxfeed.recipes.spec.Preprocessing` (``kind="audio"``, the log-mel options
in ``audio``). :func:`row_transform` is the loaders' ``log_mel`` (a random crop in training, the
centre otherwise); served models take raw clips through the same options
(:meth:`jaxfeed.serve.spec.ServingSpec.fit_audio`). A run of an AST checkpoint (``--model
hf:MIT/ast-...``) plans the checkpoint's own front end instead (:func:`plan_front_end`:
its ``preprocessor_config.json``'s rate, mel bins, frames, mean and std); its row transform is
:class:`~jaxfeed.models.hub.audio_features.ASTFrontEnd`, numpy only, in the loader's workers.

>>> prep = Preprocessing("audio", ["audio"], "label", [51, 64],
...                      audio={"sample_rate": 8000, "clip_seconds": 0.5, "hop_length": 80})
>>> row_transform(prep, train=True)
log_mel(LogMelOptions(sample_rate=8000, n_mels=64, n_fft=400, hop_length=80, f_min=0.0, f_max=None, clip_seconds=0.5), crop='random', column='audio')
"""

from __future__ import annotations

import dataclasses
import io
import math
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed._base.extras import require
from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Audio
from jaxfeed.loading.spectrogram import LogMel, LogMelOptions, log_mel
from jaxfeed.models.hub import audio_features
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.serve.spec import ServingSpec, SpecError

DEFAULT_SAMPLE_RATE = 16000
MAX_DEFAULT_SECONDS = 30.0  # --clip-seconds defaults to the longest clip, at most this
RATE_COLUMNS = ("sampling_rate", "sample_rate")  # metadata columns that declare a clip's rate
HEADER_BYTES = 65536  # read to find a WAV file's declared rate


@dataclass
class ClipScan:
    """What the headers of a split's clips say: seconds and rate of each."""

    seconds: np.ndarray
    rates: np.ndarray
    channels: np.ndarray | None = None  # channels of each clip (mixed to mono by the run)


def _header_rate(data: bytes) -> int | None:
    """The sample rate a RIFF/WAVE header declares (None when it is not a WAV file)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at = 12
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if chunk == b"fmt " and at + 16 <= len(data):
            return struct.unpack_from("<I", data, at + 12)[0]
        at += 8 + size + (size & 1)
    return None


def scan_clips(ds: Dataset, column: str, split: str) -> ClipScan:
    """Open every clip of ``ds[column]`` (headers only) and refuse, naming the split, row and
    file, one that cannot be decoded, is empty or declares a sample rate of 0 (in its header or
    in a metadata column ``sampling_rate``/``sample_rate``)."""
    soundfile = require("soundfile", "audio", "reading audio")
    stored = ds.select_columns([column]).cast_column(column, Audio(decode=False))[column]
    declared = next((c for c in RATE_COLUMNS if c in ds.features), None)
    meta = None if declared is None else ds.select_columns([declared]).data.column(declared)
    meta = None if meta is None else meta.to_pylist()
    seconds, rates = np.empty(len(stored)), np.empty(len(stored), np.int64)
    channels = np.ones(len(stored), np.int64)
    for i, cell in enumerate(stored):
        path = (cell or {}).get("path")
        where = f"split {split!r}, row {i}" + (f" ({path})" if path else "")
        if meta is not None and not (isinstance(meta[i], int | float) and meta[i] > 0):
            raise ConfigError(
                f"the metadata column {declared!r} is {meta[i]!r} at {where}: a sample rate must "
                "be a positive number of Hz"
            )
        try:
            data = cell.get("bytes") if cell else None
            if data is None and not path:
                raise ValueError("the cell is empty")
            if data is None:
                with open(path, "rb") as f:
                    head = f.read(HEADER_BYTES)
            else:
                head = data[:HEADER_BYTES]
            if _header_rate(head) == 0:
                raise ValueError("its header declares a sample rate of 0 Hz")
            info = soundfile.info(path if data is None else io.BytesIO(data))
            _read_last_frame(soundfile, path if data is None else io.BytesIO(data), info.frames)
        except (OSError, ValueError, RuntimeError, TypeError) as err:
            raise ConfigError(
                f"cannot decode the audio of column {column!r} at {where}: "
                f"{str(err).rstrip('.')}; fix or remove the file"
            ) from err
        if info.samplerate <= 0 or info.frames <= 0:
            what = "has no samples" if info.frames <= 0 else "declares a sample rate of 0 Hz"
            raise ConfigError(f"the audio of column {column!r} at {where} {what}")
        if meta is not None and int(meta[i]) != info.samplerate:
            raise ConfigError(
                f"the metadata column {declared!r} says {meta[i]} Hz at {where}, the file "
                f"{info.samplerate} Hz"
            )
        seconds[i], rates[i] = info.frames / info.samplerate, info.samplerate
        channels[i] = int(getattr(info, "channels", 1) or 1)
    return ClipScan(seconds, rates, channels)


def _read_last_frame(soundfile: Any, source: Any, frames: int) -> None:
    """Seek to the last frame the header declares and decode it: a file cut short (a truncated
    FLAC keeps its header) fails here, before training, instead of in the first evaluation."""
    if frames <= 0:
        return
    with soundfile.SoundFile(source) as f:
        f.seek(frames - 1)
        if len(f.read(1, dtype="float32")) != 1:
            raise ValueError(f"it ends before the {frames} frames its header declares")


def scan_splits(data: Mapping[str, Dataset], column: str) -> ClipScan:
    """:func:`scan_clips` over every split of the data as loaded (rows are named as there,
    before a validation split is carved); the scan of its ``train`` split (else the first)."""
    scans = {
        name: scan_clips(ds, column, name) for name, ds in data.items() if column in ds.features
    }
    if not scans:
        raise ConfigError(f"no split of the data has the audio column {column!r}")
    return scans.get("train", next(iter(scans.values())))


def plan_audio(
    data: Mapping[str, Dataset],
    column: str,
    label: str,
    task: str,
    sample_rate: int | None,
    clip_seconds: float | None,
    n_mels: int = 64,
) -> tuple[Preprocessing, list[str]]:
    """The run's log-mel preprocessing (every clip of ``data``, the splits as loaded, checked
    first) and lines for the user."""
    scan = scan_splits(data, column)
    rate = sample_rate or DEFAULT_SAMPLE_RATE
    longest = float(scan.seconds.max())
    if clip_seconds is None:
        seconds = min(math.ceil(longest * 100) / 100, MAX_DEFAULT_SECONDS)
        how = (
            "the longest clip"
            if longest <= MAX_DEFAULT_SECONDS
            else f"{MAX_DEFAULT_SECONDS:g} s at most"
        )
        how += "; --clip-seconds to choose"
    else:
        seconds, how = float(clip_seconds), "--clip-seconds"
    options = LogMelOptions(sample_rate=rate, n_mels=n_mels, clip_seconds=seconds)
    try:
        options.check()
    except ValueError as err:
        raise ConfigError(f"--clip-seconds {seconds:g} --sample-rate {rate}: {err}") from None
    shape = [options.frames, options.n_mels]
    if shape[0] < 8:
        raise ConfigError(
            f"--clip-seconds {seconds:g}: {shape[0]} frames of {options.hop_length / rate * 1e3:g} "
            "ms are too few for the audio CNN (8 at least)"
        )
    prep = Preprocessing(
        "audio", [column], label, shape, task, scale=False, audio=dataclasses.asdict(options)
    )
    found = sorted(set(scan.rates.tolist()))
    rates = ", ".join(f"{r:,}" for r in found[:4]) + (", ..." if len(found) > 4 else "")
    resampled = int((scan.rates != rate).sum())
    shortest = float(scan.seconds.min())
    cropped = int((scan.seconds > seconds + 0.5 / rate).sum())
    padded = int((scan.seconds < seconds - 0.5 / rate).sum())
    notes = [
        f"audio: {len(scan.seconds):,} clips of {shortest:.2f}-{longest:.2f} s at {rates} Hz; "
        f"resampled to {rate:,} Hz (--sample-rate){f': {resampled:,} clips' if resampled else ''}",
        f"clips: {seconds:g} s ({how}); {cropped:,} cropped (at random in training, the centre "
        f"in evaluation), {padded:,} padded with silence",
        *_channel_note(scan),
        f"features: log-mel, {options.n_mels} bins, {options.n_fft}-sample windows every "
        f"{options.hop_length} samples: {shape[0]} frames x {shape[1]} bins per clip",
    ]
    return prep, notes


def plan_front_end(
    data: Mapping[str, Dataset],
    column: str,
    label: str,
    task: str,
    extractor: audio_features.ASTFeatureExtractor,
    model: str,
    sample_rate: int | None = None,
    clip_seconds: float | None = None,
) -> tuple[Preprocessing, list[str]]:
    """The preprocessing of a run that fine-tunes an AST checkpoint (``model``, its ``--model``):
    the checkpoint's ``extractor`` (every clip of ``data`` checked first), clips resampled to its
    rate and cut to its ``max_length`` frames. ``--sample-rate`` or ``--clip-seconds`` other than
    the checkpoint's, and a clip too short for one frame, are refused."""
    rate, seconds = extractor.sampling_rate, extractor.clip_samples / extractor.sampling_rate
    if sample_rate is not None and sample_rate != rate:
        raise ConfigError(
            f"--sample-rate {sample_rate}: --model {model} takes audio at {rate:,} Hz (its "
            "preprocessor_config.json; every clip is resampled to it); drop --sample-rate"
        )
    if clip_seconds is not None and abs(clip_seconds - seconds) * rate >= 1:
        raise ConfigError(
            f"--clip-seconds {clip_seconds:g}: --model {model} takes clips of {seconds:g} s "
            f"({extractor.max_length} frames, its preprocessor_config.json; longer clips are cut, "
            "shorter ones padded); drop --clip-seconds"
        )
    scan = scan_splits(data, column)
    short = np.flatnonzero(scan.seconds * rate < audio_features.FRAME_LENGTH)
    if short.size:
        i = int(short[0])
        raise ConfigError(
            f"the audio of column {column!r} at row {i} of the train split lasts "
            f"{scan.seconds[i] * 1e3:.1f} ms: --model {model}'s front end needs "
            f"{audio_features.FRAME_LENGTH / rate * 1e3:g} ms at least (one frame of "
            f"{audio_features.FRAME_LENGTH} samples at {rate:,} Hz); remove or lengthen it"
        )
    options = audio_features.front_end_options(extractor)
    shape = [extractor.max_length, extractor.num_mel_bins]
    prep = Preprocessing("audio", [column], label, shape, task, scale=False, audio=options)
    found = sorted(set(scan.rates.tolist()))
    rates = ", ".join(f"{r:,}" for r in found[:4]) + (", ..." if len(found) > 4 else "")
    resampled = int((scan.rates != rate).sum())
    upsampled = int((scan.rates < rate).sum())
    longest, shortest = float(scan.seconds.max()), float(scan.seconds.min())
    cut = int((scan.seconds > seconds + 0.5 / rate).sum())
    notes = [
        f"audio: {len(scan.seconds):,} clips of {shortest:.2f}-{longest:.2f} s at {rates} Hz; "
        f"resampled to {rate:,} Hz (the checkpoint's rate){f': {resampled:,} clips' if resampled else ''}",
        f"clips: {seconds:g} s ({extractor.max_length} frames, the checkpoint's max_length); {cut:,} "
        "cut (at random in training, from the start in evaluation, as transformers cuts), "
        "shorter ones' features padded",
        *_channel_note(scan),
        f"features: the checkpoint's front end (AST's Kaldi-style log-mel filterbank), "
        f"{extractor.num_mel_bins} bins, 25 ms frames every 10 ms, normalised with its mean "
        f"{extractor.mean:g} and std {extractor.std:g}: {shape[0]} frames x {shape[1]} bins",
    ]
    if upsampled:
        low = min(found)
        notes.append(
            f"note: {upsampled:,} clips are sampled below the checkpoint's {rate:,} Hz (down to "
            f"{low:,} Hz): upsampled, they hold nothing above {low // 2:,} Hz, which the "
            "checkpoint was trained to hear"
        )
    return prep, notes


def _channel_note(scan: ClipScan) -> list[str]:
    """The line that says clips of several channels are mixed to mono (none when all are mono).

    >>> _channel_note(ClipScan(np.ones(3), np.ones(3), np.array([2, 1, 2])))
    ['channels: 2 clips of 2 channels mixed to mono (the channels averaged), 1 mono']
    """
    if scan.channels is None or not (scan.channels > 1).any():
        return []
    many = scan.channels[scan.channels > 1]
    counts = ", ".join(str(c) for c in sorted(set(many.tolist())))
    mono = int((scan.channels == 1).sum())
    return [
        f"channels: {len(many):,} clip{'s' if len(many) > 1 else ''} of {counts} channels mixed "
        f"to mono (the channels averaged){f', {mono:,} mono' if mono else ''}"
    ]


def row_transform(prep: Preprocessing, *, train: bool) -> LogMel | audio_features.ASTFrontEnd:
    """The loaders' ``row_transform`` of an audio run: its ``log_mel``, with a random crop for
    ``train`` (the loader's per-row ``rng``: a resumed run crops alike) and the centre else; an
    AST checkpoint's front end (a random crop for ``train``, the start else)."""
    column = prep.input_columns[0]
    if audio_features.is_front_end(prep.audio):
        crop = "random" if train else "start"
        return audio_features.ASTFrontEnd.from_options(prep.audio, crop, column)
    return log_mel(**prep.audio, crop="random" if train else "center", column=column)


def audio_batches(
    paths: list[str], spec: ServingSpec, size: int, notes: list[str]
) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
    """``predict``'s batches of audio files: ``(paths, decoded clips)``; ``notes`` gets what was
    resampled, cropped and padded (as in training)."""
    counts = {"resampled": 0, "cropped": 0, "padded": 0}
    for start in range(0, len(paths), size):
        chunk = paths[start : start + size]
        try:
            clips, chunk_counts = spec.read_audio(chunk)
        except SpecError as err:
            raise ConfigError(str(err)) from None
        for key, n in chunk_counts.items():
            counts[key] += n
        yield chunk, clips
    options = spec.audio or {}
    done = []
    if counts["resampled"]:
        done.append(
            f"resampled {counts['resampled']} of {len(paths)} clips to {options.get('sample_rate')} Hz"
        )
    seconds = options.get("clip_seconds")
    if counts["cropped"]:
        where = "the start" if audio_features.is_front_end(options) else "the centre"
        done.append(f"cropped {counts['cropped']} to {seconds:g} s ({where})")
    if counts["padded"] and audio_features.is_front_end(options):
        done.append(
            f"padded {counts['padded']} to {seconds:g} s (their features, as transformers pads)"
        )
    elif counts["padded"]:
        done.append(f"padded {counts['padded']} to {seconds} s with silence")
    notes += done
