"""``jaxfeed generate hf:ORG/NAME PROMPT`` (or a local folder in the Hub's layout): continuations
by a pretrained causal language model, without a run: ``from_pretrained(..., task="causal-lm")``,
the checkpoint's tokenizer, and :func:`jaxfeed.text.generate` (its ``generation_config.json``
end-of-sequence ids and stop strings included)."""

from __future__ import annotations

import json
from pathlib import Path

from jaxfeed.recipes.config import ConfigError


def is_pretrained(source: str) -> bool:
    """Whether ``source`` names a Hub checkpoint (``hf:ORG/NAME``, or a folder whose
    ``config.json`` has a ``model_type`` and which is not a jaxfeed run) rather than a run."""
    if source.startswith("hf:"):
        return True
    folder = Path(source)
    config = folder / "config.json"
    if not config.is_file() or (folder / "checkpoints").exists():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "model_type" in data


def generate_pretrained(source: str, prompts: list[str], *, max_new_tokens: int = 50,
                        temperature: float = 1.0, top_k: int | None = None,
                        top_p: float | None = None, seed: int = 0,
                        stop: list[str] | None = None) -> list[str]:  # fmt: skip
    """Continuations of ``prompts`` by the checkpoint ``source``; bad checkpoints, prompts too
    long for the context and the like are one-line :class:`ConfigError`s."""
    from jaxfeed.models import from_pretrained, preprocessor  # import cost: JAX, Flax
    from jaxfeed.text import generate  # import cost: JAX

    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ConfigError(f"prompt {i} is empty")
    try:
        model = from_pretrained(source, task="causal-lm")
        tokenizer = preprocessor(source)
        return list(
            generate(model, tokenizer, list(prompts), max_new_tokens=max_new_tokens,
                     temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                     stop=stop)
        )  # fmt: skip
    except ValueError as err:  # CheckpointError is one; generate's input errors too
        raise ConfigError(str(err)) from None
