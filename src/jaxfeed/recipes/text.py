"""Text in ``jaxfeed train``, by job: which column is free text and the checks of its rows
(:mod:`jaxfeed.recipes.text_columns`), the run's tokenizer (:mod:`jaxfeed.recipes.tokenizer`), a
language model's corpus and packing (:mod:`jaxfeed.recipes.corpus`), and the text kinds that plan,
prepare, build and export a run (:mod:`jaxfeed.recipes.kinds.text`, :mod:`~jaxfeed.recipes.kinds.lm`).

This module keeps the names earlier code imported from here: the guide's :func:`free_text`, and
those of the modules not yet importing the kinds (``recipes/train.py``, ``recipes/data.py``,
``recipes/hub_export.py``); the kinds' names are loaded when first called (detection imports
this module without JAX).

>>> from jaxfeed import Dataset
>>> ds = Dataset.from_dict({"review": [f"film number {i} was good" for i in range(20)]})
>>> free_text(ds, "review")
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.corpus import CONCAT as CONCAT
from jaxfeed.recipes.corpus import CORPUS_SUFFIXES as CORPUS_SUFFIXES
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.recipes.text_columns import MIN_WORDS as MIN_WORDS
from jaxfeed.recipes.text_columns import free_text as free_text
from jaxfeed.recipes.text_columns import text_column_of as text_column_of
from jaxfeed.recipes.tokenizer import TOKENIZER_FILE as TOKENIZER_FILE
from jaxfeed.recipes.tokenizer import attach_tokenizer as attach_tokenizer
from jaxfeed.recipes.tokenizer import write_tokenizer as write_tokenizer


def read_corpus(path: Path, sample_by: str = "line") -> Any:
    """:func:`jaxfeed.recipes.corpus_reader.read_corpus`."""
    from jaxfeed.recipes import corpus_reader  # import depth: data imports this module

    return corpus_reader.read_corpus(path, sample_by)


def check_options(config: RunConfig) -> None:
    """:func:`jaxfeed.recipes.kinds.registry.check_options`."""
    from jaxfeed.recipes.kinds import registry  # import cost: JAX; detection imports this module

    registry.check_options(config)


def plan_text(train: Any, column: str, label: str | None, task: str,
              config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
    """:meth:`jaxfeed.recipes.kinds.text.TextKind.plan_text` of the text kind of ``task``."""
    from jaxfeed.recipes.kinds import registry  # import cost: JAX; detection imports this module

    return registry.kind_for("text", task, None).plan_text(train, column, label, task, config)


def is_text(prep: Preprocessing) -> bool:
    """Whether the run's inputs are token ids (its kind's ``tokens``)."""
    from jaxfeed.recipes.kinds import registry  # import cost: JAX; detection imports this module

    return registry.kind_of(prep).tokens


def describe_inputs(prep: Preprocessing) -> str:
    """The inputs of a text run, for the line that sums the data up (its kind's ``describe``)."""
    from jaxfeed.recipes.kinds import registry  # import cost: JAX; detection imports this module

    return registry.kind_of(prep).describe(prep, None)


def loader_options(prep: Preprocessing) -> dict[str, Any]:
    """The train loader's options of a text run (its kind's ``loader_options``)."""
    from jaxfeed.recipes.kinds import registry  # import cost: JAX; detection imports this module

    return registry.kind_of(prep).loader_options(prep, True)


def export_example(prep: Preprocessing, inputs: dict[str, str]) -> Any:
    """:func:`jaxfeed.recipes.kinds.text.export_example`."""
    from jaxfeed.recipes.kinds.text import export_example  # import cost: JAX, when exporting

    return export_example(prep, inputs)


__all__ = [
    "CONCAT",
    "CORPUS_SUFFIXES",
    "MIN_WORDS",
    "TOKENIZER_FILE",
    "attach_tokenizer",
    "check_options",
    "describe_inputs",
    "export_example",
    "free_text",
    "is_text",
    "loader_options",
    "plan_text",
    "read_corpus",
    "text_column_of",
    "write_tokenizer",
]
