"""Llama 2 and 3 (``model_type: llama``): RoPE (``rope_scaling`` of type ``llama3`` or
``linear``), grouped-query attention, optional attention and MLP biases, tied or untied
embeddings."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import TASKS, build_lm, llama_like_rules, llama_like_spec
from jaxfeed.models.hub.family import Family


def spec(config: dict):
    """The decoder variant of a Llama ``config.json``."""
    bias = bool(config.get("attention_bias", False))
    return llama_like_spec(config, qkv_bias=bias, out_bias=bias)


def build(config: dict, *, task: str, num_labels=None, dtype=None, param_dtype=None, rngs):
    return build_lm(spec(config), config, task=task, num_labels=num_labels, dtype=dtype,
                    param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list:
    return llama_like_rules(spec(config))


FAMILY = Family(
    model_types=("llama",),
    tasks=TASKS,
    default_task="causal-lm",
    build=build,
    rules=rules,
    prefix="model",
    architecture=lambda task: "LlamaForCausalLM",
)
