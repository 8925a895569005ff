"""Helpers shared by several parts of :mod:`jaxfeed.data.ops`: column-argument checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jaxfeed.data.core import DatasetCore

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class


def _column_list(ds: Dataset, columns: str | Sequence[str] | None, what: str) -> list[str]:
    if columns is None:
        return []
    columns = [columns] if isinstance(columns, str) else list(columns)
    names = set(ds.column_names)  # one list, not one per column (wide tables)
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise ValueError(
            f"{what}: columns {unknown} are not in the dataset; its columns are {ds.column_names}"
        )
    return columns
