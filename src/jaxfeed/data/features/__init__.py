"""Feature types: how each column is stored in Arrow and decoded to numpy."""

from jaxfeed.features.array import Array2D, Array3D, Array4D, Array5D
from jaxfeed.features.audio import Audio
from jaxfeed.features.base import Feature, FeatureError
from jaxfeed.features.class_label import ClassLabel
from jaxfeed.features.features import Features, infer_column, register_feature_type
from jaxfeed.features.image import Image
from jaxfeed.features.json import Json
from jaxfeed.features.media import DecodeError
from jaxfeed.features.sequence import LargeList, List, Sequence
from jaxfeed.features.translation import Translation, TranslationVariableLanguages
from jaxfeed.features.value import Value

register_feature_type(Image)
register_feature_type(Audio)

__all__ = [
    "Array2D",
    "Array3D",
    "Array4D",
    "Array5D",
    "Audio",
    "ClassLabel",
    "DecodeError",
    "Feature",
    "FeatureError",
    "Features",
    "Image",
    "Json",
    "LargeList",
    "List",
    "Sequence",
    "Translation",
    "TranslationVariableLanguages",
    "Value",
    "infer_column",
]
