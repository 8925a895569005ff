"""Pretrained models from the Hugging Face Hub in Flax NNX: :func:`from_pretrained` builds a
supported family (BERT, RoBERTa, DistilBERT, ...) from a checkpoint folder or Hub id,
:func:`preprocessor` gives what turns raw inputs into its inputs, :func:`save_pretrained` writes
a Hub-format folder that ``transformers`` loads. See ``docs/development/architecture.md``.

The names load on first use (PEP 562), so the numpy-only front ends (``audio_features``,
``image_processing``) import without JAX, in the loader's worker processes."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "from_pretrained": "jaxfeed.models.hub.api",
    "preprocessor": "jaxfeed.models.hub.api",
    "save_pretrained": "jaxfeed.models.hub.api",
    "Family": "jaxfeed.models.hub.family",
    "HubConfig": "jaxfeed.models.hub.family",
    "CheckpointError": "jaxfeed.models.hub.files",
    "CheckpointNotCachedError": "jaxfeed.models.hub.files",
    "Resolved": "jaxfeed.models.hub.files",
    "Weights": "jaxfeed.models.hub.files",
    "LoadReport": "jaxfeed.models.hub.weights",
    "Rule": "jaxfeed.models.hub.weights",
    "Transform": "jaxfeed.models.hub.weights",
}

if TYPE_CHECKING:
    from jaxfeed.models.hub.api import from_pretrained, preprocessor, save_pretrained
    from jaxfeed.models.hub.family import Family, HubConfig
    from jaxfeed.models.hub.files import (
        CheckpointError,
        CheckpointNotCachedError,
        Resolved,
        Weights,
    )
    from jaxfeed.models.hub.weights import LoadReport, Rule, Transform


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxfeed.models.hub' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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
