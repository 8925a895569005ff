"""Getting data in: files, folders, the Hub and built-in datasets.

The package holds readers and writers below :class:`~jaxfeed.Dataset`, which return tables and
never build a dataset (``files``, ``batches``, ``validate``, ``cache``), and loaders above it that
build datasets (``load``, ``folder``, ``builtin``, ``hub``). Its public names are imported on first
use (PEP 562), so importing a reader does not pull in the loaders. ``Dataset`` reads files into
the cache and folders written by ``save_to_disk`` itself (through ``cache`` and
:mod:`jaxfeed.saved`): nothing here needs importing first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Dataset": "jaxfeed.dataset",
    "DatasetDict": "jaxfeed.dataset",
    "get_dataset_config_names": "jaxfeed.io.load",
    "get_dataset_split_names": "jaxfeed.io.load",
    "load_dataset": "jaxfeed.io.load",
    "load_from_disk": "jaxfeed.dataset",
}

if TYPE_CHECKING:
    from jaxfeed.dataset import Dataset, DatasetDict, load_from_disk
    from jaxfeed.io.load import get_dataset_config_names, get_dataset_split_names, load_dataset


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxfeed.io' has no attribute {name!r}")
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
