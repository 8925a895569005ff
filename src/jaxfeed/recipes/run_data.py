"""The data of a run as the kinds see it: its source, splits, columns, task and labels
(:func:`jaxfeed.recipes.run.load_run_data` makes one). A module of its own so that the kinds, which
the run's loading uses, can name it without importing the loading.

>>> from jaxfeed.recipes.data import Columns
>>> RunData(None, None, Columns(inputs=["x"], label="y", kind="table"), "regression", []).task
'regression'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxfeed.recipes import data as datamod


@dataclass
class RunData:
    """The splits of a run, encoded and ready for its preprocessing."""

    source: datamod.Source
    splits: datamod.Splits
    columns: datamod.Columns
    task: str
    labels: list[str]
    notes: list[str] = field(default_factory=list)  # what was left out (empty texts)
