"""Losses and metrics as per-example functions of ``(outputs, batch)``.

Every loss and metric the trainer uses has one shape: ``fn(outputs, batch) -> (batch,)``, one
value per example, so padding rows and unlabelled rows can be masked out and sums stay exact over
an epoch. Built-in names resolve to such functions bound to the ``targets`` column:

* losses: ``"cross_entropy"`` (integer class ids, ``-1`` = no label), ``"binary_cross_entropy"``
  (logits against 0/1 targets), ``"mse"``, ``"mae"``, ``"huber"``, and ``"next_token"`` (causal
  language modelling, averaged over real tokens: :mod:`jaxfeed.train.tokens`);
* metrics: ``"accuracy"``, ``"topK_accuracy"`` (any K, e.g. ``"top5_accuracy"``), ``"mse"``,
  ``"mae"``, ``"perplexity"`` (``exp`` of the mean loss), ``"token_accuracy"`` (next_token);
  and, over a whole split rather than per example (:mod:`jaxfeed.train.metrics`),
  ``"f1"``, ``"precision"``, ``"recall"``, ``"auc"``, ``"r2"``, ``"rmse"``.

A loss function may also return ``(batch, length)`` values, one per token: each row is then
the mean over its real tokens (``attention_mask``, ``segment_ids > 0``), weighted by their number.

>>> import jax.numpy as jnp
>>> objective = resolve_loss("mse", "y")
>>> objective.per_example(jnp.array([[1.0], [3.0]]), {"y": jnp.array([1.0, 1.0])}).tolist()
[0.0, 4.0]
>>> sorted(resolve_metrics(None, objective, "y"))
[]
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxfeed.train import tokens
from jaxfeed.train.metrics import SPLIT_METRICS, SplitMetric

Batch = dict[str, jax.Array]
PerExample = Callable[[Any, Batch], jax.Array]

CLASSIFICATION = ("cross_entropy", "binary_cross_entropy")


@dataclass(frozen=True)
class Objective:
    """A loss as the trainer runs it.

    ``per_example(outputs, batch)`` gives one loss per example; ``labelled(outputs, batch)`` (or
    None) marks the rows that have a label (built-in classification losses: class id ``>= 0``);
    ``classes`` says whether the targets are integer class ids, checked against the number of
    outputs (``label_check``). ``weight(outputs, batch)`` (or None: 1 per row) is each row's
    weight in the means: a token loss gives the row's mean over its tokens and their number.
    """

    name: str
    per_example: PerExample
    labelled: Callable[[Any, Batch], jax.Array] | None = None
    classification: bool = False
    label_check: Callable[[Any, Batch], jax.Array] | None = None
    targets: str | None = None
    weight: Callable[[Any, Batch], jax.Array] | None = None


def _targets(batch: Batch, targets: str | None, what: str) -> jax.Array:
    if targets is None:
        raise ValueError(f"the {what} needs targets=: the name of the column holding the targets")
    return batch[targets]


def _as_float(outputs: Any) -> jax.Array:
    if not isinstance(outputs, jax.Array):
        raise TypeError(
            f"a built-in loss needs the model to return one array, got {type(outputs).__name__}; "
            "pass loss=a function (outputs, batch) -> per-example values"
        )
    return outputs.astype(jnp.float32)


def _like_targets(outputs: jax.Array, y: jax.Array) -> jax.Array:
    """``(B, 1)`` outputs against ``(B,)`` targets (and the reverse) are the same thing."""
    if outputs.shape != y.shape and outputs.size == y.size:
        return outputs.reshape(y.shape)
    if outputs.shape != y.shape:
        raise ValueError(
            f"the model's outputs have shape {tuple(outputs.shape)} but the targets {tuple(y.shape)}"
        )
    return outputs


def _per_row(values: jax.Array) -> jax.Array:
    return values.reshape(values.shape[0], -1).mean(axis=1) if values.ndim > 1 else values


def _class_ids(y: jax.Array, what: str) -> jax.Array:
    if not jnp.issubdtype(y.dtype, jnp.integer):
        raise TypeError(
            f"{what} needs integer class ids as targets, got {y.dtype} values; cast the column to a "
            "ClassLabel or an int type, or use a regression loss (mse, mae, huber)"
        )
    return y.astype(jnp.int32)


def _cross_entropy(targets: str | None) -> Objective:
    def per_example(outputs: Any, batch: Batch) -> jax.Array:
        logits = _as_float(outputs)
        y = _class_ids(_targets(batch, targets, "cross_entropy loss"), "cross_entropy")
        safe = jnp.where(y >= 0, y, 0)  # -1 (no label) rows are masked by `labelled`
        return optax.softmax_cross_entropy_with_integer_labels(logits, safe)

    def labelled(outputs: Any, batch: Batch) -> jax.Array:
        return batch[targets] >= 0

    def label_check(outputs: Any, batch: Batch) -> jax.Array:
        y = batch[targets].astype(jnp.int32)
        return (y < -1) | (y >= outputs.shape[-1])

    return Objective("cross_entropy", per_example, labelled, True, label_check, targets)


def _binary_cross_entropy(targets: str | None) -> Objective:
    def per_example(outputs: Any, batch: Batch) -> jax.Array:
        y = _targets(batch, targets, "binary_cross_entropy loss")
        logits = _like_targets(_as_float(outputs), y)
        return _per_row(optax.sigmoid_binary_cross_entropy(logits, y.astype(jnp.float32)))

    return Objective("binary_cross_entropy", per_example, classification=True, targets=targets)


def _regression(name: str, targets: str | None) -> Objective:
    def per_example(outputs: Any, batch: Batch) -> jax.Array:
        y = _targets(batch, targets, f"{name} loss").astype(jnp.float32)
        error = _like_targets(_as_float(outputs), y) - y
        if name == "mse":
            values = jnp.square(error)
        elif name == "mae":
            values = jnp.abs(error)
        else:
            values = optax.huber_loss(error, delta=1.0)
        return _per_row(values)

    return Objective(name, per_example, targets=targets)


def next_token(targets: str | None = "input_ids") -> Objective:
    """Causal language modelling: the mean cross-entropy of each row's valid next-token pairs
    (:func:`jaxfeed.train.tokens.next_token_pairs`), weighted by their number, so the loss is a
    mean over real tokens. ``targets`` names the token column (``"input_ids"``, or ``"labels"``
    with ``-100`` where nothing is predicted); the Trainer's default ``"label"`` means
    ``"input_ids"``.

    >>> import jax.numpy as jnp
    >>> objective = next_token()
    >>> batch = {"input_ids": jnp.array([[1, 2, 3, 0]]), "attention_mask": jnp.array([[1, 1, 1, 0]])}
    >>> logits = jnp.zeros((1, 4, 8))                              # uniform over 8 tokens
    >>> round(float(objective.per_example(logits, batch)[0]), 4), objective.weight(logits, batch).tolist()
    (2.0794, [2.0])
    """
    column = "input_ids" if targets in (None, "label") else targets

    def per_example(outputs: Any, batch: Batch) -> jax.Array:
        losses, valid = tokens.next_token_losses(outputs, batch, column)
        return tokens.masked_row_mean(losses, valid)[0]

    def weight(outputs: Any, batch: Batch) -> jax.Array:
        return tokens.next_token_pairs(batch, column)[1].sum(axis=1).astype(jnp.float32)

    def label_check(outputs: Any, batch: Batch) -> jax.Array:
        target, valid = tokens.next_token_pairs(batch, column)
        return (valid & ((target < 0) | (target >= outputs.shape[-1]))).any(axis=1)

    return Objective(
        tokens.NEXT_TOKEN, per_example, label_check=label_check, targets=column, weight=weight
    )


LOSSES: dict[str, Callable[[str | None], Objective]] = {
    "cross_entropy": _cross_entropy,
    "binary_cross_entropy": _binary_cross_entropy,
    "mse": lambda t: _regression("mse", t),
    "mae": lambda t: _regression("mae", t),
    "huber": lambda t: _regression("huber", t),
    tokens.NEXT_TOKEN: next_token,
}


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-example softmax cross-entropy with integer labels.

    >>> import jax.numpy as jnp
    >>> round(float(cross_entropy(jnp.zeros((1, 4)), jnp.array([2]))[0]), 4)
    1.3863
    """
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels.astype(jnp.int32)
    )


