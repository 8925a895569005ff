"""The preprocessing of an export, declared as data: raw inputs in, what ``predict`` prints out.

A :class:`ServingSpec` is JSON (kept in an export's ``config.json`` under ``"preprocessing"``):
which inputs the model reads, how images are decoded and resized, how integer pixels are scaled,
how table columns are standardised, imputed and one-hot encoded (with an "unknown" slot for a
category the run never saw), how regression outputs go back to the label's units, and the class
names. It is never code: :func:`jaxfeed.load_exported` reads it field by field, checks every
value, and applies it with numpy around the exported StableHLO function. ``jaxfeed train`` uses
the same functions on its batches, so training, ``eval``, ``predict`` and an export agree.

>>> import numpy as np
>>> spec = ServingSpec(kind="table", input_shape=(4,), task="regression",
...     columns=(TableColumn("area", "numeric", mean=50.0, std=10.0, fill=50.0),
...              TableColumn("city", "categorical", vocabulary=("Oslo", "Rome"))),
...     target_mean=100.0, target_std=20.0)
>>> spec.model_inputs({"area": [60.0, None], "city": ["Rome", "Paris"]}).tolist()
[[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
>>> spec.outputs(np.array([[1.5], [0.0]], np.float32)).tolist()
[130.0, 100.0]
>>> ServingSpec.from_dict(spec.to_dict(), "example") == spec
True
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed.loading.spectrogram import LogMelOptions, log_mel
from jaxfeed.models.hub import audio_features
from jaxfeed.serve.spec_checks import _REQUIRED, SpecError, _Checker, _known, _lists

SPEC_FORMAT = "jaxfeed-preprocessing"
SPEC_VERSION = 1
KINDS = ("image", "array", "table", "audio", "text", "lm", "tokens")
TASKS = ("classification", "regression", "lm")
TEXT_SPEC_KINDS = ("text", "lm")  # raw strings in, through the export's tokenizer.json
TOKEN_SPEC_KINDS = (*TEXT_SPEC_KINDS, "tokens")  # the model takes token ids (tokens: given as such)
TOKENIZER_FILE = "tokenizer.json"
IMAGE_MODES = ("L", "RGB", "RGBA")
CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}  # an image mode's channels (L: none, (h, w))
MISSING = "missing"  # the name of a missing cell in messages


def category_key(value: Any) -> str | None:
    """The vocabulary key of one raw cell: text as it is, integral numbers without ``.0``;
    ``None`` for a missing cell (``None`` or NaN).

    >>> category_key(3), category_key(3.0), category_key("3"), category_key(float("nan"))
    ('3', '3', '3', None)
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return None
        if float(value).is_integer():
            return str(int(value))
    return str(value)


ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


def has_alpha(image: Any) -> bool:
    """Whether a Pillow image has transparency: an alpha channel, or a transparent colour (a
    palette's or a PNG's ``tRNS``)."""
    return image.mode in ALPHA_MODES or "transparency" in image.info


WHITE = (255, 255, 255)  # what transparency is composited onto: jaxfeed train's default


