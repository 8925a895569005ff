"""Getting data in: files, folders, the Hub, built-in datasets, and datasets saved to disk.

Importing this package registers its loaders with :class:`jaxfeed.Dataset` (``from_json`` /
``from_parquet`` convert into the cache, ``load_from_disk``), so ``jaxfeed.Dataset`` comes
through here.
"""

from jaxfeed.dataset import Dataset, DatasetDict
from jaxfeed.io.disk import load_from_disk
from jaxfeed.io.load import get_dataset_config_names, get_dataset_split_names, load_dataset

__all__ = [
    "Dataset",
    "DatasetDict",
    "get_dataset_config_names",
    "get_dataset_split_names",
    "load_dataset",
    "load_from_disk",
]
