"""Reference models: the article's CNN in Flax NNX (`CNN`) and Linen (`LinenCNN`), an `MLP`,
`AudioCNN` over log-mel spectrograms, transformers for token sequences
(`TransformerClassifier`, `TransformerLM`), linear models (`LinearModel` on the inputs,
`NGramModel` on a bag of token n-grams); pretrained Hub checkpoints through
`from_pretrained`, `preprocessor` and `save_pretrained` (`jaxfeed.models.hub`), with low-rank
adapters (`LoRA`, `jaxfeed.models.lora`).

The names load on first use (PEP 562): importing a numpy-only module of this package (the AST
front end, :mod:`jaxfeed.models.hub.audio_features`, which the loader's worker processes run)
imports neither JAX nor Flax."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AudioCNN": "jaxfeed.models.audio",
    "im2col_conv": "jaxfeed.models.conv",
    "from_pretrained": "jaxfeed.models.hub",
    "preprocessor": "jaxfeed.models.hub",
    "save_pretrained": "jaxfeed.models.hub",
    "LinenCNN": "jaxfeed.models.linen",
    "LinearModel": "jaxfeed.models.linear",
    "NGramModel": "jaxfeed.models.linear",
    "LoRA": "jaxfeed.models.lora_settings",
    "CNN": "jaxfeed.models.nnx",
    "MLP": "jaxfeed.models.nnx",
    "max_pool_2x2": "jaxfeed.models.pool",
    "TransformerClassifier": "jaxfeed.models.transformer",
    "TransformerLM": "jaxfeed.models.transformer",
}

if TYPE_CHECKING:
    from jaxfeed.models.audio import AudioCNN
    from jaxfeed.models.conv import im2col_conv
    from jaxfeed.models.hub import from_pretrained, preprocessor, save_pretrained
    from jaxfeed.models.linear import LinearModel, NGramModel
    from jaxfeed.models.linen import LinenCNN
    from jaxfeed.models.lora_settings import LoRA
    from jaxfeed.models.nnx import CNN, MLP
    from jaxfeed.models.pool import max_pool_2x2
    from jaxfeed.models.transformer import TransformerClassifier, TransformerLM


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxfeed.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "CNN",
    "MLP",
    "AudioCNN",
    "LinearModel",
    "LinenCNN",
    "LoRA",
    "NGramModel",
    "TransformerClassifier",
    "TransformerLM",
    "from_pretrained",
    "im2col_conv",
    "max_pool_2x2",
    "preprocessor",
    "save_pretrained",
]
