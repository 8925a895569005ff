"""Feature types: how each column is stored in Arrow and decoded to numpy."""

from jaxfeed.features.array import Array2D, Array3D, Array4D, Array5D
from jaxfeed.features.base import Feature, FeatureError
from jaxfeed.features.class_label import ClassLabel
from jaxfeed.features.features import Features, infer_column
from jaxfeed.features.sequence import List, Sequence
from jaxfeed.features.value import Value

__all__ = [
    "Array2D",
    "Array3D",
    "Array4D",
    "Array5D",
    "ClassLabel",
    "Feature",
    "FeatureError",
    "Features",
    "List",
    "Sequence",
    "Value",
    "infer_column",
]
