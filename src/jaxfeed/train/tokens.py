"""Losses and metrics over tokens: ``loss="next_token"`` for causal language models, the
``"perplexity"`` and ``"token_accuracy"`` metrics, and the reduction of per-token values.

Every value the trainer sums is one per row, with a weight per row (:class:`Objective.weight`).
A token objective gives each row the mean over its real tokens and weighs it by their number, so
the sums over an epoch are sums over tokens: a batch with more padding counts exactly as many
tokens as it has, never less. A loss function returning ``(batch, length)`` values is reduced the
same way, over the tokens its batch's ``attention_mask`` (and ``segment_ids > 0``) marks real.

``next_token`` predicts the token at ``t + 1`` from the logits at ``t`` (the targets are the
inputs shifted by one, as ``transformers`` shifts ``labels``). A pair counts when both tokens are
real (``attention_mask``), in the same segment (``segment_ids``, 0 = padding) and the target is
not ``-100``:

>>> import jax.numpy as jnp
>>> batch = {"input_ids": jnp.array([[1, 2, 3, 4]]), "segment_ids": jnp.array([[1, 1, 2, 2]])}
>>> next_token_pairs(batch, "input_ids")[1].astype(int).tolist()   # 2 -> 3 crosses segments
[[1, 0, 1]]
>>> losses, valid = next_token_losses(jnp.zeros((1, 4, 8)), batch, "input_ids")  # uniform logits
>>> mean, count = masked_row_mean(losses, valid)
>>> round(float(mean[0]), 4), count.tolist()                         # log(8) over 2 pairs
(2.0794, [2.0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

Batch = dict[str, jax.Array]
IGNORE = -100  # the label of a position without a target (the transformers convention)
MASK, SEGMENTS = "attention_mask", "segment_ids"
NEXT_TOKEN = "next_token"
PerExample = Callable[[Any, Batch], jax.Array]


def token_mask(batch: Batch, shape: tuple[int, ...]) -> jax.Array:
    """The real tokens of a ``(batch, length)`` batch: ``attention_mask != 0`` and
    ``segment_ids > 0`` where the batch has them (with that shape); else every token.

    >>> import jax.numpy as jnp
    >>> token_mask({"attention_mask": jnp.array([[1, 1, 0]])}, (1, 3)).tolist()
    [[True, True, False]]
    """
    real = jnp.ones(shape[:2], bool)
    if MASK in batch and tuple(batch[MASK].shape) == tuple(shape[:2]):
        real = real & (batch[MASK] != 0)
    if SEGMENTS in batch and tuple(batch[SEGMENTS].shape) == tuple(shape[:2]):
        real = real & (batch[SEGMENTS] > 0)
    return real


def masked_row_mean(values: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(per-row mean over the masked-in positions, their count)`` of ``(batch, length, ...)``
    values; a row with none gives 0 and a count of 0.

    >>> import jax.numpy as jnp
    >>> mean, count = masked_row_mean(jnp.array([[1.0, 3.0, 9.0]]), jnp.array([[True, True, False]]))
    >>> mean.tolist(), count.tolist()
    ([2.0], [2.0])
    """
    values = values.astype(jnp.float32)
    values = values.reshape(*values.shape[:2], -1).mean(axis=2)
    count = mask.sum(axis=1).astype(jnp.float32)
    total = jnp.where(mask, values, 0.0).sum(axis=1)
    return total / jnp.maximum(count, 1.0), count


def next_token_pairs(batch: Batch, targets: str) -> tuple[jax.Array, jax.Array]:
    """``(target ids, valid)``, each ``(batch, length - 1)``: the token after each position and
    whether that pair counts (both real, same segment, target not ``-100``)."""
    tokens = batch[targets]
    if tokens.ndim != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise TypeError(
            f"next_token needs (batch, length) integer token ids in column {targets!r}, got "
            f"{tokens.dtype} values of shape {tuple(tokens.shape)}"
        )
    tokens = tokens.astype(jnp.int32)
    target = tokens[:, 1:]
    valid = target != IGNORE
    if MASK in batch:
        real = batch[MASK] != 0
        valid = valid & real[:, 1:] & real[:, :-1]
    if SEGMENTS in batch:
        seg = batch[SEGMENTS]
        valid = valid & (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
    return target, valid


def _logits(outputs: Any, target: jax.Array) -> jax.Array:
    if not isinstance(outputs, jax.Array) or outputs.ndim != 3:
        raise TypeError(
            "next_token needs the model to return (batch, length, vocab) logits, got "
            f"{getattr(outputs, 'shape', type(outputs).__name__)}"
        )
    if outputs.shape[1] != target.shape[1] + 1:
        raise ValueError(
            f"next_token: the model returned {outputs.shape[1]} positions for "
            f"{target.shape[1] + 1} tokens"
        )
    return outputs[:, :-1].astype(jnp.float32)


def next_token_losses(outputs: Any, batch: Batch, targets: str) -> tuple[jax.Array, jax.Array]:
    """``(per-pair cross-entropy, valid)``, each ``(batch, length - 1)``."""
    target, valid = next_token_pairs(batch, targets)
    logits = _logits(outputs, target)
    safe = jnp.where(valid & (target >= 0), target, 0)
    return optax.softmax_cross_entropy_with_integer_labels(logits, safe), valid


def token_accuracy(targets: str) -> PerExample:
    """Per row: the share of its valid next-token pairs whose target has the highest logit (a
    tie for the highest counts as a hit). Written as the target's logit against the maximum, the
    maximum the loss's log-softmax already takes, so XLA computes it once."""

    def token_accuracy(outputs: Any, batch: Batch) -> jax.Array:
        target, valid = next_token_pairs(batch, targets)
        logits = _logits(outputs, target)
        safe = jnp.where(valid & (target >= 0), target, 0)
        picked = jnp.take_along_axis(logits, safe[..., None], axis=-1)[..., 0]
        hits = picked >= logits.max(axis=-1)
        return masked_row_mean(hits, valid)[0]

    return token_accuracy
