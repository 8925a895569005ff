"""Qwen2 (``model_type: qwen2``): Llama-shaped with biases on the query, key and value
projections (none on the output), and sliding windows on the layers ``layer_types`` marks when
``use_sliding_window``."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import layer_windows, llama_like_family, llama_like_spec


def spec(config: dict):
    """The decoder variant of a Qwen ``config.json``."""
    return llama_like_spec(config, qkv_bias=True, windows=layer_windows(config))


FAMILY = llama_like_family("qwen2", spec, "Qwen2ForCausalLM")
