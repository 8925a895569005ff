"""Pretrained models from the Hugging Face Hub in Flax NNX: :func:`from_pretrained` builds a
supported family (BERT, RoBERTa, DistilBERT, ...) from a checkpoint folder or Hub id,
:func:`preprocessor` gives what turns raw inputs into its inputs, :func:`save_pretrained` writes
a Hub-format folder that ``transformers`` loads. See ``docs/development/architecture.md``."""

from jaxfeed.models.hub.api import from_pretrained, preprocessor, save_pretrained
from jaxfeed.models.hub.family import Family, HubConfig
from jaxfeed.models.hub.files import CheckpointError, CheckpointNotCachedError, Resolved, Weights
from jaxfeed.models.hub.weights import LoadReport, Rule, Transform

__all__ = [
    "CheckpointError",
    "CheckpointNotCachedError",
    "Family",
    "HubConfig",
    "LoadReport",
    "Resolved",
    "Rule",
    "Transform",
    "Weights",
    "from_pretrained",
    "preprocessor",
    "save_pretrained",
]
