"""jaxfeed: datasets in Apache Arrow, returned as ``jax.Array``; a fast loader; Flax training.

>>> import jaxfeed
>>> ds = jaxfeed.Dataset.from_dict({"x": [[1, 2], [3, 4]]}).with_format("jax")
>>> ds[:2]["x"].shape
(2, 2)
"""

from jaxfeed.column import Column
from jaxfeed.dataset import Dataset, DatasetDict
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
from jaxfeed.io import load_dataset, load_from_disk
from jaxfeed.iterable import IterableDataset, IterableDatasetDict, split_dataset_by_node
from jaxfeed.loader import DataLoader
from jaxfeed.ops import concatenate_datasets, interleave_datasets
from jaxfeed.train import EarlyStopping, History, Trainer, plot_history

__version__ = "0.1.0"

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
    "Sequence",
    "Trainer",
    "Translation",
    "TranslationVariableLanguages",
    "Value",
    "__version__",
    "concatenate_datasets",
    "export",
    "interleave_datasets",
    "load_dataset",
    "load_exported",
    "load_from_disk",
    "plot_history",
    "split_dataset_by_node",
]
