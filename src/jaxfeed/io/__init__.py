"""Getting data in: files, folders, the Hub, built-in datasets, and datasets saved to disk."""

from jaxfeed.io.disk import load_from_disk
from jaxfeed.io.load import get_dataset_config_names, get_dataset_split_names, load_dataset

__all__ = ["get_dataset_config_names", "get_dataset_split_names", "load_dataset", "load_from_disk"]
