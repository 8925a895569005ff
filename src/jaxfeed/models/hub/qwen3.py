"""Qwen3 (``model_type: qwen3``): Llama-shaped with an RMSNorm on each head's queries and keys
(QK-norm) before RoPE, optional attention biases, sliding windows as Qwen2."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import layer_windows, llama_like_family, llama_like_spec


def spec(config: dict):
    """The decoder variant of a Qwen ``config.json``."""
    bias = bool(config.get("attention_bias", False))
    return llama_like_spec(config, qkv_bias=bias, out_bias=bias, qk_norm=True,
                           windows=layer_windows(config))  # fmt: skip


FAMILY = llama_like_family("qwen3", spec, "Qwen3ForCausalLM")
