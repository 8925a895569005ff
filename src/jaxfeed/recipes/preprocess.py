"""One preprocessing for ``train``, ``eval`` and ``predict``, saved in the run's ``config.json``.

:class:`Preprocessing` is planned once from the training data (:func:`plan`), then applied by the
same code everywhere: as the loader's ``transform`` on batches (images resized to one shape,
table columns stacked and standardised) and on the files given to ``predict``. Every image is
decoded in the run's colour mode (``L`` or ``RGB``) and resized with Pillow's bilinear filter to
the run's ``image_size``; integer pixels are scaled to [0, 1] on the device.

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
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed.dataset import Dataset
from jaxfeed.features import Image
from jaxfeed.recipes.config import ConfigError

INPUTS, TARGETS = "x", "y"  # the batch keys the model and the loss read
SAMPLE = 64  # images whose headers are read to choose a size and a mode
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


@dataclass
class Preprocessing:
    """How rows become model inputs ``x`` and targets ``y`` (JSON-serialisable)."""

    kind: str  # "image", "array" or "table"
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
            x = np.stack(
                [np.asarray(batch[c], dtype=np.float32) for c in self.input_columns], axis=1
            )
            return (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        values = batch[self.input_columns[0]]
        if self.kind == "image":
            return self.fit_images(values)
        return np.asarray(values)

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
        """A batch of decoded images (an array or a list of arrays) at the run's size."""
        h, w = self.hw
        if isinstance(images, np.ndarray) and images.shape[1:3] == (h, w):
            return images
        return np.stack([self.fit_image(np.asarray(a)) for a in images])

    def fit_image(self, array: np.ndarray) -> np.ndarray:
        import PIL.Image  # Pillow is imported by the decoders anyway

        h, w = self.hw
        if array.shape[:2] == (h, w):
            return array
        image = PIL.Image.fromarray(array)
        return np.asarray(image.resize((w, h), PIL.Image.BILINEAR))

    def image_files(self, paths: list[str]) -> tuple[np.ndarray, list[str]]:
        """Model inputs for image files, decoded and resized as in training, and what changed."""
        import PIL.Image

        if self.kind == "table":
            raise ConfigError(
                "this run was trained on a table; give data files (CSV, ...) to predict"
            )
        h, w = self.hw
        mode = self.image_mode or (
            "RGB" if len(self.input_shape) == 3 and self.input_shape[-1] == 3 else "L"
        )
        feature = Image(mode=mode)
        arrays, resized, converted = [], 0, 0
        for path in paths:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                with PIL.Image.open(io.BytesIO(data)) as probe:
                    converted += probe.mode != mode
                decoded = feature.decode_value((data, path), 0)
            except (OSError, ValueError, PIL.Image.DecompressionBombError) as err:
                raise ConfigError(f"cannot read image {path}: {err}") from err
            except Exception as err:  # a decoder's own error type: still name the file
                raise ConfigError(f"cannot read image {path}: {type(err).__name__}: {err}") from err
            resized += decoded.shape[:2] != (h, w)
            arrays.append(self.fit_image(decoded).reshape(self.input_shape))
        notes = []
        if resized:
            notes.append(f"resized {resized} of {len(paths)} images to {h}x{w}")
        if converted:
            notes.append(f"converted {converted} to mode {mode}")
        return np.stack(arrays), notes


# ---------------------------------------------------------------------------------- planning
def plan(
    train: Dataset,
    inputs: list[str],
    label: str,
    kind: str,
    task: str,
    image_size: tuple[int, int] | None,
) -> tuple[Preprocessing, list[str]]:
    """The preprocessing for ``train`` and what was chosen, as lines for the user."""
    notes: list[str] = []
    if kind == "table":
        x = np.stack([_column(train, c).astype(np.float64) for c in inputs], axis=1)
        bad = np.argwhere(~np.isfinite(x))
        if len(bad):
            row, col = (int(v) for v in bad[0])
            raise ConfigError(
                f"input column {inputs[col]!r} is empty or not finite at row {row}; fill or drop such rows"
            )
        std = x.std(axis=0)
        std[std == 0] = 1.0
        prep = Preprocessing(
            kind, inputs, label, [len(inputs)], task, scale=False,
            mean=x.mean(axis=0).tolist(), std=std.tolist(),
        )  # fmt: skip
        notes.append(f"inputs: {len(inputs)} numeric columns ({_short(inputs)}), standardised")
    elif kind == "image":
        mode, size, note = _image_choice(train, inputs[0], image_size)
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
    elif kind == "audio":
        raise ConfigError(
            f"the input column {inputs[0]!r} is audio: jaxfeed train learns from images, arrays and "
            "numeric table columns (decode audio to arrays with Dataset.map first)"
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


def _short(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:5])}, ... {names[-1]}"


def _column(ds: Dataset, name: str) -> np.ndarray:
    column = ds.select_columns([name]).data.column(name)
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise ConfigError(f"column {name!r} is empty at row {row}; fill or drop such rows")
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _image_choice(
    ds: Dataset, column: str, image_size: tuple[int, int] | None
) -> tuple[str, tuple[int, int], str]:
    """Mode and size of the run from the first images' headers (no full decode)."""
    import PIL.Image

    sample = ds.select(range(min(SAMPLE, ds.num_rows))).cast_column(column, Image(decode=False))
    sizes, modes = Counter(), Counter()
    for i, stored in enumerate(sample[column]):
        source = stored.get("bytes") or stored.get("path")
        try:
            with PIL.Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as im:
                sizes[(im.height, im.width)] += 1
                modes[im.mode] += 1
        except (OSError, ValueError) as err:
            where = stored.get("path") or f"row {i}"
            raise ConfigError(f"cannot read the image {where} of column {column!r}: {err}") from err
    mode = "L" if all(m in GREY_MODES for m in modes) else "RGB"
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
    mixed_modes = (
        f" (from {', '.join(sorted(modes))})" if len(modes) > 1 or mode not in modes else ""
    )
    if any(m.startswith("I;16") or m == "I" for m in modes):
        mixed_modes += "; 16-bit pixels scaled to 8 bits (round(v / 257)), not clipped"
    return mode, size, f"images: {how}, mode {mode}{mixed_modes}"
