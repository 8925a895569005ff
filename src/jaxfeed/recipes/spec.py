"""The data half of a run's preprocessing: :class:`Preprocessing` (what ``config.json`` keeps and
the loader's transform applies), the batch keys and the text kinds; no datasets are read here.

It is planned from the training data by the run's input kind (:mod:`jaxfeed.recipes.kinds`) and
applied by the same code in ``train``, ``eval``, ``predict`` and an export (see that package).

>>> import numpy as np
>>> p = Preprocessing(kind="image", input_columns=["image"], label_column="label",
...                   input_shape=[4, 4], task="classification", image_mode="L", image_size=[4, 4])
>>> batch = p({"image": [np.zeros((8, 8), np.uint8), np.ones((4, 6), np.uint8)], "label": np.array([0, 1])})
>>> batch["x"].shape, batch["y"].tolist()
((2, 4, 4), [0, 1])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed.recipes.config import ConfigError
from jaxfeed.serve.spec import ServingSpec, SpecError, TableColumn, encode_table

INPUTS, TARGETS = "x", "y"  # the batch keys the model and the loss read
# token ids, padded in buckets or packed (recipes/kinds/text.py, lm.py; tokens.py: ids given)
TEXT_KINDS = ("text", "lm", "tokens")
TEXT_COLUMNS = ("input_ids", "attention_mask", "segment_ids", "positions")


@dataclass
class Preprocessing:
    """How rows become model inputs ``x`` and targets ``y`` (JSON-serialisable)."""

    kind: str  # "image", "array", "table", "audio", "text", "lm" or "tokens"
    input_columns: list[str]
    label_column: str
    input_shape: list[int]  # one example, as the model sees it
    task: str = "classification"
    image_mode: str | None = None  # "L", "RGB" or "RGBA"
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
    text: dict[str, Any] | None = None  # text: column, tokenizer file, lengths (kinds/text.py)
    # images with transparency: [r, g, b] they are composited onto (ServingSpec.image_background)
    image_background: list[int] | None = None

    @property
    def vocab_size(self) -> int | None:
        """Text runs: the tokenizer's vocabulary (the transformers' ``vocab_size``)."""
        return int(self.text["vocab_size"]) if self.text else None

    @property
    def max_length(self) -> int | None:
        """Text runs: the longest row of token ids the model is given (the transformers')."""
        return int(self.input_shape[0]) if self.text else None

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
            image_background=(
                tuple(self.image_background) if self.image_background is not None else None
            ),
            scale=self.scale and self.kind in ("image", "array"),
            target_mean=self.target_mean,
            target_std=self.target_std,
            audio=self.audio if self.kind == "audio" else None,
            text=self.serving_text() if self.kind in TEXT_KINDS else None,
        )

    def serving_text(self, inputs: dict[str, str] | None = None) -> dict[str, Any]:
        """The ``text`` options of a text run's spec (``inputs``: the model's ``{argument:
        column}``, the Trainer's ``inputs``)."""
        text = self.text or {}
        out = {
            "column": text["column"],
            "max_length": int(text["max_length"]),
            "pad_id": int(text.get("pad_id", 0)),
            "inputs": dict(inputs or text.get("inputs") or {"input_ids": "input_ids"}),
        }
        if text.get("truncation_side", "right") != "right":  # specs without it read as before
            out["truncation_side"] = text["truncation_side"]
        if self.kind == "tokens":  # ids given as they are: one past the vocabulary is refused
            out["vocab_size"] = int(text["vocab_size"])
        return out

    def __post_init__(self) -> None:
        self._columns: tuple[TableColumn, ...] | None = None  # table_columns(), made once
        self.tokenizer: Any = None  # text runs: the run's tokenizers.Tokenizer

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key in ("audio", "text", "image_background"):  # config.json reads as before
            if out[key] is None:
                del out[key]
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

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        """The loader's transform: a numpy batch of the dataset's columns -> ``{"x", "y"}``
        (text: the padded or packed token columns, and ``"y"``)."""
        if self.kind in TEXT_KINDS:
            out = {k: np.asarray(batch[k], np.int32) for k in TEXT_COLUMNS if k in batch}
        else:
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
