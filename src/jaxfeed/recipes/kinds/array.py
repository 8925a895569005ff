"""Arrays: a column of fixed-shape numeric arrays (the digits' 8x8), read as they are; integer
ones scaled as pixels on the device; ``--augment`` applies to those of an image's shape; predict
reads image files into arrays of the run's shape."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Sequence
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.objectives import numeric_options
from jaxfeed.recipes.spec import Preprocessing


class ArrayKind(Kind):
    """Arrays (see the module docstring).

    >>> ArrayKind().augments(Preprocessing("array", ["x"], "y", [8, 8]))
    True
    """

    reads = "arrays"  # tables of the run's column; arrays of an image's shape: image files too

    def __init__(self) -> None:
        super().__init__("array")

    def clean(self, data: dict[str, Any], columns: Any) -> tuple[dict[str, Any], list[str]]:
        """A column of lists of numbers (embeddings) is arrays when every row of every split
        holds the same number of finite values: a row that does not is refused, naming it."""
        column, length = columns.inputs[0], None
        for split, part in data.items():
            if isinstance(part.features.get(column), Sequence):
                length = check_vectors(part, column, f"split {split!r}", length)
        return data, []

    def plan_inputs(self, train: Dataset, inputs: list[str], label: str, task: str,
                    image_size: tuple[int, int] | None, options: Any = None,
                    image_mode: str | None = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        if image_size is not None:
            raise ConfigError(
                f"--image-size: the input column {inputs[0]!r} holds arrays, not images"
            )
        sample = np.asarray(train.select_columns(inputs).with_format("numpy")[0][inputs[0]])
        scale = sample.dtype.kind in "iu"
        prep = Preprocessing(self.name, inputs, label, list(sample.shape), task, scale=scale)
        return prep, [f"inputs: {inputs[0]!r} arrays {tuple(sample.shape)} {sample.dtype}"]

    def resolved_options(self, config: RunConfig, prep: Preprocessing, run_data: Any) -> RunConfig:
        """Vectors (embeddings: lists of floats) train the ``mlp`` unless ``--model`` says
        otherwise; arrays of an image's shape the ``cnn``."""
        if config.model is None and len(prep.input_shape) == 1:
            config = dataclasses.replace(config, model="mlp")
        return super().resolved_options(config, prep, run_data)

    def reader_spec(self, spec: Any) -> Any:
        """Arrays of an image's shape (the digits): image files fit them."""
        shape = list(spec.input_shape)
        if len(shape) not in (2, 3) or (len(shape) == 3 and shape[-1] not in (1, 3)):
            raise ConfigError(
                f"this run was trained on arrays of shape {shape}: predict reads image files "
                "and tables"
            )
        mode = "RGB" if len(shape) == 3 and shape[-1] == 3 else "L"
        return dataclasses.replace(
            spec, kind="image", image_mode=mode, image_size=(shape[0], shape[1])
        )

    def augments(self, prep: Preprocessing) -> bool:
        return len(prep.input_shape) in (2, 3)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return numeric_options(config, prep, class_weights, scale=prep.scale)


def check_vectors(ds: Dataset, column: str, where: str, length: int | None = None) -> int:
    """The length of the lists of numbers in ``column`` (``length`` when given: another split's),
    a row that is empty, of another length or holds a value that is missing or not finite
    refused, naming ``where`` and the row.

    >>> ds = Dataset.from_dict({"e": [[0.5, 1.0], [2.0, 3.0], [1.0]]})
    >>> check_vectors(ds.select([0, 1]), "e", "split 'train'")
    2
    >>> check_vectors(ds, "e", "split 'train'")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: split 'train', row 2: column 'e' holds 1 number where the rows before hold 2; an array input needs one length in every row (pad or cut the lists, or leave such rows out)
    """
    values = ds.select_columns([column]).flatten_indices().data.column(column).combine_chunks()
    if values.null_count:
        row = int(np.flatnonzero(np.asarray(values.is_null()))[0])
        raise ConfigError(f"{where}, row {row}: column {column!r} is empty; fill or drop such rows")
    counts = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    length = int(counts[0]) if length is None and len(counts) else length
    odd = np.flatnonzero(counts != length)
    if len(odd):
        row = int(odd[0])
        raise ConfigError(
            f"{where}, row {row}: column {column!r} holds {counts[row]} number"
            f"{'s' if counts[row] != 1 else ''} where the rows before hold {length}; an array "
            "input needs one length in every row (pad or cut the lists, or leave such rows out)"
        )
    flat = pc.list_flatten(values)
    bad = np.asarray(flat.is_null()) | ~np.isfinite(
        np.asarray(pc.fill_null(pc.cast(flat, pa.float64()), 0.0), np.float64)
    )
    if bad.any():
        row = int(np.asarray(pc.list_parent_indices(values))[np.flatnonzero(bad)[0]])
        raise ConfigError(
            f"{where}, row {row}: column {column!r} holds a value that is missing or not finite; "
            "fill or drop such rows"
        )
    return length or 0
