"""AST's front end: waveforms -> normalised log-mel filterbank ``input_values``, in numpy.

:class:`ASTFeatureExtractor` reproduces ``transformers``' ``ASTFeatureExtractor`` as it runs
without torchaudio (its numpy path, ``audio_utils.spectrogram``): Kaldi-style frames of 400
samples every 160 (25 ms / 10 ms at 16 kHz, no padding at the edges), each with its mean removed,
pre-emphasis 0.97, a symmetric Hann window, a 512-point FFT, the power spectrum through
``num_mel_bins`` triangular filters spaced on Kaldi's mel scale from 20 Hz to Nyquist, the natural
log (floored at float32's epsilon); then zero-padded or cut to ``max_length`` frames and
normalised as ``(x - mean) / (2 * std)``. With torchaudio installed ``transformers`` computes the
filterbank with ``torchaudio.compliance.kaldi.fbank`` instead, which its numpy path was written to
match at 16 kHz; the tests compare with the numpy path (torchaudio is not a test dependency).

Everything is vectorised over frames (one FFT call per clip); results equal ``transformers``' to
float32 rounding.

:class:`ASTFrontEnd` is the same front end as a loader's ``row_transform`` (``jaxfeed train
--model`` an AST checkpoint): an ``Audio`` cell mixed to mono, resampled to the checkpoint's rate
with soxr, cut to the samples that make ``max_length`` frames (at random in training, from the
start otherwise, as ``transformers`` cuts), then :class:`ASTFeatureExtractor`'s features. Its
options are JSON (:func:`front_end_options`: a run's ``config.json`` and an export's serving spec
keep them). This module imports only numpy (and ``jaxfeed._base``): the loader's worker processes,
which never import JAX, run it.

>>> import numpy as np
>>> fe = ASTFeatureExtractor(num_mel_bins=16, max_length=50)
>>> wave = np.sin(np.arange(8000) * 0.05).astype(np.float32)
>>> fe(wave, sampling_rate=16000)["input_values"].shape
(1, 50, 16)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from jaxfeed._base.waveform import mono_waveform

FRAME_LENGTH = 400  # samples, as transformers' numpy path (25 ms at 16 kHz)
HOP_LENGTH = 160  # samples (10 ms at 16 kHz)
FFT_LENGTH = 512
PREEMPHASIS = 0.97
MEL_FLOOR = 1.192092955078125e-07  # float32 epsilon, Kaldi's floor before the log
MIN_FREQUENCY = 20.0
FRONT_END = "ast"  # the "front_end" of a run's audio options that this module computes
CROPS = ("start", "random")
# the JSON options of a run's AST front end (besides "front_end", "sample_rate", "clip_seconds")
OPTION_KEYS = ("num_mel_bins", "max_length", "do_normalize", "mean", "std")


def kaldi_mel(freq: np.ndarray | float) -> np.ndarray:
    """Hertz to Kaldi's mel scale, ``1127 ln(1 + f / 700)``.

    >>> round(float(kaldi_mel(700.0)), 3)
    781.177
    """
    return 1127.0 * np.log(1.0 + np.asarray(freq, np.float64) / 700.0)


def mel_filters(num_mel_bins: int, sampling_rate: int,
                num_frequency_bins: int = FFT_LENGTH // 2 + 1) -> np.ndarray:  # fmt: skip
    """``(num_frequency_bins, num_mel_bins)`` triangular filters, triangular on the mel scale,
    from 20 Hz to ``sampling_rate // 2`` (``transformers``' ``mel_filter_bank(...,
    mel_scale="kaldi", triangularize_in_mel_space=True)``).

    >>> mel_filters(8, 16000).shape
    (257, 8)
    """
    edges = np.linspace(kaldi_mel(MIN_FREQUENCY), kaldi_mel(sampling_rate // 2), num_mel_bins + 2)
    bin_width = sampling_rate / ((num_frequency_bins - 1) * 2)
    bins = kaldi_mel(bin_width * np.arange(num_frequency_bins))
    slopes = edges[None, :] - bins[:, None]
    diff = np.diff(edges)
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    return np.maximum(0.0, np.minimum(down, up))


def log_mel(waveform: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """``(frames, mel bins)`` float32 log-mel filterbank of one mono ``waveform``.

    >>> log_mel(np.zeros(720, np.float32), mel_filters(4, 16000)).shape
    (3, 4)
    """
    wave = np.asarray(waveform, np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(wave, FRAME_LENGTH)[::HOP_LENGTH]
    frames = frames - frames.mean(axis=1, keepdims=True)
    emphasised = np.empty_like(frames)
    emphasised[:, 1:] = frames[:, 1:] - PREEMPHASIS * frames[:, :-1]
    emphasised[:, 0] = frames[:, 0] * (1.0 - PREEMPHASIS)
    emphasised *= np.hanning(FRAME_LENGTH)
    # transformers keeps the FFT in complex64 before taking the power in float64
    spectrum = np.fft.rfft(emphasised, n=FFT_LENGTH).astype(np.complex64)
    power = np.abs(spectrum, dtype=np.float64) ** 2
    mel = np.maximum(MEL_FLOOR, power @ filters)
    return np.log(mel).astype(np.float32)


@dataclass(frozen=True)
class ASTFeatureExtractor:
    """The preprocessing of an AST checkpoint (its ``preprocessor_config.json``), as data.

    Call it on one mono waveform (1-D), a list of them or a ``(batch, samples)`` array, sampled at
    ``sampling_rate``; it returns ``{"input_values": (batch, max_length, num_mel_bins)}`` float32,
    what :class:`jaxfeed.models.hub.ast.ASTForAudioClassification` takes.

    >>> fe = ASTFeatureExtractor.from_dict({"sampling_rate": 16000, "num_mel_bins": 8,
    ...                                     "max_length": 10})
    >>> fe([np.zeros(1600), np.ones(800)])["input_values"].shape
    (2, 10, 8)
    """

    sampling_rate: int = 16000
    num_mel_bins: int = 128
    max_length: int = 1024
    do_normalize: bool = True
    mean: float = -4.2677393
    std: float = 4.5689974
    feature_size: int = 1
    padding_value: float = 0.0
    return_attention_mask: bool = False

    def __post_init__(self) -> None:
        for name in ("sampling_rate", "num_mel_bins", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"preprocessor_config.json: {name} must be a positive int, got {value!r}"
                )
        if self.feature_size != 1:
            raise ValueError(
                f"preprocessor_config.json: feature_size must be 1 (mono), got {self.feature_size}"
            )
        for flag in ("do_normalize", "return_attention_mask"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(
                    f"preprocessor_config.json: {flag} must be true or false, got "
                    f"{getattr(self, flag)!r}"
                )
        for name in ("mean", "std", "padding_value"):
            value = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not np.isfinite(value)
            ):
                raise ValueError(
                    f"preprocessor_config.json: {name} must be a finite number, got {value!r}"
                )
        if self.do_normalize and not (0 < self.std < float("inf")):
            raise ValueError(f"preprocessor_config.json: std must be > 0, got {self.std!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any],
                  where: str = "preprocessor_config.json") -> ASTFeatureExtractor:  # fmt: skip
        """The extractor a ``preprocessor_config.json`` describes (unknown keys are ignored, as
        ``transformers`` keeps them as attributes)."""
        if not isinstance(values, Mapping):
            raise ValueError(f"{where}: expected a JSON object, got {type(values).__name__}")
        kind = values.get("feature_extractor_type", "ASTFeatureExtractor")
        if kind != "ASTFeatureExtractor":
            raise ValueError(f"{where}: feature_extractor_type {kind!r} is not ASTFeatureExtractor")
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """``preprocessor_config.json``'s content, as ``transformers`` writes it."""
        return {**asdict(self), "feature_extractor_type": "ASTFeatureExtractor"}

    def check_model(self, config: Mapping[str, Any]) -> None:
        """Raise unless the features fit the model of ``config`` (``max_length`` frames of
        ``num_mel_bins``)."""
        for key in ("max_length", "num_mel_bins"):
            if key in config and config[key] != getattr(self, key):
                raise ValueError(
                    f"preprocessor_config.json: {key}={getattr(self, key)} but the model's "
                    f"config.json has {key}={config[key]}: the features would not fit the model"
                )

    def __call__(self, raw_speech: Any, sampling_rate: int | None = None) -> dict[str, np.ndarray]:
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise ValueError(
                f"audio sampled at {sampling_rate} Hz, but the feature extractor expects "
                f"{self.sampling_rate} Hz: resample it first"
            )
        filters = mel_filters(self.num_mel_bins, self.sampling_rate)
        clips = _clips(raw_speech)
        out = np.stack([self.features(clip, filters, f"clip {i}") for i, clip in enumerate(clips)])
        return {"input_values": out}

    @property
    def clip_samples(self) -> int:
        """The samples of a clip that make exactly ``max_length`` frames (more are cut).

        >>> ASTFeatureExtractor(max_length=1024).clip_samples
        164080
        """
        return (self.max_length - 1) * HOP_LENGTH + FRAME_LENGTH

    def features(self, clip: np.ndarray, filters: np.ndarray | None = None,
                 where: str = "the clip") -> np.ndarray:  # fmt: skip
        """``(max_length, num_mel_bins)`` float32 features of one mono clip at ``sampling_rate``
        (``filters``: :func:`mel_filters` of this extractor, made once by a caller of many)."""
        if filters is None:
            filters = mel_filters(self.num_mel_bins, self.sampling_rate)
        if clip.size < FRAME_LENGTH:
            raise ValueError(
                f"{where} has {clip.size} samples; AST's front end needs at least "
                f"{FRAME_LENGTH} ({FRAME_LENGTH / self.sampling_rate * 1e3:g} ms at "
                f"{self.sampling_rate} Hz)"
            )
        if not np.isfinite(clip).all():
            raise ValueError(f"{where} holds NaN or infinite samples")
        out = np.zeros((self.max_length, self.num_mel_bins), np.float32)
        frames = log_mel(clip[: self.clip_samples], filters)[: self.max_length]
        out[: len(frames)] = frames
        if self.do_normalize:
            out = (out - np.float32(self.mean)) / np.float32(self.std * 2)
        return out.astype(np.float32, copy=False)


