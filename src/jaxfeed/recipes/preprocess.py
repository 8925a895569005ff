"""One preprocessing for ``train``, ``eval`` and ``predict``, saved in the run's ``config.json``.

:class:`Preprocessing` is planned once from the training data by the run's input kind
(:mod:`jaxfeed.recipes.kinds`: images, arrays, tables, audio, text), then applied by the same code
everywhere: as the loader's ``transform`` on batches (images resized to one shape; table columns
standardised, imputed or one-hot encoded by :func:`jaxfeed.serve.spec.encode_table`), and,
declared as a :class:`~jaxfeed.serve.spec.ServingSpec` in the run's export, by ``eval``,
``predict`` and ``load_exported``. Every image is decoded in the run's colour mode (``L`` or
``RGB``) and resized with Pillow's bilinear filter to the run's ``image_size``; integer pixels are
scaled to [0, 1] on the device in training (by the spec, on the host, when served).

:class:`Preprocessing` itself (the data half: fields, the loader's transform, the serving spec)
lives in :mod:`jaxfeed.recipes.spec`. This module keeps the names earlier code imported from here
(:func:`plan`, :func:`prepare`, the table's and the images' planning), each the kinds' now.
"""

from __future__ import annotations

from jaxfeed.data.dataset import Dataset
from jaxfeed.recipes.kinds.image import Augmented as Augmented
from jaxfeed.recipes.kinds.registry import kind_for, kind_of
from jaxfeed.recipes.kinds.table import TableOptions as TableOptions
from jaxfeed.recipes.kinds.table import plan_table as plan_table
from jaxfeed.recipes.spec import INPUTS as INPUTS
from jaxfeed.recipes.spec import TARGETS as TARGETS
from jaxfeed.recipes.spec import TEXT_COLUMNS as TEXT_COLUMNS
from jaxfeed.recipes.spec import TEXT_KINDS as TEXT_KINDS
from jaxfeed.recipes.spec import Preprocessing as Preprocessing
from jaxfeed.recipes.spec import stack_column as stack_column


def prepare(prep: Preprocessing, ds: Dataset) -> Dataset:
    """``ds`` as the run's loader reads it (its kind's ``prepare``): the run's columns, images
    decoded in its mode, text tokenized."""
    return kind_of(prep).prepare(prep, ds)


def plan(
    train: Dataset,
    inputs: list[str],
    label: str,
    kind: str,
    task: str,
    image_size: tuple[int, int] | None,
    options: TableOptions | None = None,
    image_mode: str | None = None,
) -> tuple[Preprocessing, list[str]]:
    """The preprocessing for ``train`` and what was chosen, as lines for the user (the columns'
    ``kind``'s ``plan_columns``)."""
    return kind_for(kind, task, None).plan_columns(
        train, inputs, label, task, image_size, options, image_mode
    )


__all__ = ["Augmented", "TableOptions", "plan", "plan_table", "prepare"]
