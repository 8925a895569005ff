"""One preprocessing for ``train``, ``eval`` and ``predict``, saved in the run's ``config.json``.

:class:`Preprocessing` is planned once from the training data (:func:`plan`), then applied by the
same code everywhere: as the loader's ``transform`` on batches (images resized to one shape;
table columns standardised, imputed or one-hot encoded by :func:`jaxfeed.serve.spec.encode_table`),
and, declared as a :class:`~jaxfeed.serve.spec.ServingSpec` in the run's export, by ``eval``,
``predict`` and ``load_exported``. Every image is decoded in the run's colour mode (``L`` or
``RGB``) and resized with Pillow's bilinear filter to the run's ``image_size``; integer pixels are
scaled to [0, 1] on the device in training (by the spec, on the host, when served).

:class:`Preprocessing` itself (the data half: fields, the loader's transform, the serving spec)
lives in :mod:`jaxfeed.recipes.spec`; this module plans it from the data and :func:`prepare`
applies it to a dataset (text kinds: :func:`jaxfeed.recipes.text.prepare`).
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Image
from jaxfeed.recipes import text
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.spec import INPUTS as INPUTS
from jaxfeed.recipes.spec import TARGETS as TARGETS
from jaxfeed.recipes.spec import TEXT_COLUMNS as TEXT_COLUMNS
from jaxfeed.recipes.spec import TEXT_KINDS as TEXT_KINDS
from jaxfeed.recipes.spec import Preprocessing as Preprocessing
from jaxfeed.recipes.spec import stack_column as stack_column
from jaxfeed.serve.spec import category_key

SAMPLE = 64  # images whose headers are read to choose a size and a mode
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


# ---------------------------------------------------------------------------------- datasets
def prepare(prep: Preprocessing, ds: Dataset) -> Dataset:
    """Keep the columns the run reads; decode images in the run's mode; tokenize text."""
    if prep.kind in TEXT_KINDS:
        return text.prepare(prep, ds)
    missing = [c for c in [*prep.input_columns, prep.label_column] if c not in ds.features]
    if missing:
        raise ConfigError(
            f"the data has no column {missing[0]!r} (the run was trained on "
            f"{[*prep.input_columns, prep.label_column]}); its columns are {list(ds.features)}"
        )
    ds = ds.select_columns([*prep.input_columns, prep.label_column])
    column = prep.input_columns[0]
    if prep.kind == "image" and ds.features[column] != Image(mode=prep.image_mode):
        ds = ds.cast_column(column, Image(mode=prep.image_mode))
    return ds


# ---------------------------------------------------------------------------------- planning
def plan(
    train: Dataset,
    inputs: list[str],
    label: str,
    kind: str,
    task: str,
    image_size: tuple[int, int] | None,
    options: TableOptions | None = None,
    image_mode: str | None = None,
) -> tuple[Preprocessing, list[str]]:
    """The preprocessing for ``train`` and what was chosen, as lines for the user."""
    notes: list[str] = []
    if kind == "table":
        prep, table_notes = plan_table(train, inputs, label, task, options or TableOptions())
        notes += table_notes
    elif kind == "image":
        mode, size, note = _image_choice(train, inputs[0], image_size, image_mode)
        shape = [size[0], size[1]] + ([3] if mode == "RGB" else [])
        prep = Preprocessing(kind, inputs, label, shape, task, mode, list(size), scale=True)
        notes.append(note)
    elif kind == "array":
        if image_size is not None:
            raise ConfigError(
                f"--image-size: the input column {inputs[0]!r} holds arrays, not images"
            )
        sample = np.asarray(train.select_columns(inputs).with_format("numpy")[0][inputs[0]])
        scale = sample.dtype.kind in "iu"
        prep = Preprocessing(kind, inputs, label, list(sample.shape), task, scale=scale)
        notes.append(f"inputs: {inputs[0]!r} arrays {tuple(sample.shape)} {sample.dtype}")
    elif kind == "audio":  # planned from every split's clips: jaxfeed.recipes.audio.plan_audio
        raise ConfigError(
            f"the input column {inputs[0]!r} is audio: plan it with jaxfeed.recipes.audio.plan_audio"
        )
    else:
        raise ConfigError(f"cannot learn from the input column {inputs[0]!r}: it is {kind}")
    if task == "regression":
        y = _column(train, label).astype(np.float64)
        if not np.all(np.isfinite(y)):
            row = int(np.flatnonzero(~np.isfinite(y))[0])
            raise ConfigError(f"the label column {label!r} is not finite at row {row}")
        prep.target_mean, prep.target_std = float(y.mean()), float(y.std() or 1.0)
    return prep, notes


MAX_INT_CATEGORIES = 10  # integer columns with at most this many values are categories
MAX_CATEGORIES = 1000  # text columns with more distinct values are free text, left out
ID_NAME = re.compile(r"(?:^|[_\\W])(?:id|uuid|guid|key|index)$", re.IGNORECASE)


