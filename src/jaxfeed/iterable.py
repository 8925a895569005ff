"""Deprecated: ``jaxfeed.iterable`` moved to :mod:`jaxfeed.data.iterable`; import the names from ``jaxfeed``.

This path is kept for one release and warns when imported."""

from jaxfeed._base.deprecated import moved
from jaxfeed.data.iterable import IterableDataset as IterableDataset
from jaxfeed.data.iterable import IterableDatasetDict as IterableDatasetDict
from jaxfeed.data.iterable import split_dataset_by_node as split_dataset_by_node

moved("jaxfeed.iterable", "jaxfeed.data.iterable")

__all__ = [
    "IterableDataset",
    "IterableDatasetDict",
    "split_dataset_by_node",
]
