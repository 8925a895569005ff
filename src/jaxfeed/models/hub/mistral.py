"""Mistral (``model_type: mistral``): Llama-shaped, grouped-query attention, and sliding-window
attention over the last ``sliding_window`` tokens when the config sets one."""

from __future__ import annotations

from jaxfeed.models.hub.decoder import TASKS, build_lm, llama_like_rules, llama_like_spec
from jaxfeed.models.hub.family import Family


def spec(config: dict):
    """The decoder variant of a Mistral ``config.json``."""
    window = config.get("sliding_window")
    layers = int(config["num_hidden_layers"])
    windows = (int(window),) * layers if window else ()
    return llama_like_spec(config, windows=windows)


def build(config: dict, *, task: str, num_labels=None, dtype=None, param_dtype=None, rngs):
    return build_lm(spec(config), config, task=task, num_labels=num_labels, dtype=dtype,
                    param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list:
    return llama_like_rules(spec(config))


FAMILY = Family(
    model_types=("mistral",),
    tasks=TASKS,
    default_task="causal-lm",
    build=build,
    rules=rules,
    prefix="model",
    architecture=lambda task: "MistralForCausalLM",
)
