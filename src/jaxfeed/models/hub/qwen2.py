"""Qwen2 (``model_type: qwen2``): Llama-shaped with biases on the query, key and value
projections (none on the output), and sliding windows on the layers ``layer_types`` marks when
``use_sliding_window``."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import (
    TASKS,
    build_lm,
    layer_windows,
    llama_like_rules,
    llama_like_spec,
)
from jaxfeed.models.hub.family import Family


def spec(config: dict):
    """The decoder variant of a Qwen ``config.json``."""
    return llama_like_spec(config, qkv_bias=True, windows=layer_windows(config))


def build(config: dict, *, task: str, num_labels=None, dtype=None, param_dtype=None, rngs):
    return build_lm(spec(config), config, task=task, num_labels=num_labels, dtype=dtype,
                    param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list:
    return llama_like_rules(spec(config))


FAMILY = Family(
    model_types=("qwen2",),
    tasks=TASKS,
    default_task="causal-lm",
    build=build,
    rules=rules,
    prefix="model",
    architecture=lambda task: "Qwen2ForCausalLM",
)
