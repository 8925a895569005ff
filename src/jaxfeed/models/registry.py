"""jaxfeed's built-in models by name: what ``jaxfeed.serve.export.rebuild`` (and the CLI) can construct.

Checkpoints and exports store a model's class *name* and constructor arguments
(:func:`model_config`), never a module path; :func:`model_classes` turns the name back into the
class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxfeed.models.audio import AudioCNN
from jaxfeed.models.linear import LinearModel, NGramModel
from jaxfeed.models.linen import LinenCNN
from jaxfeed.models.nnx import CNN, MLP
from jaxfeed.models.transformer import TransformerClassifier, TransformerLM

MODEL_CLASSES: dict[str, Callable[..., Any]] = {
    "CNN": CNN,
    "MLP": MLP,
    "LinenCNN": LinenCNN,
    "LinearModel": LinearModel,
    "NGramModel": NGramModel,
    "AudioCNN": AudioCNN,
    "TransformerClassifier": TransformerClassifier,
    "TransformerLM": TransformerLM,
}


def model_classes() -> dict[str, Callable[..., Any]]:
    """jaxfeed's built-in models by name: what ``jaxfeed.serve.export.rebuild`` (and the CLI) can
    construct.

    >>> sorted(model_classes())
    ['AudioCNN', 'CNN', 'LinearModel', 'LinenCNN', 'MLP', 'NGramModel', 'TransformerClassifier', 'TransformerLM']
    """
    return MODEL_CLASSES


def model_config(model: Any) -> dict[str, Any]:
    """``{"class", "kwargs"}`` for a built-in model (``kwargs`` None for any other model).

    >>> from flax import nnx
    >>> model_config(MLP(10, input_shape=(4,), hidden=(8,), rngs=nnx.Rngs(0)))["class"]
    'MLP'
    >>> model_config(nnx.Linear(4, 2, rngs=nnx.Rngs(0)))
    {'class': 'Linear', 'kwargs': None}
    """
    if isinstance(model, LinenCNN):
        kwargs = {"num_classes": model.num_classes, "dropout_rate": model.dropout_rate,
                  "momentum": model.momentum, "widths": [int(w) for w in model.widths],
                  "head": model.head, "norm": model.norm}  # fmt: skip
        return {"class": "LinenCNN", "kwargs": kwargs}
    name = type(model).__name__
    config = getattr(model, "config", None)
    if model_classes().get(name) is type(model) and callable(config):
        return {"class": name, "kwargs": config()}
    return {"class": name, "kwargs": None}
