"""PLACEHOLDER until the hub-core branch lands (take hub-core's file on merge): the `Family`
record of HUB_INTERFACE.md and `families()` keyed by `model_type`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    model_types: tuple[str, ...]
    tasks: tuple[str, ...]
    default_task: str
    build: Callable
    rules: Callable
    architecture: Callable


def families() -> dict[str, Family]:
    """``model_type`` -> family."""
    from jaxfeed.models.hub import gpt2, llama, mistral, qwen2, qwen3  # noqa: PLC0415 (cycle: families import Family)

    return {t: m.FAMILY for m in (gpt2, llama, mistral, qwen2, qwen3) for t in m.FAMILY.model_types}