def composite(array: np.ndarray, background: Sequence[int] = WHITE) -> np.ndarray:
    """An image with an alpha last channel (``(h, w, 2)`` grey or ``(h, w, 4)`` RGB) composited
    onto an ``(r, g, b)`` background (grey: its luminance, as Pillow converts to L), as uint8:
    what ``jaxfeed train``, ``predict`` and an export's spec do to an image with transparency
    (``background``: white, the default of ``--image-background``). Reading such images with
    another tool (``ray.data.read_images(mode="RGBA")``), composite them with this to get the
    pixels the command trains on: converting to RGB drops the alpha channel and keeps the
    transparent pixels' own colour, often black.

    >>> rgba = np.array([[[0, 0, 0, 0], [0, 0, 0, 255], [200, 100, 0, 128]]], np.uint8)
    >>> composite(rgba).tolist()
    [[[255, 255, 255], [0, 0, 0], [227, 177, 127]]]
    >>> composite(np.array([[[10, 0]]], np.uint8), (255, 0, 0)).tolist()  # grey: 76 for red
    [[76]]
    """
    colour = array[..., :-1].astype(np.float32)
    alpha = array[..., -1:].astype(np.float32) / np.float32(255.0)
    if colour.shape[-1] == 1:
        r, g, b = background
        back = np.asarray([(r * 299 + g * 587 + b * 114) // 1000], np.float32)
    else:
        back = np.asarray(background, np.float32)
    out = np.rint(colour * alpha + back * (1 - alpha)).astype(np.uint8)
    return out[..., 0] if out.shape[-1] == 1 else out


@dataclass(frozen=True)
class TableColumn:
    """One input column of a table: ``numeric`` (standardised with ``mean`` and ``std``; a
    missing cell becomes ``fill``, or is refused when ``fill`` is None) or ``categorical`` (one-hot
    over ``vocabulary`` plus a last slot for unseen values; a missing cell goes to that slot when
    ``impute``, else it is refused).

    >>> TableColumn("city", "categorical", vocabulary=("lyon", "paris")).width
    3
    """

    name: str
    kind: str  # "numeric" or "categorical"
    mean: float = 0.0
    std: float = 1.0
    fill: float | None = None
    vocabulary: tuple[str, ...] = ()
    impute: bool = False

    @property
    def width(self) -> int:
        """Model inputs this column becomes."""
        return 1 if self.kind == "numeric" else len(self.vocabulary) + 1


@dataclass(frozen=True)
class ServingSpec:
    """Raw inputs -> model inputs, and model outputs -> predictions (see the module doc).

    >>> spec = ServingSpec("image", (8, 8, 1), labels=("cat", "dog"), image_mode="L", image_size=(8, 8))
    >>> ServingSpec.from_dict(spec.to_dict(), where="spec.json") == spec
    True
    """

    kind: str
    input_shape: tuple[int, ...]
    task: str = "classification"
    labels: tuple[str, ...] = ()
    columns: tuple[TableColumn, ...] = ()
    image_mode: str | None = None
    image_size: tuple[int, int] | None = None
    # (r, g, b): images are decoded with their alpha channel and composited onto this colour
    # (an image run whose files have transparency); None: converted to image_mode (alpha dropped)
    image_background: tuple[int, int, int] | None = None
    scale: bool = False  # integer inputs are divided by 255 into float32
    target_mean: float | None = None
    target_std: float | None = None
    # log_mel's options (jaxfeed.loading.spectrogram.LogMelOptions), or an AST checkpoint's front
    # end ({"front_end": "ast", ...}: jaxfeed.models.hub.audio_features.front_end_options)
    audio: dict[str, Any] | None = None
    # text: {"column", "max_length", "pad_id", "inputs": {argument: column}}; the tokenizer is
    # the export's tokenizer.json (data for the `tokenizers` library); a "tokens" spec takes the
    # ids as they are (no tokenizer) and adds "vocab_size" (an id past it is refused)
    text: dict[str, Any] | None = None

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["columns"] = [dataclasses.asdict(c) for c in self.columns]
        for key in ("audio", "text", "image_background"):  # specs read as before
            if out[key] is None:
                del out[key]
        return {"format": SPEC_FORMAT, "version": SPEC_VERSION, **_lists(out)}

    @classmethod
    def from_dict(cls, values: Any, where: str) -> ServingSpec:
        """A spec from its JSON, every field checked; errors name ``where`` and the field."""
        if not isinstance(values, Mapping):
            raise SpecError(
                f"{where}: preprocessing must be an object, got {type(values).__name__}"
            )
        values = dict(values)
        if values.pop("format", SPEC_FORMAT) != SPEC_FORMAT:
            raise SpecError(f"{where}: preprocessing is not a {SPEC_FORMAT!r} spec")
        version = values.pop("version", SPEC_VERSION)
        if not isinstance(version, int) or version > SPEC_VERSION:
            raise SpecError(
                f"{where}: preprocessing version {version!r} is newer than this jaxfeed reads "
                f"({SPEC_VERSION}): upgrade jaxfeed"
            )
        _known(values, {f.name for f in dataclasses.fields(cls)}, where, "preprocessing")
        check = _Checker(where)
        kind = check.choice(values, "kind", KINDS)
        task = check.choice(values, "task", TASKS, "classification")
        columns = []
        for i, column in enumerate(check.list(values, "columns", [])):
            at = f"{where}: preprocessing.columns[{i}]"
            if not isinstance(column, Mapping):
                raise SpecError(f"{at} must be an object")
            column = dict(column)
            _known(column, {f.name for f in dataclasses.fields(TableColumn)}, at, "column")
            c = _Checker(at)
            columns.append(
                TableColumn(
                    name=c.text(column, "name"),
                    kind=c.choice(column, "kind", ("numeric", "categorical")),
                    mean=c.number(column, "mean", 0.0),
                    std=c.number(column, "std", 1.0, positive=True),
                    fill=c.number(column, "fill", None),
                    vocabulary=tuple(c.texts(column, "vocabulary", [])),
                    impute=c.flag(column, "impute", False),
                )
            )
        size = check.ints(values, "image_size", None)
        background = values.get("image_background")
        if background is not None and not (
            isinstance(background, list) and len(background) == 3
            and all(type(v) is int and 0 <= v <= 255 for v in background)
        ):  # fmt: skip
            raise SpecError(
                f"{where}: preprocessing.image_background must be [r, g, b], integers in 0..255, "
                f"got {background!r}"[:300]
            )
        spec = cls(
            kind=kind,
            input_shape=tuple(check.ints(values, "input_shape")),
            task=task,
            labels=tuple(check.texts(values, "labels", [])),
            columns=tuple(columns),
            image_mode=check.choice(values, "image_mode", (*IMAGE_MODES, None), None),
            image_size=None if size is None else (size[0], size[1]),
            image_background=None if background is None else tuple(background),
            scale=check.flag(values, "scale", False),
            target_mean=check.number(values, "target_mean", None),
            target_std=check.number(values, "target_std", None, positive=True),
            audio=audio_options(values.get("audio"), where),
            text=text_options(values.get("text"), where),
        )
        spec._validate(where)
        return spec

    def _validate(self, where: str) -> None:
        if self.kind == "table":
            width = sum(c.width for c in self.columns)
            if not self.columns or list(self.input_shape) != [width]:
                raise SpecError(
                    f"{where}: preprocessing: {len(self.columns)} table columns make {width} "
                    f"inputs, but input_shape is {list(self.input_shape)}"
                )
        if self.kind == "image" and (self.image_size is None or len(self.image_size) != 2):
            raise SpecError(f"{where}: preprocessing: an image spec needs image_size [h, w]")
        if self.kind == "audio" and (self.audio is None or self.audio.get("clip_seconds") is None):
            raise SpecError(f"{where}: preprocessing: an audio spec needs audio.clip_seconds")
        if self.kind in TOKEN_SPEC_KINDS and self.text is None:
            raise SpecError(f"{where}: preprocessing: a text spec needs its text options")
        if self.task == "classification" and not self.labels:
            raise SpecError(f"{where}: preprocessing: a classification spec needs its labels")
        if self.task == "regression" and (self.target_mean is None or self.target_std is None):
            raise SpecError(
                f"{where}: preprocessing: a regression spec needs target_mean and target_std"
            )

    @property
    def takes_tokens(self) -> bool:
        """The model takes token ids by name: made of texts (text, lm) or given (tokens)."""
        return self.kind in TOKEN_SPEC_KINDS

    # ------------------------------------------------------------------ inputs
    def model_inputs(self, raw: Any) -> np.ndarray:
        """Raw inputs as the model takes them: a dict of table columns (lists or arrays, ``None``
        or NaN for a missing cell), or images (an array ``(n, h, w[, c])`` or a list of arrays of
        any size), or arrays."""
        if self.kind == "table":
            if not isinstance(raw, Mapping):
                raise SpecError(
                    "this model was trained on a table: give its rows as a dict of columns "
                    f"({', '.join(c.name for c in self.columns[:6])}...)"
                )
            return encode_table(raw, self.columns)
        if self.kind == "image":
            x = self.fit_images(raw)
        elif self.kind == "audio":
            x = self.fit_audio(raw)
        else:
            x = np.asarray(raw)
            if x.dtype.kind not in "biuf":
                raise SpecError(
                    f"inputs must be numbers (arrays of shape (batch, "
                    f"{', '.join(map(str, self.input_shape))})), got {x.dtype} values"
                )
            if list(x.shape[1:]) != list(self.input_shape):
                raise SpecError(
                    f"inputs must have shape (batch, {', '.join(map(str, self.input_shape))}), "
                    f"got {tuple(x.shape)}"
                )
        if self.scale and x.dtype.kind in "iu":
            return x.astype(np.float32) / np.float32(255.0)
        return x.astype(np.float32) if x.dtype.kind != "f" else x

    @property
    def hw(self) -> tuple[int, int]:
        size = self.image_size or self.input_shape[:2]
        return int(size[0]), int(size[1])

    def fit_images(self, images: Any) -> np.ndarray:
        """Images (an array or a list of arrays) in the spec's mode and size, stacked."""
        if isinstance(images, np.ndarray) and images.dtype != object:
            if list(images.shape[1:]) == list(self.input_shape):
                return images
            if images.ndim not in (3, 4):
                raise SpecError(
                    f"images must be a batch (n, h, w[, c]), got shape {tuple(images.shape)}"
                )
        fitted = [self.fit_image(np.asarray(a), i) for i, a in enumerate(images)]
        if not fitted:
            return np.zeros((0, *self.input_shape), np.uint8)
        return np.stack(fitted)

    @property
    def decode_mode(self) -> str | None:
        """The mode images are decoded in: the spec's, with an alpha channel (``LA``, ``RGBA``)
        when they are composited onto :attr:`image_background`."""
        if self.image_background is not None and self.image_mode in ("L", "RGB"):
            return self.image_mode + "A" if self.image_mode == "RGB" else "LA"
        return self.image_mode

    def fit_image(self, array: np.ndarray, index: int = 0) -> np.ndarray:
        """One image at the spec's size (Pillow's bilinear filter) and mode; an alpha channel
        composited onto the spec's background (:func:`composite`) when it has one."""
        import PIL.Image  # noqa: PLC0415 (import cost: Pillow, loaded once images are decoded)

        h, w = self.hw
        channels = CHANNELS.get(self.image_mode or "L", 1)
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (2, 3, 4)):
            raise SpecError(
                f"image {index}: expected (h, w), (h, w, 3) or (h, w, 4), got shape "
                f"{tuple(array.shape)}"
            )
        have = 1 if array.ndim == 2 else array.shape[-1]
        if self.image_background is not None and have in (2, 4) and channels != 4:
            array = composite(array, self.image_background)
            have = have - 1
        if have == 2:  # grey and alpha, without a background: as Pillow converts LA
            array, have = array[..., 0], 1
        if have != channels or (array.shape[:2] != (h, w)):
            image = PIL.Image.fromarray(array)
            if have != channels:
                image = image.convert(self.image_mode or "L")
            if image.size != (w, h):
                image = image.resize((w, h), PIL.Image.BILINEAR)
            array = np.asarray(image)
        return array.reshape(self.input_shape)

    def fit_audio(self, clips: Any) -> np.ndarray:
        """Log-mel spectrograms ``(n, frames, n_mels)`` of clips (``{"array", "sampling_rate"}``
        dicts, or waveforms at the spec's rate), centre-cropped or padded to its clip length. A
        numeric batch already of the model's input shape ``(n, frames, n_mels)`` is features,
        not ``n`` multichannel waveforms: it goes to the model as it is."""
        if (
            isinstance(clips, np.ndarray)
            and clips.dtype.kind in "iuf"
            and list(clips.shape[1:]) == list(self.input_shape)
        ):
            return clips.astype(np.float32, copy=False)
        try:
            return log_mel_batch(clips, self.audio or {})
        except ValueError as err:
            raise SpecError(str(err)) from None

    def read_audio(self, paths: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Audio files decoded (mono float32, at their own rate: :meth:`fit_audio` resamples),
        and how many will be ``resampled``, ``cropped`` and ``padded``."""
        from jaxfeed.data.features import Audio  # noqa: PLC0415 (import cost: pyarrow, soundfile)

        feature, options = Audio(), self.audio or {}
        clips, counts = [], {"resampled": 0, "cropped": 0, "padded": 0}
        for path in paths:
            try:
                with open(path, "rb") as f:
                    clip = feature.decode_value((f.read(), path), 0)
            except ImportError:
                raise
            except Exception as err:  # soundfile's own error type: still name the file
                raise SpecError(f"cannot decode audio {path}: {type(err).__name__}: {err}") from err
            rate = clip["sampling_rate"]
            seconds = len(clip["array"]) / rate
            counts["resampled"] += rate != options.get("sample_rate")
            counts["cropped"] += seconds > options.get("clip_seconds", seconds)
            counts["padded"] += seconds < options.get("clip_seconds", seconds)
            clips.append(clip)
        return clips, counts

    def read_images(self, paths: Sequence[str]) -> tuple[list[np.ndarray], dict[str, int]]:
        """Image files decoded in the spec's mode (as training decoded them), and how many were
        ``converted`` from another mode, have their transparency ``composited`` onto the
        background, and will be ``resized``."""
        import PIL.Image  # noqa: PLC0415 (import cost: Pillow, only when image files are read)

        from jaxfeed.data.features import Image  # noqa: PLC0415 (import cost: pyarrow, Pillow)

        feature = Image(mode=self.decode_mode)
        arrays, counts = [], {"converted": 0, "resized": 0, "composited": 0}
        for path in paths:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                with PIL.Image.open(io.BytesIO(data)) as probe:
                    counts["converted"] += probe.mode != self.image_mode
                    if self.image_background is not None and self.image_mode != "RGBA":
                        counts["composited"] += has_alpha(probe)
                decoded = feature.decode_value((data, path), 0)
            except PIL.UnidentifiedImageError:
                raise SpecError(
                    f"cannot read image {path}: not an image file (this model takes images: "
                    "PNG, JPEG, ... files or folders of them)"
                ) from None
            except (OSError, ValueError, PIL.Image.DecompressionBombError) as err:
                raise SpecError(f"cannot read image {path}: {err}") from err
            except Exception as err:  # a decoder's own error type: still name the file
                raise SpecError(f"cannot read image {path}: {type(err).__name__}: {err}") from err
            counts["resized"] += decoded.shape[:2] != self.hw
            arrays.append(decoded)
        return arrays, counts

    def texts(self, raw: Any) -> list[str]:
        """The texts of ``raw``: a string, a list of strings, or a table (a dict of columns, a
        pyarrow table, a Dataset) holding the run's text column."""
        column = str((self.text or {}).get("column", "text"))
        if isinstance(raw, str):
            return [raw]
        if hasattr(raw, "column_names") and not isinstance(raw, Mapping):  # pyarrow, Dataset
            if column not in raw.column_names:
                raise SpecError(
                    f"this model reads the text column {column!r}; the table has "
                    f"{list(raw.column_names)[:12]}"
                )
            raw = {column: raw[column]}
        if isinstance(raw, Mapping):
            if column not in raw:
                raise SpecError(
                    f"this model reads the text column {column!r}; got the columns {list(raw)[:12]}"
                )
            raw = raw[column]
        if hasattr(raw, "to_pylist"):
            raw = raw.to_pylist()
        elif hasattr(raw, "tolist"):
            raw = raw.tolist()
        texts = list(raw)
        for i, value in enumerate(texts):
            if not isinstance(value, str) or not value:
                raise SpecError(
                    f"text {i} of column {column!r} is {value!r}: this model takes non-empty "
                    "strings (its tokenizer.json makes the token ids)"
                )
        return texts

    def token_inputs(self, tokenizer: Any, raw: Any) -> dict[str, np.ndarray]:
        """Raw inputs as the model's keyword inputs, named as its arguments: texts through
        ``tokenizer`` (:meth:`texts`, :func:`token_batch`), or token ids as they are (a
        ``tokens`` spec: :meth:`token_ids`, :func:`id_batch`)."""
        options = self.text or {}
        length, pad = int(options["max_length"]), int(options.get("pad_id", 0))
        if self.kind == "tokens":
            batch = id_batch(self.token_ids(raw), length, pad)
        else:
            side = options.get("truncation_side", "right")
            batch = token_batch(tokenizer, self.texts(raw), length, pad, self.kind == "text", side)
        inputs = options.get("inputs") or {"input_ids": "input_ids"}
        return {str(a): batch[str(c)] for a, c in inputs.items()}

    def token_ids(self, raw: Any) -> list[np.ndarray]:
        """The rows of token ids of ``raw`` (a ``tokens`` spec): lists (or arrays) of integers,
        or a table (a dict of columns, a pyarrow table, a Dataset) holding the run's column;
        each row non-empty, its ids in ``[0, vocab_size)``.

        >>> spec = ServingSpec("tokens", (8,), labels=("a", "b"), text={"column": "ids",
        ...     "max_length": 8, "vocab_size": 10})
        >>> [r.tolist() for r in spec.token_ids({"ids": [[1, 2], [3]]})]
        [[1, 2], [3]]
        >>> spec.token_ids([[1, 12]])
        Traceback (most recent call last):
        ...
        jaxfeed.serve.spec_checks.SpecError: row 0 of token ids holds 12; the model's ids are 0 to 9
        """
        options = self.text or {}
        column = str(options.get("column", "input_ids"))
        if hasattr(raw, "column_names") and not isinstance(raw, Mapping):  # pyarrow, Dataset
            raw = {c: raw[c] for c in raw.column_names}
        if isinstance(raw, Mapping):
            if column not in raw:
                raise SpecError(
                    f"this model reads the token ids of column {column!r}; got the columns "
                    f"{list(raw)[:12]}"
                )
            raw = raw[column]
        if hasattr(raw, "to_pylist"):
            raw = raw.to_pylist()
        vocab = options.get("vocab_size")
        rows = []
        for i, value in enumerate(raw):
            row = np.asarray(value if value is not None else [])
            if row.ndim != 1 or not len(row) or row.dtype.kind not in "iu":
                raise SpecError(
                    f"row {i} of token ids is {repr(value)[:40]}: this model takes non-empty "
                    "lists of integers (token ids)"
                )
            bad = (row < 0) | (row >= vocab) if vocab else row < 0
            if bad.any():
                top = f"0 to {int(vocab) - 1}" if vocab else "0 or more"
                raise SpecError(
                    f"row {i} of token ids holds {row[bad][0]}; the model's ids are {top}"
                )
            rows.append(row)
        return rows

    # ------------------------------------------------------------------ outputs
    def outputs(self, logits: Any) -> np.ndarray:
        """Model outputs as ``predict`` prints them: class probabilities ``(n, classes)``, or
        regression values ``(n,)`` in the label column's units; a language model's
        next-token logits ``(n, length, vocab)`` as they are."""
        if self.task == "lm":
            return np.asarray(logits)
        logits = np.asarray(logits, np.float64)
        if self.task == "regression":
            return logits.reshape(len(logits), -1)[:, 0] * self.target_std + self.target_mean
        shifted = logits - logits.max(axis=-1, keepdims=True)
        e = np.exp(shifted)
        return e / e.sum(axis=-1, keepdims=True)

    def predictions(self, outputs: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        """``(labels, scores)`` of :meth:`outputs`: class names and their probabilities, or the
        regression values and ``None``."""
        if self.task == "regression":
            return [float(v) for v in outputs], None
        best = np.argmax(outputs, axis=-1)
        return [self.labels[i] for i in best], outputs[np.arange(len(best)), best]


# ---------------------------------------------------------------------------------- text
def token_batch(
    tokenizer: Any, texts: Sequence[str], max_length: int, pad_id: int, cut: bool = True,
    side: str = "right",
) -> dict[str, np.ndarray]:  # fmt: skip
    """``texts`` tokenized as in training (cut to ``max_length`` with the tokenizer's own
    truncation when ``cut``, on ``side``: right keeps a text's first tokens, left its last;
    special tokens kept) and padded with ``pad_id`` to the longest: ``input_ids``,
    ``attention_mask``, ``segment_ids`` and ``positions`` (int32).

    Uncut texts (a language model's prompts) are encoded without special tokens, as
    :func:`jaxfeed.text.generate` encodes them. A text that gives no tokens (or, uncut, more
    than ``max_length``) raises :class:`SpecError` naming it."""
    if tokenizer.padding is not None:
        tokenizer.no_padding()  # a given tokenizer.json may pad: rows are padded here
    want = {"max_length": max_length, "direction": side}
    if cut and {k: (tokenizer.truncation or {}).get(k) for k in want} != want:
        tokenizer.enable_truncation(max_length, direction=side)  # as training cut the texts
    if not cut and tokenizer.truncation is not None:
        tokenizer.no_truncation()
    encoded = (
        [e.ids for e in tokenizer.encode_batch(list(texts), add_special_tokens=cut)]
        if texts
        else []
    )
    length = max(map(len, encoded), default=1)
    ids = np.full((len(texts), length), pad_id, np.int32)
    mask = np.zeros((len(texts), length), np.int32)
    for i, row in enumerate(encoded):
        if not row:
            raise SpecError(f"text {i} gives no tokens: {texts[i][:60]!r}")
        if len(row) > max_length:
            raise SpecError(
                f"text {i} ({texts[i][:40]!r}) is {len(row)} tokens, more than the model's "
                f"{max_length}"
            )
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
    return {"input_ids": ids, "attention_mask": mask, "segment_ids": mask.copy(),
            "positions": positions}  # fmt: skip


def id_batch(rows: Sequence[Any], max_length: int, pad_id: int) -> dict[str, np.ndarray]:
    """Rows of token ids cut to ``max_length`` (as training cut them) and padded with ``pad_id``
    to the longest: the columns :func:`token_batch` makes of texts.

    >>> batch = id_batch([[5, 6, 7], [8]], 2, 0)
    >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist()
    ([[5, 6], [8, 0]], [[1, 1], [1, 0]])
    """
    rows = [np.asarray(row)[:max_length] for row in rows]
    length = max(map(len, rows), default=1)
    ids = np.full((len(rows), length), pad_id, np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
    return {"input_ids": ids, "attention_mask": mask, "segment_ids": mask.copy(),
            "positions": positions}  # fmt: skip


def text_options(values: Any, where: str) -> dict[str, Any] | None:
    """The ``text`` field of a spec, each value checked."""
    if values is None:
        return None
    if not isinstance(values, Mapping):
        raise SpecError(f"{where}: preprocessing.text must be an object")
    check = _Checker(f"{where}: preprocessing.text")
    inputs = values.get("inputs", {"input_ids": "input_ids"})
    known = ("input_ids", "attention_mask", "segment_ids", "positions")
    if not isinstance(inputs, Mapping) or not all(
        isinstance(a, str) and c in known for a, c in inputs.items()
    ):
        raise SpecError(f"{where}: preprocessing.text.inputs must map arguments to {known}")
    side = values.get("truncation_side", "right")
    if side not in ("left", "right"):
        raise SpecError(
            f"{where}: preprocessing.text.truncation_side must be 'left' or 'right', got {side!r}"
        )
    out = {
        "column": check.text(values, "column"),
        "max_length": int(check.number(values, "max_length", _REQUIRED, positive=True)),
        "pad_id": int(check.number(values, "pad_id", 0)),
        "inputs": dict(inputs),
    }
    if side != "right":
        out["truncation_side"] = side
    if values.get("vocab_size") is not None:  # a tokens spec: ids past it are refused
        out["vocab_size"] = int(check.number(values, "vocab_size", None, positive=True))
    return out


# ---------------------------------------------------------------------------------- audio
def audio_options(values: Any, where: str) -> dict[str, Any] | None:
    """The ``audio`` field of a spec (log_mel's options, or an AST front end's), each value
    checked."""
    if values is None:
        return None
    if not isinstance(values, Mapping):
        raise SpecError(f"{where}: preprocessing.audio must be an object")
    at = f"{where}: preprocessing.audio"
    if audio_features.is_front_end(values):
        try:
            extractor = audio_features.from_options(values, at)
        except ValueError as err:
            raise SpecError(str(err)) from None
        return audio_features.front_end_options(extractor)
    values = dict(values)
    _known(values, {f.name for f in dataclasses.fields(LogMelOptions)}, at, "audio")
    c = _Checker(at)
    options: dict[str, Any] = {}
    for key in ("sample_rate", "n_mels", "n_fft", "hop_length"):
        if key in values:
            value = values[key]
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
                raise c._fail(key, "a positive integer", value)
            options[key] = value
    options["f_min"] = c.number(values, "f_min", 0.0)
    for key in ("f_max", "clip_seconds"):
        options[key] = c.number(values, key, None, positive=True)
    try:
        LogMelOptions(**options).check()
    except ValueError as err:
        raise SpecError(f"{at}: {err}") from None
    return options


def log_mel_batch(clips: Any, options: Mapping[str, Any]) -> np.ndarray:
    """Clips as a batch of centre-cropped log-mel spectrograms, or of an AST checkpoint's
    features (cut from the start, as ``transformers`` cuts; see :func:`audio_options`)."""
    if audio_features.is_front_end(options):
        transform: Any = audio_features.ASTFrontEnd.from_options(options)
        e = transform.extractor
        shape = (e.max_length, e.num_mel_bins)
    else:
        transform = log_mel(**options, crop="center")
        shape = (transform.options.frames, transform.options.n_mels)
    if isinstance(clips, np.ndarray) and clips.dtype == object:
        clips = list(clips)
    if isinstance(clips, Mapping) or (isinstance(clips, np.ndarray) and clips.ndim == 1):
        raise ValueError(
            "give a list of clips ({'array', 'sampling_rate'} dicts or waveforms), or a batch "
            "array (n, samples)"
        )
    out = []
    for i, clip in enumerate(clips):
        try:
            out.append(transform(clip))
        except ValueError as err:
            raise ValueError(f"clip {i}: {err}") from None
    if not out:
        return np.zeros((0, *shape), np.float32)
    return np.stack(out)


# ---------------------------------------------------------------------------------- tables
def encode_table(raw: Mapping[str, Any], columns: Sequence[TableColumn]) -> np.ndarray:
    """Table columns as one float32 matrix: each numeric column standardised, each categorical
    column one-hot (the last slot for unseen values). Time is linear in rows and columns.

    >>> encode_table({"a": [1.0, 3.0]}, [TableColumn("a", "numeric", mean=2.0, std=1.0)]).tolist()
    [[-1.0], [1.0]]
    """
    missing = [c.name for c in columns if c.name not in raw]
    if missing:
        raise SpecError(
            f"the rows have no column {missing[0]!r}; the model reads "
            f"{', '.join(c.name for c in columns[:8])}{', ...' if len(columns) > 8 else ''}"
        )
    n = len(raw[columns[0].name])
    x = np.empty((n, sum(c.width for c in columns)), np.float32)
    at = 0
    for column in columns:
        values = raw[column.name]
        if len(values) != n:
            raise SpecError(
                f"column {column.name!r} has {len(values)} rows, column {columns[0].name!r} {n}"
            )
        if column.kind == "numeric":
            x[:, at] = _numeric(values, column)
        else:
            x[:, at : at + column.width] = _one_hot(values, column)
        at += column.width
    return x


def _numeric(values: Any, column: TableColumn) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype == object:
        array = np.array([np.nan if v is None else v for v in array.tolist()])
    try:
        v = array.astype(np.float32)
    except (TypeError, ValueError):
        bad = next(x for x in array.tolist() if not _is_number(x))
        raise SpecError(f"column {column.name!r} is numeric; got {str(bad)[:40]!r}") from None
    holes = ~np.isfinite(v)
    if holes.any():
        if column.fill is None:
            row = int(np.flatnonzero(holes)[0])
            raise SpecError(
                f"column {column.name!r} is empty or not finite at row {row}; fill or drop such "
                "rows (or train with --missing impute)"
            )
        v = np.where(holes, np.float32(column.fill), v)
    return (v - np.float32(column.mean)) / np.float32(column.std)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _one_hot(values: Any, column: TableColumn) -> np.ndarray:
    index = {v: i for i, v in enumerate(column.vocabulary)}
    unknown = len(column.vocabulary)
    ids = np.empty(len(values), np.int64)
    for row, value in enumerate(np.asarray(values, dtype=object).tolist()):
        key = category_key(value)
        if key is None and not column.impute:
            raise SpecError(
                f"column {column.name!r} is empty at row {row}; fill or drop such rows (or "
                "train with --missing impute)"
            )
        ids[row] = index.get(key, unknown) if key is not None else unknown
    out = np.zeros((len(ids), column.width), np.float32)
    out[np.arange(len(ids)), ids] = 1.0
    return out
