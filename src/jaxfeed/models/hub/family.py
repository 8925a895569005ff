"""What a model family tells the loader: the ``model_type``s it reads, its tasks, how to build
its NNX model from a ``config.json`` dict, the :class:`~jaxfeed.models.hub.weights.Rule`s
between checkpoint tensors and parameters, and every other per-family fact: the ``config.json``
fields it reads and their checks, PEFT's default LoRA targets, the module renames of
``transformers`` >= 5. Each family module defines ``FAMILY``; :mod:`jaxfeed.models.hub.registry`
collects them (``Family`` lives here so that family modules and the registry do not import each
other), and nothing outside the family module keeps a table by ``model_type``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
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

    Keyword-only, and required (a family module cannot leave one out):

    * ``lora_targets``: PEFT's default ``target_modules`` for the family (the query and value
      projections), what ``LoRA(targets=None)`` adapts;
    * ``module_renames``: ``(pattern, replacement)`` regular expressions from a checkpoint module
      name to the installed ``transformers``' (and so PEFT's) name, where ``transformers`` >= 5
      renamed modules the checkpoints keep (``()``: none); first match wins;
    * ``config_fields``: the ``config.json`` fields the family reads, ``{field: check}``, a check
      being a kind of :mod:`~jaxfeed.models.hub.config_check` (``"count"``, ``"rate"``...; ``!``
      required, ``?`` null allowed) or a tuple of the activation names the family computes;
    * ``divides``: ``(hidden size, heads)`` fields, the first a multiple of the second, or None
      where the family takes ``head_dim`` (the decoders).
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
    lora_targets: tuple[str, ...] = field(kw_only=True)
    module_renames: tuple[tuple[str, str], ...] = field(kw_only=True)
    config_fields: dict[str, Any] = field(kw_only=True, hash=False)
    divides: tuple[str, str] | None = field(kw_only=True)

    def task_of(self, config: dict) -> str:
        """The task ``config.json``'s ``architectures`` names, else the default."""
        known = dict(self.tasks_by_architecture)
        for arch in config.get("architectures") or ():
            if arch in known:
                return known[arch]
        return self.default_task