def _clips(raw_speech: Any) -> list[np.ndarray]:
    """One mono clip, a list of clips or a ``(batch, samples)`` array -> a list of 1-D float32
    arrays."""
    if isinstance(raw_speech, np.ndarray) and raw_speech.ndim > 2:
        raise ValueError(
            f"only mono audio is supported: got an array of shape {raw_speech.shape}, expected "
            "(samples,) or (batch, samples)"
        )
    batched = (isinstance(raw_speech, np.ndarray) and raw_speech.ndim == 2) or (
        isinstance(raw_speech, (list, tuple))
        and len(raw_speech) > 0
        and isinstance(raw_speech[0], (np.ndarray, list, tuple))
    )
    clips = list(raw_speech) if batched else [raw_speech]
    out = []
    for i, clip in enumerate(clips):
        array = np.asarray(clip, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError(
                f"clip {i}: only mono audio is supported, got shape {array.shape} (expected "
                "(samples,))"
            )
        out.append(array)
    if not out:
        raise ValueError("no audio clips given")
    return out


def for_model(values: Mapping[str, Any], config: Mapping[str, Any],
              where: str = "preprocessor_config.json") -> ASTFeatureExtractor:  # fmt: skip
    """The extractor of ``preprocessor_config.json`` ``values``, checked against the model's
    ``config``.

    >>> for_model({"num_mel_bins": 8, "max_length": 10}, {"num_mel_bins": 8, "max_length": 12})
    Traceback (most recent call last):
    ...
    ValueError: preprocessor_config.json: max_length=10 but the model's config.json has \
max_length=12: the features would not fit the model
    """
    extractor = ASTFeatureExtractor.from_dict(values, where)
    extractor.check_model(config)
    return extractor


# ---------------------------------------------------------------------------------- front end
def front_end_options(extractor: ASTFeatureExtractor) -> dict[str, Any]:
    """The JSON options of ``extractor`` as a run's front end (a run's ``config.json`` and an
    export's serving spec keep them; :func:`from_options` reads them back).

    >>> front_end_options(ASTFeatureExtractor(num_mel_bins=8, max_length=10))["clip_seconds"]
    0.115
    """
    options: dict[str, Any] = {
        "front_end": FRONT_END,
        "sample_rate": extractor.sampling_rate,
        "clip_seconds": extractor.clip_samples / extractor.sampling_rate,
    }
    options.update({key: getattr(extractor, key) for key in OPTION_KEYS})
    return options


def from_options(options: Mapping[str, Any], where: str = "audio") -> ASTFeatureExtractor:
    """The extractor of :func:`front_end_options`' ``options``, every value checked (a
    :class:`ValueError` names ``where`` and the field).

    >>> from_options(front_end_options(ASTFeatureExtractor(num_mel_bins=8))).num_mel_bins
    8
    """
    if not isinstance(options, Mapping) or options.get("front_end") != FRONT_END:
        raise ValueError(f"{where}: not the options of an AST front end")
    unknown = sorted(set(options) - {"front_end", "sample_rate", "clip_seconds", *OPTION_KEYS})
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} of an AST front end")
    missing = [k for k in ("sample_rate", *OPTION_KEYS) if k not in options]
    if missing:
        raise ValueError(f"{where}: missing field {missing[0]!r} of an AST front end")
    for key in ("mean", "std"):
        value = options[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
            raise ValueError(f"{where}: {key} must be a finite number, got {value!r}")
    if not isinstance(options["do_normalize"], bool):
        raise ValueError(f"{where}: do_normalize must be true or false")
    values = {key: options[key] for key in OPTION_KEYS}
    try:
        extractor = ASTFeatureExtractor(sampling_rate=options["sample_rate"], **values)
    except ValueError as err:
        raise ValueError(
            f"{where}: {str(err).removeprefix('preprocessor_config.json: ')}"
        ) from None
    seconds = options.get("clip_seconds")
    if seconds is not None and round(seconds * extractor.sampling_rate) != extractor.clip_samples:
        raise ValueError(
            f"{where}: clip_seconds {seconds!r} is not the {extractor.clip_samples} samples that "
            f"make max_length={extractor.max_length} frames"
        )
    return extractor


def is_front_end(options: Any) -> bool:
    """Whether a run's (or a spec's) audio options are an AST front end's (else log-mel's).

    >>> is_front_end({"front_end": "ast"}), is_front_end({"n_mels": 64}), is_front_end(None)
    (True, False, False)
    """
    return isinstance(options, Mapping) and "front_end" in options


class ASTFrontEnd:
    """AST's front end as a row transform (see the module doc): ``t(row, rng)`` on a row dict
    replaces ``column`` by its ``(max_length, num_mel_bins)`` features; ``t(audio)`` on one
    ``{"array", "sampling_rate"}`` dict or waveform (at the extractor's rate) returns them.

    >>> fe = ASTFrontEnd(ASTFeatureExtractor(sampling_rate=8000, num_mel_bins=8, max_length=20))
    >>> wave = np.sin(np.arange(4000) * 0.05).astype(np.float32)
    >>> fe({"audio": {"array": wave, "sampling_rate": 8000}, "label": 1})["audio"].shape
    (20, 8)
    """

    def __init__(self, extractor: ASTFeatureExtractor, crop: str = "start",
                 column: str = "audio") -> None:  # fmt: skip
        if crop not in CROPS:
            raise ValueError(f"ASTFrontEnd: crop must be one of {list(CROPS)}, got {crop!r}")
        self.extractor, self.crop, self.column = extractor, crop, column
        self.needs_rng = crop == "random"
        self._filters = mel_filters(extractor.num_mel_bins, extractor.sampling_rate)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], crop: str = "start",
                     column: str = "audio") -> ASTFrontEnd:  # fmt: skip
        """The front end of a run's audio options (:func:`front_end_options`)."""
        return cls(from_options(options), crop, column)

    def __repr__(self) -> str:
        e = self.extractor
        return (
            f"ast_front_end(sampling_rate={e.sampling_rate}, num_mel_bins={e.num_mel_bins}, "
            f"max_length={e.max_length}, crop={self.crop!r}, column={self.column!r})"
        )

    def __call__(self, row: Any, rng: np.random.Generator | None = None) -> Any:
        if self.needs_rng and rng is None:
            raise ValueError(
                "ASTFrontEnd(crop='random') is random: call it as t(row, rng) with a "
                "numpy.random.Generator (the DataLoader passes one to row_transform)"
            )
        if isinstance(row, dict) and self.column in row:
            return {**row, self.column: self.spectrogram(row[self.column], rng)}
        if isinstance(row, np.ndarray) or (isinstance(row, dict) and "array" in row):
            return self.spectrogram(row, rng)
        if isinstance(row, dict):
            raise KeyError(f"the row has no audio column {self.column!r} (it has {sorted(row)})")
        raise TypeError(
            f"AST front end: expected a row dict, an audio dict or a waveform array, got "
            f"{type(row).__name__}"
        )

    def waveform(self, audio: Any) -> tuple[np.ndarray, str, bool]:
        """A mono float32 waveform at the extractor's rate, what to call the clip in errors,
        and whether it was resampled."""
        return mono_waveform(
            audio, rate=self.extractor.sampling_rate, column=self.column, prefix="AST front end: "
        )

    def spectrogram(self, audio: Any, rng: np.random.Generator | None = None) -> np.ndarray:
        """The ``(max_length, num_mel_bins)`` features of one clip."""
        samples, where, _ = self.waveform(audio)
        n = self.extractor.clip_samples
        if len(samples) > n:
            extra = len(samples) - n
            start = int(rng.integers(0, extra + 1)) if self.crop == "random" else 0
            samples = samples[start : start + n]
        return self.extractor.features(samples, self._filters, where)


__all__ = [
    "ASTFeatureExtractor",
    "ASTFrontEnd",
    "for_model",
    "from_options",
    "front_end_options",
    "is_front_end",
    "log_mel",
    "mel_filters",
]
