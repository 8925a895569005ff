"""jaxfeed: datasets in Apache Arrow, returned as ``jax.Array``; a fast loader; Flax training.

>>> import jaxfeed
>>> ds = jaxfeed.Dataset.from_dict({"x": [[1, 2], [3, 4]]}).with_format("jax")
>>> ds[:2]["x"].shape
(2, 2)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public names are imported on first use (PEP 562): ``import jaxfeed`` alone must not start
# JAX or pyarrow, so that ``jaxfeed --help`` answers at once and tools can read ``__version__``.
_EXPORTS = {
    "Column": "jaxfeed.data.column",
    "Dataset": "jaxfeed.data.dataset",
    "DatasetDict": "jaxfeed.data.dataset",
    "export": "jaxfeed.serve.export",
    "load_exported": "jaxfeed.serve.export",
    "Array2D": "jaxfeed.data.features",
    "Array3D": "jaxfeed.data.features",
    "Array4D": "jaxfeed.data.features",
    "Array5D": "jaxfeed.data.features",
    "Audio": "jaxfeed.data.features",
    "ClassLabel": "jaxfeed.data.features",
    "DecodeError": "jaxfeed.data.features",
    "FeatureError": "jaxfeed.data.features",
    "Features": "jaxfeed.data.features",
    "Image": "jaxfeed.data.features",
    "Json": "jaxfeed.data.features",
    "LargeList": "jaxfeed.data.features",
    "List": "jaxfeed.data.features",
    "Sequence": "jaxfeed.data.features",
    "Translation": "jaxfeed.data.features",
    "TranslationVariableLanguages": "jaxfeed.data.features",
    "Value": "jaxfeed.data.features",
    "load_dataset": "jaxfeed.data.load",
    "get_dataset_config_names": "jaxfeed.data.load",
    "get_dataset_split_names": "jaxfeed.data.load",
    "disable_caching": "jaxfeed._base.settings",
    "enable_caching": "jaxfeed._base.settings",
    "is_caching_enabled": "jaxfeed._base.settings",
    "disable_progress_bars": "jaxfeed._base.settings",
    "enable_progress_bars": "jaxfeed._base.settings",
    "is_progress_bar_enabled": "jaxfeed._base.settings",
    "are_progress_bars_disabled": "jaxfeed._base.settings",
    "disable_progress_bar": "jaxfeed._base.settings",
    "enable_progress_bar": "jaxfeed._base.settings",
    "NamedSplit": "jaxfeed.data.splits",
    "Split": "jaxfeed.data.splits",
    "load_from_disk": "jaxfeed.data.dataset",
    "IterableDataset": "jaxfeed.data.iterable",
    "IterableDatasetDict": "jaxfeed.data.iterable",
    "split_dataset_by_node": "jaxfeed.data.iterable",
    "DataLoader": "jaxfeed.loading.loader",
    "concatenate_datasets": "jaxfeed.data.ops",
    "interleave_datasets": "jaxfeed.data.ops",
    "Packing": "jaxfeed.loading.packing",
    "Padding": "jaxfeed.loading.padding",
    "EarlyStopping": "jaxfeed.train",
    "History": "jaxfeed.train",
    "Trainer": "jaxfeed.train",
    "plot_history": "jaxfeed.train",
}

if TYPE_CHECKING:
    from jaxfeed import logging
    from jaxfeed._base.settings import (
        are_progress_bars_disabled,
        disable_caching,
        disable_progress_bar,
        disable_progress_bars,
        enable_caching,
        enable_progress_bar,
        enable_progress_bars,
        is_caching_enabled,
        is_progress_bar_enabled,
    )
    from jaxfeed.data.column import Column
    from jaxfeed.data.dataset import Dataset, DatasetDict, load_from_disk
    from jaxfeed.data.features import (
        Array2D,
        Array3D,
        Array4D,
        Array5D,
        Audio,
        ClassLabel,
        DecodeError,
        FeatureError,
        Features,
        Image,
        Json,
        LargeList,
        List,
        Sequence,
        Translation,
        TranslationVariableLanguages,
        Value,
    )
    from jaxfeed.data.iterable import IterableDataset, IterableDatasetDict, split_dataset_by_node
    from jaxfeed.data.load import get_dataset_config_names, get_dataset_split_names, load_dataset
    from jaxfeed.data.ops import concatenate_datasets, interleave_datasets
    from jaxfeed.data.splits import NamedSplit, Split
    from jaxfeed.loading.loader import DataLoader
    from jaxfeed.loading.packing import Packing
    from jaxfeed.loading.padding import Padding
    from jaxfeed.serve.export import export, load_exported
    from jaxfeed.train import EarlyStopping, History, Trainer, plot_history


_SUBMODULES = {"logging"}  # modules that are public names themselves (``jaxfeed.logging``)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"jaxfeed.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxfeed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_SUBMODULES])


__all__ = [
    "Array2D",
    "Array3D",
    "Array4D",
    "Array5D",
    "Audio",
    "ClassLabel",
    "Column",
    "DataLoader",
    "Dataset",
    "DatasetDict",
    "DecodeError",
    "EarlyStopping",
    "FeatureError",
    "Features",
    "History",
    "Image",
    "IterableDataset",
    "IterableDatasetDict",
    "Json",
    "LargeList",
    "List",
    "NamedSplit",
    "Packing",
    "Padding",
    "Sequence",
    "Split",
    "Trainer",
    "Translation",
    "TranslationVariableLanguages",
    "Value",
    "__version__",
    "are_progress_bars_disabled",
    "concatenate_datasets",
    "disable_caching",
    "disable_progress_bar",
    "disable_progress_bars",
    "enable_caching",
    "enable_progress_bar",
    "enable_progress_bars",
    "export",
    "get_dataset_config_names",
    "get_dataset_split_names",
    "interleave_datasets",
    "is_caching_enabled",
    "is_progress_bar_enabled",
    "load_dataset",
    "load_exported",
    "load_from_disk",
    "logging",
    "plot_history",
    "split_dataset_by_node",
]
