"""The data of a run as the kinds see it (:class:`RunData`: its source, splits, columns, task and
labels) and :func:`load_run_data`, which makes one for a new run's plan or a saved run's
evaluation (each choosing the kind its rows are checked by).

>>> from jaxfeed.recipes.columns import Columns
>>> RunData(None, None, Columns(inputs=["x"], label="y", kind="table"), "regression", []).task
'regression'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jaxfeed.data.dataset import DatasetDict
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes.columns import Columns, choose_columns, read_image_bytes
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.text.corpus import CONCAT


@dataclass
class RunData:
    """The splits of a run, encoded and ready for its preprocessing."""

    source: datamod.Source
    splits: datamod.Splits
    columns: Columns
    task: str
    labels: list[str]
    notes: list[str] = field(default_factory=list)  # what was left out (empty texts)


def load_run_data(config: RunConfig, labels: list[str] | None,
                  choose_kind: Callable[[str, str | None], Any]) -> RunData:  # fmt: skip
    """Detect and load ``config.data``; pick columns and task (the input kind's checks of its
    rows: empty texts left out; ``choose_kind(columns' kind, --task)`` is the kind, as the caller
    chooses it: a new run's ``kind_for``, a saved run's own); encode class labels; split."""
    corpus = config.sample_by or (CONCAT if config.task in (None, "lm") else "line")
    source = datamod.detect(config.data, config.data_dir, corpus)
    source.data, read = read_image_bytes(source.data)  # a Ray or Spark job's image bytes
    source.notes += read
    train_raw = datamod.select_split(source.data, config.split_train, "--split-train")
    text_column = config.text_column or source.text_column  # a folder of texts: its column
    columns = choose_columns(
        train_raw, config.input_columns, config.label_column, text_column, config.task
    )
    if text_column != config.text_column and columns.kind in ("text", "lm"):
        columns.why = source.text_why
    kind = choose_kind(columns.kind, config.task)
    data, notes = kind.clean(dict(source.data), columns)
    notes = source.notes + columns.notes + notes
    task = kind.task or datamod.infer_task(train_raw, columns.label, config.task)
    if task == "classification":
        given = labels is not None
        data, labels = datamod.encode_labels(data, columns.label, labels, vocabulary=train_raw)
        if not given and len(labels) < 2:
            found = f"one class ({labels[0]!r})" if labels else "no class"
            unread = f"; {source.unread_classes}" if source.unread_classes else ""
            raise ConfigError(
                f"--data {config.data}: the label column {columns.label!r} has {found}{unread}; a "
                "classifier needs two or more (a folder: one sub-folder per class)"
            )
    else:
        labels = []
    splits = datamod.choose_splits(
        DatasetDict(data),
        config.split_train,
        config.split_eval,
        config.val_split,
        columns.label if task == "classification" else None,
        config.seed,
        in_order=task == "lm" and corpus == CONCAT,  # a corpus end to end keeps its order
    )
    return RunData(source, splits, columns, task, list(labels), notes)
