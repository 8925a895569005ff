"""Which columns a run learns from: :func:`choose_columns` finds (or checks) the input columns
and the label column and names their kind (image, audio, array, token ids, table, text);
:func:`read_image_bytes` reads the binary columns that hold image files as images.

>>> from jaxfeed import Dataset
>>> columns = choose_columns(Dataset.from_dict({"x": [1.0, 2.0], "y": [0, 1]}), None, None)
>>> columns.inputs, columns.label, columns.kind
(['x'], 'y', 'table')
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from jaxfeed.data.dataset import Dataset, DatasetDict
from jaxfeed.data.features import Audio, ClassLabel, Image, Sequence, Value
from jaxfeed.data.features.array import ARRAY_TYPES
from jaxfeed.recipes.config import ConfigError, did_you_mean
from jaxfeed.recipes.text.text_columns import MIN_WORDS, is_string, string_profile, text_column_of

LABEL_NAMES = ("label", "labels", "target", "class", "y")


@dataclass
class Columns:
    inputs: list[str]
    label: str
    kind: str  # "image", "array", "audio", "tokens", "table", "text" or "lm"
    given: bool = False  # the inputs were named by --input-columns (nothing is excluded then)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (column, why)
    notes: list[str] = field(default_factory=list)  # why a column is what it is (for the run)
    why: str | None = None  # why the text column is text (found by the rule, or the folder's)


def _numeric(feature: Any) -> bool:
    return isinstance(feature, Value) and (
        feature.dtype.startswith(("int", "uint", "float")) or feature.dtype == "bool"
    )


def _scalar(feature: Any) -> bool:
    """A table cell jaxfeed learns from: a number, a bool or a string (a category)."""
    return _numeric(feature) or (
        isinstance(feature, Value) and feature.dtype in ("string", "large_string")
    )


def choose_columns(
    ds: Dataset,
    inputs: list[str] | None,
    label: str | None,
    text_column: str | None = None,
    task: str | None = None,
) -> Columns:
    """The input columns and the label column, given or found.

    Without ``inputs``: the first image, audio or array column; else a column of free text
    (``text_column``, or found: :mod:`jaxfeed.recipes.text.text_columns`); else every number, bool or
    string column of a table but the label (which of them are categories, identifiers or free
    text the preprocessing plan decides), other columns listed as excluded. ``task="lm"``: the
    text column alone, no label.
    """
    features = ds.features
    if task == "lm":
        column = text_column_of(ds, inputs, label, text_column, task)
        return Columns([column], "", "lm", text_column is not None)
    for name, flag in [(c, "--input-columns") for c in inputs or []] + [(label, "--label-column")]:
        if name is not None and name not in features:
            raise ConfigError(
                f"{flag} {name!r} is not a column{did_you_mean(name, features)}; the columns "
                f"are {_names(features)}"
            )
    if label is None:
        label = _found_label(features)
    column = text_column_of(ds, inputs, label, text_column, task)
    if column is not None:
        others = [c for c in features if c not in (column, label)]
        excluded = [(c, f"the text column {column!r} is the input") for c in others]
        why = None if text_column is not None else string_profile(ds, column).why()
        return Columns([column], label, "text", text_column is not None, excluded, why=why)
    given = inputs is not None
    excluded: list[tuple[str, str]] = []
    notes: list[str] = []
    if inputs is None:
        inputs, excluded = _found_inputs(features, label)
        notes = _not_text(ds, inputs)
    if label in inputs:
        raise ConfigError(f"--label-column {label!r} is also an input column")
    kinds = {c: _kind(features[c]) for c in inputs}
    if len(inputs) > 1 or kinds[inputs[0]] == "table":
        bad = [c for c, k in kinds.items() if k != "table"]
        if bad:
            raise ConfigError(
                f"--input-columns: {bad[0]!r} is {features[bad[0]]!r}; several input columns must all "
                "be table cells (numbers, bools or strings)"
            )
        return Columns(list(inputs), label, "table", given, excluded, notes)
    return Columns(list(inputs), label, kinds[inputs[0]], given, excluded, notes)


def _not_text(ds: Dataset, inputs: list[str]) -> list[str]:
    """A line for each string input of a table that reads like text (a median of
    :data:`~jaxfeed.recipes.text.text_columns.MIN_WORDS` words or more) but is no free text:
    why (its values repeat: a category), and the flag that reads it as text."""
    notes = []
    for name in inputs:
        if is_string(ds.features[name]):
            profile = string_profile(ds, name)
            if profile.median >= MIN_WORDS:
                notes.append(
                    f"columns: {name!r} is {profile.why()} (--text-column {name} reads it as text)"
                )
    return notes


def _found_label(features: Any) -> str:
    """The label column when none is given: the first ClassLabel, else one named as a label."""
    label = next((c for c, f in features.items() if isinstance(f, ClassLabel)), None)
    label = label or next((c for c in features if c.lower() in LABEL_NAMES), None)
    if (
        label is None
        and features
        and all(type(f).__name__ in ("Image", "Audio") for f in features.values())
    ):  # a folder of images (or clips) without class sub-folders
        raise ConfigError(
            "the folder's files lie directly in it: a classifier of a folder needs one "
            "sub-folder per class (FOLDER/cat/1.png, FOLDER/dog/2.png), or a metadata.csv "
            "with a label column"
        )
    if label is None:
        raise ConfigError(
            f"no ClassLabel column and none named {'/'.join(LABEL_NAMES)} among "
            f"{_names(features)}; give --label-column"
        )
    return label


def _found_inputs(features: Any, label: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The input columns when none are given: the first image, audio or array column (lists of
    floats are arrays), else a column of token ids (lists of integers: ``input_ids`` first),
    else every number, bool or string column but the label; and the columns excluded, with
    why."""
    excluded: list[tuple[str, str]] = []
    candidates = [(c, f) for c, f in features.items() if c != label]
    media = next((c for c, f in candidates if _kind(f) in ("image", "audio", "array")), None)
    if media is not None:
        return [media], excluded
    tokens = [c for c, f in candidates if _kind(f) == "tokens"]
    if tokens:
        column = "input_ids" if "input_ids" in tokens else tokens[0]
        why = f"lists of integers; the token ids are {column!r}"
        return [column], [(c, why) for c in tokens if c != column]
    inputs = []
    for c, f in candidates:
        if _scalar(f):
            inputs.append(c)
        else:
            excluded.append((c, _unread(f)))
    if not inputs:
        why = "; ".join(f"{c!r}: {reason}" for c, reason in excluded[:5])
        raise ConfigError(
            f"no image, array, token-id, numeric or text column to learn {label!r} from among "
            f"{_names(features)}{f' ({why})' if why else ''}; give --input-columns"
        )
    return inputs, excluded


