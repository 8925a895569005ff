"""Llama 2 and 3 (``model_type: llama``): RoPE (``rope_scaling`` of type ``llama3`` or
``linear``), grouped-query attention, optional attention and MLP biases, tied or untied
embeddings."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import llama_like_family, llama_like_spec


def spec(config: dict):
    """The decoder variant of a Llama ``config.json``."""
    bias = bool(config.get("attention_bias", False))
    return llama_like_spec(config, qkv_bias=bias, out_bias=bias)


FAMILY = llama_like_family("llama", spec, "LlamaForCausalLM")
