"""Metrics over a whole split: macro F1, precision, recall, ROC AUC, R², RMSE.

A per-example metric (``accuracy``, ``mae``, ...) is a mean, so summing it batch by batch is
exact. These are not: F1 of a split is not the mean of the batches' F1. A :class:`SplitMetric`
is computed once, on the host, from the model's outputs and the targets of every labelled row of
the split, when the trainer evaluates (``Trainer(metrics=["f1", "auc"])`` gives ``eval_f1`` and
``eval_auc``; training rows carry only the per-example metrics).

Definitions follow scikit-learn: macro averages over the classes present in the targets or the
predictions (a class never predicted has precision 0); ROC AUC is the probability that a positive
scores above a negative (ties count a half), one class against the rest and averaged for more
than two classes, over the classes present; R² is ``1 - SSE / SST`` (NaN when the targets are
constant).

>>> import numpy as np
>>> logits = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 3.0]])
>>> targets = np.array([0, 1, 1, 1])
>>> round(f1(logits, targets), 4), precision(logits, targets), round(recall(logits, targets), 4)
(0.7333, 0.75, 0.8333)
>>> roc_auc(logits, targets)
1.0
>>> r2(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
0.7857142857142857
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

HostMetric = Callable[[np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class SplitMetric:
    """A metric of a whole split: ``fn(outputs, targets) -> float`` on numpy arrays of every
    labelled row (``outputs`` as the model returns them: logits for classification)."""

    fn: HostMetric
    classification: bool = True

    def __call__(self, outputs: np.ndarray, targets: np.ndarray) -> float:
        return float(self.fn(outputs, targets))


def predicted_classes(outputs: np.ndarray) -> np.ndarray:
    """Class ids from logits: argmax, or ``> 0`` for one output per row (a binary logit)."""
    outputs = np.asarray(outputs)
    if outputs.ndim == 1 or outputs.shape[-1] == 1:
        return (outputs.reshape(len(outputs)) > 0).astype(np.int64)
    return outputs.argmax(-1)


def _confusion(outputs: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    truth = np.asarray(targets).astype(np.int64).reshape(-1)
    guess = predicted_classes(outputs)
    k = int(max(truth.max(initial=-1), guess.max(initial=-1))) + 1
    matrix = np.zeros((k, k), np.int64)
    np.add.at(matrix, (truth, guess), 1)
    present = (matrix.sum(0) > 0) | (matrix.sum(1) > 0)
    return matrix, present


def _per_class(outputs: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, ...]:
    matrix, present = _confusion(outputs, targets)
    tp = np.diag(matrix).astype(np.float64)
    predicted, support = matrix.sum(0), matrix.sum(1)
    p = np.divide(tp, predicted, out=np.zeros(len(tp)), where=predicted > 0)
    r = np.divide(tp, support, out=np.zeros(len(tp)), where=support > 0)
    f = np.divide(2 * p * r, p + r, out=np.zeros(len(tp)), where=(p + r) > 0)
    return p[present], r[present], f[present]


def precision(outputs: np.ndarray, targets: np.ndarray) -> float:
    """Macro-averaged precision."""
    return float(_per_class(outputs, targets)[0].mean())


def recall(outputs: np.ndarray, targets: np.ndarray) -> float:
    """Macro-averaged recall."""
    return float(_per_class(outputs, targets)[1].mean())


def f1(outputs: np.ndarray, targets: np.ndarray) -> float:
    """Macro-averaged F1 (the mean of the classes' F1)."""
    return float(_per_class(outputs, targets)[2].mean())


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    _, first, counts = np.unique(sorted_values, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(average, counts)
    return ranks


def _binary_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = _ranks(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def roc_auc(outputs: np.ndarray, targets: np.ndarray) -> float:
    """ROC AUC: binary from one logit or two; otherwise one class against the rest, averaged
    over the classes present in the targets (NaN with a single class)."""
    outputs = np.asarray(outputs, np.float64)
    truth = np.asarray(targets).astype(np.int64).reshape(-1)
    if outputs.ndim == 1 or outputs.shape[-1] == 1:
        return _binary_auc(outputs.reshape(-1), truth == 1)
    shifted = outputs - outputs.max(-1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    if outputs.shape[-1] == 2:
        return _binary_auc(probabilities[:, 1], truth == 1)
    classes = [c for c in np.unique(truth) if 0 <= c < outputs.shape[-1]]
    scores = [_binary_auc(probabilities[:, c], truth == c) for c in classes]
    scores = [s for s in scores if not np.isnan(s)]
    return float(np.mean(scores)) if scores else float("nan")


def _errors(outputs: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(targets, np.float64).reshape(len(targets), -1)
    return np.asarray(outputs, np.float64).reshape(y.shape) - y, y


def r2(outputs: np.ndarray, targets: np.ndarray) -> float:
    """The coefficient of determination, over every target value."""
    error, y = _errors(outputs, targets)
    total = float(np.square(y - y.mean(0)).sum())
    return 1.0 - float(np.square(error).sum()) / total if total > 0 else float("nan")


def rmse(outputs: np.ndarray, targets: np.ndarray) -> float:
    """The root of the mean squared error."""
    return float(np.sqrt(np.square(_errors(outputs, targets)[0]).mean()))


SPLIT_METRICS: dict[str, SplitMetric] = {
    "f1": SplitMetric(f1),
    "precision": SplitMetric(precision),
    "recall": SplitMetric(recall),
    "auc": SplitMetric(roc_auc),
    "r2": SplitMetric(r2, classification=False),
    "rmse": SplitMetric(rmse, classification=False),
}
