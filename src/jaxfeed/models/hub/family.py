"""What a model family tells the loader: the ``model_type``s it reads, its tasks, how to build
its NNX model from a ``config.json`` dict, and the :class:`~jaxfeed.models.hub.weights.Rule`s
between checkpoint tensors and parameters. Each family module defines ``FAMILY``;
:mod:`jaxfeed.models.hub.registry` collects them (``Family`` lives here so that family modules
and the registry do not import each other)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASKS = (
    "sequence-classification",
    "token-classification",
    "masked-lm",
    "image-classification",
    "audio-classification",
    "feature-extraction",
    "causal-lm",
)
LABEL_TASKS = ("sequence-classification", "token-classification", "image-classification",
               "audio-classification")  # fmt: skip


class HubConfig(dict):
    """A checkpoint's ``config.json`` as a plain dict that is also hashable (by its JSON), so a
    model holding it as ``model.hub_config`` stays a valid static part of a jitted graph."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(json.dumps(self, sort_keys=True, default=str))


@dataclass(frozen=True)
class Family:
    """One architecture family (see the module docstring).

    ``build(config, *, task, num_labels, dtype, param_dtype, rngs) -> nnx.Module``;
    ``rules(config, task) -> list[Rule]``; ``architecture(task) -> str`` (the ``transformers``
    class written to ``architectures``); ``prefix`` is the base model's name in checkpoint
    tensor names (``"bert"``), which a bare encoder's checkpoint omits; ``preprocessor(folder,
    config)``, when given, returns the family's input preprocessing (else the text tokenizer).
    """

    model_types: tuple[str, ...]
    tasks: tuple[str, ...]
    default_task: str
    build: Callable[..., Any]
    rules: Callable[[dict, str], list]
    architecture: Callable[[str], str]
    prefix: str = ""
    preprocessor: Callable[[Path, dict], Any] | None = None
    # the architectures (transformers class names) -> task, to pick the task from config.json
    tasks_by_architecture: tuple[tuple[str, str], ...] = ()

    def task_of(self, config: dict) -> str:
        """The task ``config.json``'s ``architectures`` names, else the default."""
        known = dict(self.tasks_by_architecture)
        for arch in config.get("architectures") or ():
            if arch in known:
                return known[arch]
        return self.default_task
