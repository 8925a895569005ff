"""Arrays: a column of fixed-shape numeric arrays (the digits' 8x8), read as they are; integer
ones scaled as pixels on the device; ``--augment`` applies to those of an image's shape; predict
reads image files into arrays of the run's shape."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxfeed.data.dataset import Dataset
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.objectives import numeric_options
from jaxfeed.recipes.spec import Preprocessing


class ArrayKind(Kind):
    """Arrays (see the module docstring).

    >>> ArrayKind().augments(Preprocessing("array", ["x"], "y", [8, 8]))
    True
    """

    def __init__(self) -> None:
        super().__init__("array")

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
