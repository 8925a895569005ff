"""PLACEHOLDER until the hub-core branch lands (take hub-core's file on merge): the `Rule` and
`Transform` data of HUB_INTERFACE.md and a minimal `load_weights`, so the decoder families of
hub-lm can be built and tested before the shared loading layer exists."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from flax import nnx


@dataclass(frozen=True)
class Transform:
    """A pair of numpy functions: checkpoint layout to the model's, and back."""

    to_jax: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


IDENTITY = Transform(lambda a: a, lambda a: a)
TRANSPOSE = Transform(lambda a: a.T, lambda a: a.T)


@dataclass(frozen=True)
class Rule:
    """Checkpoint tensor ``hf`` goes to the dotted NNX parameter ``path`` through ``transform``."""

    hf: str
    path: str
    transform: Transform = IDENTITY


def _variable(model: nnx.Module, path: str) -> nnx.Variable:
    node = model
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


def load_weights(model: nnx.Module, weights: Mapping[str, np.ndarray], rules) -> None:
    """Copy ``weights`` (name -> array) into ``model`` by ``rules`` (shapes checked)."""
    for rule in rules:
        if rule.hf not in weights:
            raise KeyError(f"checkpoint has no tensor {rule.hf!r}")
        var = _variable(model, rule.path)
        value = rule.transform.to_jax(np.asarray(weights[rule.hf]))
        if value.shape != var.value.shape:
            raise ValueError(f"{rule.hf}: shape {value.shape}, model {rule.path} {var.value.shape}")
        var.value = jnp.asarray(value, var.value.dtype)


def export_weights(model: nnx.Module, rules) -> dict[str, np.ndarray]:
    """The inverse of :func:`load_weights`."""
    return {r.hf: r.transform.to_hf(np.asarray(_variable(model, r.path).value)) for r in rules}
