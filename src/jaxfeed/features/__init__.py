"""Deprecated: ``jaxfeed.features`` moved to :mod:`jaxfeed.data.features`; import the names from ``jaxfeed``.

This path is kept for one release and warns when imported."""

from jaxfeed._base.deprecated import moved
from jaxfeed.data.features import Array2D as Array2D
from jaxfeed.data.features import Array3D as Array3D
from jaxfeed.data.features import Array4D as Array4D
from jaxfeed.data.features import Array5D as Array5D
from jaxfeed.data.features import Audio as Audio
from jaxfeed.data.features import ClassLabel as ClassLabel
from jaxfeed.data.features import DecodeError as DecodeError
from jaxfeed.data.features import Feature as Feature
from jaxfeed.data.features import FeatureError as FeatureError
from jaxfeed.data.features import Features as Features
from jaxfeed.data.features import Image as Image
from jaxfeed.data.features import Json as Json
from jaxfeed.data.features import LargeList as LargeList
from jaxfeed.data.features import List as List
from jaxfeed.data.features import Sequence as Sequence
from jaxfeed.data.features import Translation as Translation
from jaxfeed.data.features import TranslationVariableLanguages as TranslationVariableLanguages
from jaxfeed.data.features import Value as Value
from jaxfeed.data.features import infer_column as infer_column

moved("jaxfeed.features", "jaxfeed.data.features")

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
