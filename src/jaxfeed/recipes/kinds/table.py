"""Tables: numeric and categorical columns, standardised and one-hot encoded
(:func:`jaxfeed.recipes.preprocess.plan_table`); ``mlp`` by default."""

from __future__ import annotations

from typing import Any

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.preprocess import TableOptions, plan
from jaxfeed.recipes.spec import Preprocessing


class TableKind(Kind):
    """Rows of a table (see the module docstring).

    >>> TableKind().default_model
    'mlp'
    """

    default_model = "mlp"

    def __init__(self) -> None:
        super().__init__("table")

    def plan(self, run_data: Any, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        columns = run_data.columns
        table = TableOptions(
            given=columns.given,
            categorical=config.categorical_columns,
            impute=config.missing == "impute",
            excluded=columns.excluded,
        )
        return plan(
            run_data.splits.train, columns.inputs, columns.label, self.name, run_data.task,
            config.image_hw(), table, config.image_mode,
        )  # fmt: skip
