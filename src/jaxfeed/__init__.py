"""jaxfeed: datasets in Apache Arrow, returned as ``jax.Array``; a fast loader; Flax training.

>>> import jaxfeed
>>> ds = jaxfeed.Dataset.from_dict({"x": [[1, 2], [3, 4]]}).with_format("jax")
>>> ds[:2]["x"].shape
(2, 2)
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public names are imported on first use (PEP 562): ``import jaxfeed`` alone must not start
# JAX or pyarrow, so that ``jaxfeed --help`` answers at once and tools can read ``__version__``.
_EXPORTS = {
    "Column": "jaxfeed.column",
    "Dataset": "jaxfeed.dataset",
    "DatasetDict": "jaxfeed.dataset",
    "load_exported": "jaxfeed.export",
    "Array2D": "jaxfeed.features",
    "Array3D": "jaxfeed.features",
    "Array4D": "jaxfeed.features",
    "Array5D": "jaxfeed.features",
    "Audio": "jaxfeed.features",
    "ClassLabel": "jaxfeed.features",
    "DecodeError": "jaxfeed.features",
    "FeatureError": "jaxfeed.features",
    "Features": "jaxfeed.features",
    "Image": "jaxfeed.features",
    "Json": "jaxfeed.features",
    "LargeList": "jaxfeed.features",
    "List": "jaxfeed.features",
    "Sequence": "jaxfeed.features",
    "Translation": "jaxfeed.features",
    "TranslationVariableLanguages": "jaxfeed.features",
    "Value": "jaxfeed.features",
    "load_dataset": "jaxfeed.io",
    "get_dataset_config_names": "jaxfeed.io",
    "get_dataset_split_names": "jaxfeed.io",
    "disable_caching": "jaxfeed.settings",
    "enable_caching": "jaxfeed.settings",
    "is_caching_enabled": "jaxfeed.settings",
    "disable_progress_bars": "jaxfeed.settings",
    "enable_progress_bars": "jaxfeed.settings",
    "is_progress_bar_enabled": "jaxfeed.settings",
    "are_progress_bars_disabled": "jaxfeed.settings",
    "disable_progress_bar": "jaxfeed.settings",
    "enable_progress_bar": "jaxfeed.settings",
    "NamedSplit": "jaxfeed.splits",
    "Split": "jaxfeed.splits",
    "load_from_disk": "jaxfeed.dataset",
    "IterableDataset": "jaxfeed.iterable",
    "IterableDatasetDict": "jaxfeed.iterable",
    "split_dataset_by_node": "jaxfeed.iterable",
    "DataLoader": "jaxfeed.loader",
    "concatenate_datasets": "jaxfeed.ops",
    "interleave_datasets": "jaxfeed.ops",
    "Packing": "jaxfeed.packing",
    "Padding": "jaxfeed.padding",
    "EarlyStopping": "jaxfeed.train",
    "History": "jaxfeed.train",
    "Trainer": "jaxfeed.train",
    "plot_history": "jaxfeed.train",
}

if TYPE_CHECKING:
    from jaxfeed import logging
    from jaxfeed.column import Column
    from jaxfeed.dataset import Dataset, DatasetDict, load_from_disk
    from jaxfeed.export import export, load_exported
    from jaxfeed.features import (
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
    from jaxfeed.io import get_dataset_config_names, get_dataset_split_names, load_dataset
    from jaxfeed.iterable import IterableDataset, IterableDatasetDict, split_dataset_by_node
    from jaxfeed.loader import DataLoader
    from jaxfeed.ops import concatenate_datasets, interleave_datasets
    from jaxfeed.packing import Packing
    from jaxfeed.padding import Padding
    from jaxfeed.settings import (
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
    from jaxfeed.splits import NamedSplit, Split
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
    return sorted([*globals(), *_EXPORTS, *_SUBMODULES, "export"])


class _Package(types.ModuleType):
    """``jaxfeed.export`` is the function, as ``from jaxfeed.export import export`` made it when the
    package imported everything eagerly; importing the submodule ``jaxfeed.export`` (which sets
    this attribute to the module) must not replace it."""

    @property
    def export(self) -> Any:
        return importlib.import_module("jaxfeed.export").export

    @export.setter
    def export(self, value: Any) -> None:
        pass  # the import system binding the submodule: the function keeps the name


sys.modules[__name__].__class__ = _Package


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