def resolve_loss(loss: str | Callable, targets: str | None) -> Objective:
    """A built-in loss name or a function ``loss(outputs, batch)`` as an :class:`Objective`."""
    if isinstance(loss, Objective):
        return loss
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; known: {sorted(LOSSES)} (or pass a function)")
        return LOSSES[loss](targets)
    if not callable(loss):
        raise TypeError(f"loss must be a name or a function, got {type(loss).__name__}")
    name = getattr(loss, "__name__", "loss")
    return Objective(name, lambda outputs, batch: loss(outputs, batch))


# ---------------------------------------------------------------------------------- metrics
def _accuracy(objective: Objective, targets: str | None) -> PerExample:
    def accuracy(outputs: Any, batch: Batch) -> jax.Array:
        y = _targets(batch, targets, "accuracy metric")
        out = _as_float(outputs)
        if objective.name == "binary_cross_entropy" or (out.ndim == 1 or out.shape[-1] == 1):
            predicted = (_like_targets(out, y) > 0).astype(jnp.float32)
            return _per_row((predicted == (y > 0.5)).astype(jnp.float32))
        return (jnp.argmax(out, axis=-1) == y.astype(jnp.int32)).astype(jnp.float32)

    return accuracy


def _top_k(k: int, targets: str | None) -> PerExample:
    def top_k(outputs: Any, batch: Batch) -> jax.Array:
        y = _class_ids(_targets(batch, targets, f"top{k}_accuracy metric"), "topK_accuracy")
        logits = _as_float(outputs)
        target = jnp.take_along_axis(logits, jnp.maximum(y, 0)[:, None], axis=-1)
        higher = jnp.sum(logits > target, axis=-1)
        return (higher < k).astype(jnp.float32)

    return top_k


