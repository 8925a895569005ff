"""Images: decoded, converted to one mode and resized to one size in the loader's workers;
pixels scaled on the device; ``--augment`` flips and crops them; ``cnn`` by default."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.objectives import numeric_options
from jaxfeed.recipes.preprocess import plan
from jaxfeed.recipes.spec import Preprocessing


class ImageKind(Kind):
    """Image files (see the module docstring).

    >>> ImageKind().augments(None), ImageKind().default_model
    (True, 'cnn')
    """

    def __init__(self, name: str = "image") -> None:
        super().__init__(name)

    def plan(self, run_data: Any, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        columns = run_data.columns
        return plan(
            run_data.splits.train, columns.inputs, columns.label, self.name, run_data.task,
            config.image_hw(), None, config.image_mode,
        )  # fmt: skip

    def pretrained_options(self, checkpoint: Any, config: RunConfig) -> RunConfig:
        """The checkpoint's image size and RGB (another size given is refused)."""
        from jaxfeed.recipes import pretrained  # import cost: the Hub layer, for a checkpoint

        return pretrained.image_options(checkpoint, config)

    def augments(self, prep: Preprocessing) -> bool:
        return True

    def resolved_options(self, config: RunConfig, prep: Preprocessing,
                         run_data: Any) -> RunConfig:  # fmt: skip
        size = f"{prep.image_size[0]}x{prep.image_size[1]}" if prep.image_size else None
        config = super().resolved_options(config, prep, run_data)
        return dataclasses.replace(config, image_size=size or config.image_size)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return numeric_options(config, prep, class_weights, scale=prep.scale)
