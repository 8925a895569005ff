"""Qwen3 (``model_type: qwen3``): Llama-shaped with an RMSNorm on each head's queries and keys
(QK-norm) before RoPE, optional attention biases, sliding windows as Qwen2."""

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
    bias = bool(config.get("attention_bias", False))
    return llama_like_spec(config, qkv_bias=bias, out_bias=bias, qk_norm=True,
                           windows=layer_windows(config))  # fmt: skip


def build(config: dict, *, task: str, num_labels=None, dtype=None, param_dtype=None, rngs):
    return build_lm(spec(config), config, task=task, num_labels=num_labels, dtype=dtype,
                    param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list:
    return llama_like_rules(spec(config))


FAMILY = Family(
    model_types=("qwen3",),
    tasks=TASKS,
    default_task="causal-lm",
    build=build,
    rules=rules,
    prefix="model",
    architecture=lambda task: "Qwen3ForCausalLM",
)
