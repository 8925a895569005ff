"""Mistral (``model_type: mistral``): Llama-shaped, grouped-query attention, and sliding-window
attention over the last ``sliding_window`` tokens when the config sets one."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import llama_like_family, llama_like_spec


def spec(config: dict):
    """The decoder variant of a Mistral ``config.json``."""
    window = config.get("sliding_window")
    layers = int(config["num_hidden_layers"])
    windows = (int(window),) * layers if window else ()
    return llama_like_spec(config, windows=windows)


FAMILY = llama_like_family("mistral", spec, "MistralForCausalLM")
