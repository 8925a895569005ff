"""Getting data in: files, folders, the Hub, built-in datasets, and datasets saved to disk.

The package holds readers of single files (``batches``, ``files``) that the streaming modules
below :class:`~jaxfeed.Dataset` use, and loaders above it (``load``, ``disk``, ...) that build
datasets. Its public names are imported on first use (PEP 562), so importing a reader does not
pull in the loaders; importing ``jaxfeed.io.load`` / ``disk`` registers their loaders with
:class:`~jaxfeed.Dataset` (``from_json`` / ``from_parquet``, ``load_from_disk``), which is why
``jaxfeed.Dataset`` comes through here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Dataset": "jaxfeed.io.load",
    "DatasetDict": "jaxfeed.io.load",
    "get_dataset_config_names": "jaxfeed.io.load",
    "get_dataset_split_names": "jaxfeed.io.load",
    "load_dataset": "jaxfeed.io.load",
    "load_from_disk": "jaxfeed.io.disk",
}

if TYPE_CHECKING:
    from jaxfeed.dataset import Dataset, DatasetDict
    from jaxfeed.io.disk import load_from_disk
    from jaxfeed.io.load import get_dataset_config_names, get_dataset_split_names, load_dataset


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxfeed.io' has no attribute {name!r}")
    importlib.import_module("jaxfeed.io.disk")  # both loaders registered before any use
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "Dataset",
    "DatasetDict",
    "get_dataset_config_names",
    "get_dataset_split_names",
    "load_dataset",
    "load_from_disk",
]