@dataclass
class TableOptions:
    """How a table's columns are chosen and encoded (``--input-columns``,
    ``--categorical-columns``, ``--missing``)."""

    given: bool = False  # the inputs were named: none is excluded
    categorical: list[str] | None = None  # these columns are categories, whatever their type
    impute: bool = False  # missing cells: filled (numeric: train mean; else the unknown slot)
    excluded: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def plan_table(
    train: Dataset, inputs: list[str], label: str, task: str, options: TableOptions
) -> tuple[Preprocessing, list[str]]:
    """Numeric columns standardised, text, bool and few-valued integer columns one-hot,
    identifier-like columns (unique per row) and free text left out; one pass per column, so the
    time is linear in rows and columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    forced = set(options.categorical or [])
    stray = sorted(forced - set(inputs))
    if stray:
        raise ConfigError(f"--categorical-columns {stray[0]!r} is not one of the input columns")
    table = train.select_columns(inputs).flatten_indices().data
    n = table.num_rows
    kept, mean, std, fill = [], [], [], []
    categories: dict[str, list[str]] = {}
    excluded = list(options.excluded)
    imputed_cells, imputed_columns = 0, 0
    for name, column in zip(table.column_names, table.columns, strict=True):
        t = column.type
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        integer = pa.types.is_integer(t)
        categorical = text or pa.types.is_boolean(t) or name in forced
        distinct = 0
        if categorical or integer:
            unique = pc.unique(column)
            distinct = len(unique) - unique.null_count
            categorical = categorical or distinct <= MAX_INT_CATEGORIES
        if not options.given and name not in forced and n > 1 and distinct == n:
            low, high = (
                (pc.min_max(column)[k].as_py() for k in ("min", "max")) if integer else (0, 0)
            )
            if text or ID_NAME.search(name) or (integer and high - low == n - 1):
                excluded.append((name, "unique per row: an identifier"))
                continue
        if text and distinct > MAX_CATEGORIES and name not in forced:
            excluded.append(
                (name, f"{distinct:,} distinct texts: free text (--categorical-columns keeps it)")
            )
            continue
        if categorical:
            holes = column.null_count + (
                int(pc.sum(pc.is_nan(column)).as_py() or 0) if pa.types.is_floating(t) else 0
            )
            keys = {category_key(v) for v in pc.unique(column).to_pylist()}
            categories[name] = sorted(keys - {None})
            column_fill = 0.0
            m, sd = 0.0, 1.0
        else:
            values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
            bad = ~np.isfinite(values)
            holes = int(bad.sum())
            finite = values[~bad]
            column_fill = float(finite.mean()) if len(finite) else 0.0
            if holes and options.impute:
                values = np.where(bad, column_fill, values)
            m, sd = (
                (float(values.mean()), float(values.std() or 1.0))
                if not holes or options.impute
                else (0.0, 1.0)
            )
        if holes:
            if not options.impute:
                null = np.asarray(pc.is_null(column, nan_is_null=True))
                row = int(np.flatnonzero(null)[0])
                raise ConfigError(
                    f"input column {name!r} is empty or not finite at row {row}: fill or drop such "
                    "rows, or give --missing impute"
                )
            imputed_cells += holes
            imputed_columns += 1
        kept.append(name)
        mean.append(m)
        std.append(sd)
        fill.append(column_fill)
    if not kept:
        raise ConfigError(
            f"no input column is left to learn {label!r} from (excluded: "
            f"{', '.join(c for c, _ in excluded[:5])}); give --input-columns"
        )
    width = sum(len(categories[c]) + 1 if c in categories else 1 for c in kept)
    prep = Preprocessing(
        "table", kept, label, [width], task, scale=False, mean=mean, std=std,
        categories=categories or None, fill=fill if options.impute else None,
        impute=options.impute,
    )  # fmt: skip
    numeric = [c for c in kept if c not in categories]
    parts = []
    if numeric:
        parts.append(f"{len(numeric)} numeric ({_short(numeric)}), standardised")
    if categories:
        shown = [f"{c}: {len(v)} values" for c, v in categories.items()]
        parts.append(
            f"{len(categories)} categorical ({_short(shown)}), one-hot with an unknown slot"
        )
    notes = [f"inputs: {len(kept)} table columns: {'; '.join(parts)}"]
    if excluded:
        shown = [f"{c} ({why})" for c, why in excluded]
        notes.append(f"excluded: {_short(shown)} (--input-columns to choose)")
    if imputed_cells:
        notes.append(
            f"missing values: imputed {imputed_cells:,} cells in {imputed_columns} columns "
            "(numbers: the train mean; categories: the unknown slot)"
        )
    return prep, notes


def _short(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:5])}, ... {names[-1]}"


def _column(ds: Dataset, name: str) -> np.ndarray:
    column = ds.select_columns([name]).data.column(name)
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise ConfigError(f"column {name!r} is empty at row {row}; fill or drop such rows")
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _image_choice(
    ds: Dataset, column: str, image_size: tuple[int, int] | None, image_mode: str | None = None
) -> tuple[str, tuple[int, int], str]:
    """Mode and size of the run from the first images' headers (no full decode): the widest mode
    among them (RGB when any is colour), or ``image_mode``; ``"same"`` reads every header and
    refuses mixed modes."""
    import PIL.Image

    rows = ds.num_rows if image_mode == "same" else min(SAMPLE, ds.num_rows)
    sample = ds.select(range(rows)).cast_column(column, Image(decode=False))
    sizes, modes, where = Counter(), Counter(), {}
    for i, stored in enumerate(sample[column]):
        source = stored.get("bytes") or stored.get("path")
        try:
            with PIL.Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as im:
                sizes[(im.height, im.width)] += 1
                modes[im.mode] += 1
                where.setdefault(im.mode, stored.get("path") or f"row {i}")
        except (OSError, ValueError) as err:
            where = stored.get("path") or f"row {i}"
            raise ConfigError(f"cannot read the image {where} of column {column!r}: {err}") from err
    widest = "L" if all(m in GREY_MODES for m in modes) else "RGB"
    if image_mode == "same" and len(modes) > 1:
        shown = ", ".join(f"{m} ({where[m]})" for m in sorted(modes))
        raise ConfigError(
            f"the images of column {column!r} mix modes: {shown}; --image-mode same refuses "
            "them: convert the files, or give --image-mode L or RGB"
        )
    mode = image_mode if image_mode in ("L", "RGB") else widest
    mixed = len(sizes) > 1
    if image_size is not None:
        size = image_size
        how = f"resized to {size[0]}x{size[1]} (--image-size)"
    else:
        size = sizes.most_common(1)[0][0]
        how = (
            f"mixed sizes ({', '.join(f'{h}x{w}' for h, w in list(sizes)[:3])}{', ...' if len(sizes) > 3 else ''}) "
            f"resized to {size[0]}x{size[1]}, the most common (--image-size to choose)"
            if mixed
            else f"{size[0]}x{size[1]}"
        )
    if image_mode in ("L", "RGB"):
        said = f"mode {mode} (--image-mode; the files are {', '.join(sorted(modes))})"
    elif len(modes) > 1:
        said = (
            f"mixed modes {', '.join(sorted(modes))} converted to {mode}, the widest "
            "(--image-mode to choose)"
        )
    else:
        said = f"mode {mode}" + (f" (from {next(iter(modes))})" if mode not in modes else "")
    if any(m.startswith("I;16") or m == "I" for m in modes):
        said += "; 16-bit pixels scaled to 8 bits (round(v / 257)), not clipped"
    return mode, size, f"images: {how}, {said}"


# ---------------------------------------------------------------------------------- augment
class Augmented:
    """The train loader's ``transform`` with ``--augment``: the run's preprocessing, then each
    image of the batch flipped left-right (half of them) and/or cropped at random to its own
    size after zero-padding each side by an eighth, with the loader's seeded ``rng`` (a resumed
    run draws alike). Evaluation and predict see the images as they are.

    >>> import numpy as np
    >>> from jaxfeed.recipes.spec import Preprocessing
    >>> prep = Preprocessing("array", ["x"], "y", [2, 4], "classification")
    >>> batch = {"x": np.arange(8, dtype=np.float32).reshape(1, 2, 4), "y": np.array([0])}
    >>> out = Augmented(prep, ["flip"])(batch, np.random.default_rng(2))  # flipped: 0.26 < 0.5
    >>> out["x"].tolist(), out["y"].tolist()
    ([[[3.0, 2.0, 1.0, 0.0], [7.0, 6.0, 5.0, 4.0]]], [0])
    """

    def __init__(self, prep: Any, augment: list[str]) -> None:
        self.prep, self.flip, self.crop = prep, "flip" in augment, "crop" in augment

    def __call__(self, batch: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        out = self.prep(batch)
        x = np.array(out[INPUTS], copy=True)
        if self.flip:
            flipped = rng.random(len(x)) < 0.5
            x[flipped] = x[flipped][:, :, ::-1]
        if self.crop:
            height, width = x.shape[1:3]
            pad_h, pad_w = max(1, height // 8), max(1, width // 8)
            widths = [(0, 0), (pad_h, pad_h), (pad_w, pad_w)] + [(0, 0)] * (x.ndim - 3)
            padded = np.pad(x, widths)
            for i in range(len(x)):
                top, left = int(rng.integers(0, 2 * pad_h + 1)), int(rng.integers(0, 2 * pad_w + 1))
                x[i] = padded[i, top : top + height, left : left + width]
        out[INPUTS] = x
        return out

    def describe(self) -> str:
        """The note the run prints."""
        done = (["a random left-right flip (half of them)"] if self.flip else []) + (
            ["a random crop of their size after padding each side by an eighth"]
            if self.crop
            else []
        )
        return f"augment: training images get {' and '.join(done)} (--augment)"
