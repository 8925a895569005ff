"""One preprocessing for ``train``, ``eval`` and ``predict``, saved in the run's ``config.json``.

:class:`Preprocessing` is planned once from the training data (:func:`plan`), then applied by the
same code everywhere: as the loader's ``transform`` on batches (images resized to one shape;
table columns standardised, imputed or one-hot encoded by :func:`jaxfeed.serving.encode_table`),
and, declared as a :class:`~jaxfeed.serving.ServingSpec` in the run's export, by ``eval``,
``predict`` and ``load_exported``. Every image is decoded in the run's colour mode (``L`` or
``RGB``) and resized with Pillow's bilinear filter to the run's ``image_size``; integer pixels are
scaled to [0, 1] on the device in training (by the spec, on the host, when served).

>>> import numpy as np
>>> p = Preprocessing(kind="image", input_columns=["image"], label_column="label",
...                   input_shape=[4, 4], task="classification", image_mode="L", image_size=[4, 4])
>>> batch = p({"image": [np.zeros((8, 8), np.uint8), np.ones((4, 6), np.uint8)], "label": np.array([0, 1])})
>>> batch["x"].shape, batch["y"].tolist()
((2, 4, 4), [0, 1])
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed.dataset import Dataset
from jaxfeed.features import Image
from jaxfeed.recipes.config import ConfigError
from jaxfeed.serving import ServingSpec, SpecError, TableColumn, category_key, encode_table

INPUTS, TARGETS = "x", "y"  # the batch keys the model and the loss read
SAMPLE = 64  # images whose headers are read to choose a size and a mode
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


@dataclass
class Preprocessing:
    """How rows become model inputs ``x`` and targets ``y`` (JSON-serialisable)."""

    kind: str  # "image", "array", "table" or "audio"
    input_columns: list[str]
    label_column: str
    input_shape: list[int]  # one example, as the model sees it
    task: str = "classification"
    image_mode: str | None = None  # "L" or "RGB"
    image_size: list[int] | None = None  # [height, width]
    scale: bool = True  # integer inputs are divided by 255 (on the device)
    mean: list[float] | None = None  # tables: standardisation of the inputs
    std: list[float] | None = None
    target_mean: float | None = None  # regression: standardisation of the target
    target_std: float | None = None
    categories: dict[str, list[str]] | None = None  # tables: one-hot vocabularies by column
    fill: list[float] | None = None  # tables: a missing numeric cell's value (--missing impute)
    impute: bool = False  # tables: missing cells are filled (True) or refused (False)
    audio: dict[str, Any] | None = None  # audio: log_mel's options (jaxfeed.recipes.audio)

    def table_columns(self) -> tuple[TableColumn, ...]:
        """The table's columns as the declared serving spec encodes them."""
        categories = self.categories or {}
        out = []
        for i, name in enumerate(self.input_columns):
            if name in categories:
                vocabulary = tuple(categories[name])
                out.append(
                    TableColumn(name, "categorical", vocabulary=vocabulary, impute=self.impute)
                )
            else:
                fill = None if self.fill is None else self.fill[i]
                out.append(TableColumn(name, "numeric", self.mean[i], self.std[i], fill))
        return tuple(out)

    def serving(self, labels: list[str]) -> ServingSpec:
        """The declared spec an export carries: this preprocessing from raw inputs, the scaling
        done on the device, the inverse of the target standardisation, and the class names."""
        mode = self.image_mode
        if self.kind == "image" and mode is None:
            mode = "RGB" if len(self.input_shape) == 3 and self.input_shape[-1] == 3 else "L"
        return ServingSpec(
            kind=self.kind,
            input_shape=tuple(self.input_shape),
            task=self.task,
            labels=tuple(labels) if self.task == "classification" else (),
            columns=self.table_columns() if self.kind == "table" else (),
            image_mode=mode if self.kind == "image" else None,
            image_size=tuple(self.hw) if self.kind == "image" else None,
            scale=self.scale and self.kind in ("image", "array"),
            target_mean=self.target_mean,
            target_std=self.target_std,
            audio=self.audio if self.kind == "audio" else None,
        )

    def __post_init__(self) -> None:
        self._columns: tuple[TableColumn, ...] | None = None  # table_columns(), made once

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["audio"] is None:  # the config.json of image and table runs reads as before
            del out["audio"]
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str) -> Preprocessing:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"{where}: unknown preprocessing key {unknown[0]!r}")
        try:
            return cls(**values)
        except TypeError as err:
            raise ConfigError(f"{where}: preprocessing: {err}") from err

    # ------------------------------------------------------------------ datasets
    def prepare(self, ds: Dataset) -> Dataset:
        """Keep the columns the run reads; decode images in the run's mode."""
        missing = [c for c in [*self.input_columns, self.label_column] if c not in ds.features]
        if missing:
            raise ConfigError(
                f"the data has no column {missing[0]!r} (the run was trained on "
                f"{[*self.input_columns, self.label_column]}); its columns are {list(ds.features)}"
            )
        ds = ds.select_columns([*self.input_columns, self.label_column])
        column = self.input_columns[0]
        if self.kind == "image" and ds.features[column] != Image(mode=self.image_mode):
            ds = ds.cast_column(column, Image(mode=self.image_mode))
        return ds

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        """The loader's transform: a numpy batch of the dataset's columns -> ``{"x", "y"}``."""
        out = {INPUTS: self.inputs(batch)}
        if self.label_column in batch:
            out[TARGETS] = self.targets(np.asarray(batch[self.label_column]))
        return out

    def inputs(self, batch: dict[str, Any]) -> np.ndarray:
        if self.kind == "table":
            if self._columns is None:
                self._columns = self.table_columns()
            try:
                return encode_table(batch, self._columns)
            except SpecError as err:
                raise ConfigError(str(err)) from None
        values = batch[self.input_columns[0]]
        if self.kind == "image":
            return self.fit_images(values)
        if self.kind == "audio":
            return self.fit_audio(values)
        return stack_column(values, self.input_columns[0])

    def targets(self, y: np.ndarray) -> np.ndarray:
        if self.task == "regression":
            return ((y.astype(np.float32) - self.target_mean) / self.target_std).astype(np.float32)
        return y

    def unscale(self, predictions: np.ndarray) -> np.ndarray:
        """Regression outputs back in the label column's units."""
        return np.asarray(predictions, np.float64) * self.target_std + self.target_mean

    # ------------------------------------------------------------------ images
    @property
    def hw(self) -> tuple[int, int]:
        size = self.image_size or self.input_shape[:2]
        return int(size[0]), int(size[1])

    def fit_images(self, images: Any) -> np.ndarray:
        """A batch of decoded images (an array or a list of arrays) at the run's size, as the
        declared serving spec fits them."""
        try:
            return self.serving([]).fit_images(images)
        except SpecError as err:
            raise ConfigError(str(err)) from None

    def fit_audio(self, values: Any) -> np.ndarray:
        """Log-mel spectrograms of the run's shape: as the loader's ``row_transform`` made them,
        or computed here from decoded clips (centre crop), as the served spec does."""
        shape = tuple(self.input_shape)
        if isinstance(values, np.ndarray) and values.dtype != object and values.shape[1:] == shape:
            return values
        if len(values) and all(
            isinstance(v, np.ndarray) and v.shape == shape and v.dtype == np.float32 for v in values
        ):
            return np.stack(values)
        try:
            return self.serving([]).fit_audio(values)
        except SpecError as err:
            raise ConfigError(f"column {self.input_columns[0]!r}: {err}") from None


def stack_column(values: Any, column: str) -> np.ndarray:
    """A batch column as one array; rows of different shapes are refused naming the column and
    two of the shapes.

    >>> stack_column([np.zeros((2, 3)), np.zeros((2, 4))], "x")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: column 'x' cannot be stacked into one batch: row 0 has shape (2, 3), row 1 has shape (2, 4); give every row one shape (pad, crop or resize them)
    """
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values
    rows = [np.asarray(v) for v in values]
    odd = next((i for i, r in enumerate(rows) if r.shape != rows[0].shape), None)
    if odd is not None:
        raise ConfigError(
            f"column {column!r} cannot be stacked into one batch: row 0 has shape "
            f"{rows[0].shape}, row {odd} has shape {rows[odd].shape}; give every row one shape "
            "(pad, crop or resize them)"
        )
    return np.stack(rows) if rows else np.asarray(values)


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