def _error(name: str, targets: str | None) -> PerExample:
    def error(outputs: Any, batch: Batch) -> jax.Array:
        y = _targets(batch, targets, f"{name} metric").astype(jnp.float32)
        diff = _like_targets(_as_float(outputs), y) - y
        return _per_row(jnp.square(diff) if name == "mse" else jnp.abs(diff))

    return error


def resolve_metrics(
    metrics: str | Sequence[Any] | Mapping[str, Callable] | None,
    objective: Objective,
    targets: str | None,
) -> dict[str, PerExample]:
    """Metric names, functions or a ``{name: function}`` dict as ``{name: per-example function}``.

    ``None`` picks the default for the loss: accuracy for classification, nothing else for
    regression (the loss is always reported).

    >>> sorted(resolve_metrics(["accuracy", "top3_accuracy"], resolve_loss("cross_entropy", "y"), "y"))
    ['accuracy', 'top3_accuracy']
    """
    if metrics is None:
        metrics = ("accuracy",) if objective.classification else ()
        if objective.name == tokens.NEXT_TOKEN:
            metrics = ("perplexity", "token_accuracy")
    if isinstance(metrics, str) or (callable(metrics) and not isinstance(metrics, Mapping)):
        metrics = (metrics,)
    items: list[tuple[str, Any]] = (
        list(metrics.items()) if isinstance(metrics, Mapping) else [(None, m) for m in metrics]
    )
    out: dict[str, PerExample] = {}
    for name, metric in items:
        if isinstance(metric, SplitMetric) or (isinstance(metric, str) and metric in SPLIT_METRICS):
            continue  # resolve_split_metrics
        if callable(metric):
            name = name or getattr(metric, "__name__", f"metric{len(out)}")
            fn = metric
        elif isinstance(metric, str):
            name = name or metric
            fn = _named_metric(metric, objective, targets)
        else:
            raise TypeError(f"a metric is a name or a function, got {type(metric).__name__}")
        if name == "loss" or name in out:
            raise ValueError(f"metric name {name!r} is used twice (the loss is always 'loss')")
        out[name] = fn
    return out


def resolve_split_metrics(
    metrics: str | Sequence[Any] | Mapping[str, Any] | None,
) -> dict[str, SplitMetric]:
    """The whole-split metrics among ``metrics``: names of :data:`SPLIT_METRICS` and
    :class:`SplitMetric` values of a ``{name: metric}`` dict.

    >>> sorted(resolve_split_metrics(["accuracy", "f1", "auc"]))
    ['auc', 'f1']
    """
    if metrics is None or isinstance(metrics, str) or callable(metrics):
        metrics = () if metrics is None else (metrics,)
    items = list(metrics.items()) if isinstance(metrics, Mapping) else [(None, m) for m in metrics]
    out: dict[str, SplitMetric] = {}
    for name, metric in items:
        if isinstance(metric, str) and metric in SPLIT_METRICS:
            out[name or metric] = SPLIT_METRICS[metric]
        elif isinstance(metric, SplitMetric):
            if name is None:
                raise ValueError(
                    "a SplitMetric needs a name: pass metrics={name: SplitMetric(...)}"
                )
            out[name] = metric
    return out


def _perplexity(objective: Objective) -> PerExample:
    """``exp`` of the mean loss over the rows (or tokens) the loss averages: the per-row loss
    summed like the loss, with ``finalize`` applied to the mean."""

    def perplexity(outputs: Any, batch: Batch) -> jax.Array:
        return objective.per_example(outputs, batch)

    perplexity.finalize = _exp  # type: ignore[attr-defined]
    # The trainer sums the loss's own per-row values instead of computing them again (a second
    # cross-entropy over the logits cost an LM's step about 3%).
    perplexity.of_loss = True  # type: ignore[attr-defined]
    return perplexity


def _exp(value: float) -> float:
    return math.exp(value) if value < 700 else math.inf


def _named_metric(name: str, objective: Objective, targets: str | None) -> PerExample:
    if name == "perplexity":
        return _perplexity(objective)
    if name == "token_accuracy" or (name == "accuracy" and objective.name == tokens.NEXT_TOKEN):
        if objective.name != tokens.NEXT_TOKEN:
            raise ValueError(f"metric {name!r} needs loss='next_token'")
        return tokens.token_accuracy(objective.targets)
    if name == "accuracy":
        return _accuracy(objective, targets)
    match = re.fullmatch(r"top(\d+)_accuracy", name)
    if match and int(match.group(1)) >= 1:
        return _top_k(int(match.group(1)), targets)
    if name in ("mse", "mae"):
        return _error(name, targets)
    raise ValueError(
        f"unknown metric {name!r}; known: 'accuracy', 'topK_accuracy' (e.g. 'top5_accuracy'), "
        f"'mse', 'mae', 'perplexity', 'token_accuracy', {', '.join(map(repr, SPLIT_METRICS))} (whole split), or a function "
        "(outputs, batch) -> per-example values"
    )
