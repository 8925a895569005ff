"""Getting data in: files, folders, the Hub, built-in datasets, and datasets saved to disk."""

from jaxfeed.io.disk import load_from_disk
from jaxfeed.io.load import load_dataset

__all__ = ["load_dataset", "load_from_disk"]
