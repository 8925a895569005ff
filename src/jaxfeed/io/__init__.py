"""Deprecated: ``jaxfeed.io`` moved to :mod:`jaxfeed.data.load`; import the names from ``jaxfeed``.

This path is kept for one release and warns when imported."""

from jaxfeed._base.deprecated import moved
from jaxfeed.data.dataset import Dataset as Dataset
from jaxfeed.data.dataset import DatasetDict as DatasetDict
from jaxfeed.data.dataset import load_from_disk as load_from_disk
from jaxfeed.data.load import get_dataset_config_names as get_dataset_config_names
from jaxfeed.data.load import get_dataset_split_names as get_dataset_split_names
from jaxfeed.data.load import load_dataset as load_dataset

moved("jaxfeed.io", "jaxfeed.data.load")

__all__ = [
    "Dataset",
    "DatasetDict",
    "get_dataset_config_names",
    "get_dataset_split_names",
    "load_dataset",
    "load_from_disk",
]
