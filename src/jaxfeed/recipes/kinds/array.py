"""Arrays: a column of fixed-shape numeric arrays (the digits' 8x8), read as they are; integer
ones scaled as pixels on the device; ``--augment`` applies to those of an image's shape."""

from __future__ import annotations

from typing import Any

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.objectives import numeric_options
from jaxfeed.recipes.preprocess import plan
from jaxfeed.recipes.spec import Preprocessing


class ArrayKind(Kind):
    """Arrays (see the module docstring).

    >>> ArrayKind().augments(Preprocessing("array", ["x"], "y", [8, 8]))
    True
    """

    def __init__(self) -> None:
        super().__init__("array")

    def plan(self, run_data: Any, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        columns = run_data.columns
        return plan(
            run_data.splits.train, columns.inputs, columns.label, self.name, run_data.task,
            config.image_hw(), None, config.image_mode,
        )  # fmt: skip

    def augments(self, prep: Preprocessing) -> bool:
        return len(prep.input_shape) in (2, 3)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return numeric_options(config, prep, class_weights, scale=prep.scale)