def _unread(feature: Any) -> str:
    """Why a column is no input of a table, for the excluded line."""
    if isinstance(feature, Value) and feature.dtype in ("binary", "large_binary"):
        return "bytes that are not images jaxfeed reads (PNG, JPEG, ...)"
    if isinstance(feature, Sequence):
        return f"{feature!r}: lists of numbers are token ids (integers) or arrays (floats)"
    return f"{type(feature).__name__}, not a number or a category"


def _list_of(feature: Any) -> str | None:
    """``"int"`` or ``"float"`` for a column of lists of numbers (token ids, or vectors such as
    embeddings); None for any other column."""
    if isinstance(feature, Sequence) and isinstance(feature.feature, Value):
        dtype = feature.feature.dtype
        if dtype.startswith(("int", "uint")):
            return "int"
        if dtype.startswith("float"):
            return "float"
    return None


def read_image_bytes(data: DatasetDict) -> tuple[DatasetDict, list[str]]:
    """``data`` with its binary columns whose values are image files (PNG, JPEG, ...: a Ray or
    Spark job's bytes) read as images, and a line for each. The first :data:`IMAGE_SAMPLE`
    values of the first split decide (their headers only); a column of other bytes is left as
    it is.

    >>> import io, PIL.Image
    >>> png = io.BytesIO(); PIL.Image.new("L", (2, 2)).save(png, "PNG")
    >>> data = DatasetDict({"train": Dataset.from_dict({"img": [png.getvalue()], "raw": [b"ab"]})})
    >>> data, notes = read_image_bytes(data)
    >>> data["train"].features["img"], data["train"].features["raw"], notes
    (Image(), Value('binary'), ["columns: 'img' holds image files (PNG) as bytes: read as images"])
    """
    first = next(iter(data.values()), None)
    if first is None:
        return data, []
    notes = []
    for name, feature in first.features.items():
        if not (isinstance(feature, Value) and feature.dtype in ("binary", "large_binary")):
            continue
        formats = _image_formats(first, name)
        if formats is None:
            continue
        data = DatasetDict({k: v.cast_column(name, Image()) for k, v in data.items()})
        notes.append(
            f"columns: {name!r} holds image files ({', '.join(sorted(formats))}) as bytes: "
            "read as images"
        )
    return data, notes


IMAGE_SAMPLE = 8  # values of a binary column whose headers tell image files from other bytes


def _image_formats(ds: Dataset, column: str) -> set[str] | None:
    """The image formats of the first :data:`IMAGE_SAMPLE` non-null values of ``column``
    (their headers read by Pillow); None when one is not an image or there is none."""
    import PIL.Image  # import cost: Pillow, only for a binary column

    head = ds.select_columns([column]).select(range(min(ds.num_rows, 4 * IMAGE_SAMPLE)))
    values = [v for v in head.flatten_indices().data.column(column).to_pylist() if v]
    formats = set()
    for value in values[:IMAGE_SAMPLE]:
        try:
            with PIL.Image.open(io.BytesIO(value)) as image:
                formats.add(str(image.format))
        except (OSError, ValueError, PIL.Image.DecompressionBombError):
            return None
    return formats or None


def _names(features: Any, limit: int = 12) -> str:
    """Column names for a message, shortened past ``limit``."""
    names = list(features)
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"[{shown}{f', ... ({len(names)} columns)' if len(names) > limit else ''}]"


def _kind(feature: Any) -> str:
    if isinstance(feature, Image):
        return "image"
    if isinstance(feature, Audio):
        return "audio"
    if type(feature).__name__ in ARRAY_TYPES or _list_of(feature) == "float":
        return "array"
    if _list_of(feature) == "int":
        return "tokens"
    if _scalar(feature):
        return "table"
    return f"unsupported {feature!r}"
