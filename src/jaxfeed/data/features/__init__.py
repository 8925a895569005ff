"""Feature types: how each column is stored in Arrow and decoded to numpy."""

from jaxfeed.data.features.array import Array2D, Array3D, Array4D, Array5D
from jaxfeed.data.features.audio import Audio
from jaxfeed.data.features.base import Feature, FeatureError
from jaxfeed.data.features.class_label import ClassLabel
from jaxfeed.data.features.features import Features, infer_column, register_feature_type
from jaxfeed.data.features.image import Image
from jaxfeed.data.features.json import Json
from jaxfeed.data.features.media import DecodeError
from jaxfeed.data.features.sequence import LargeList, List, Sequence
from jaxfeed.data.features.translation import Translation, TranslationVariableLanguages
from jaxfeed.data.features.value import Value

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
