"""Evaluation reports: classification (per-class precision, recall, F1, support; confusion
matrix) and regression (MSE, MAE, R²), as dicts for ``--json`` and as text, plus the plot.

>>> import numpy as np
>>> r = classification_report(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1]), ["a", "b"])
>>> r["accuracy"], r["per_class"]["b"]["precision"], r["confusion_matrix"]
(0.75, 0.6667, [[1, 1], [0, 2]])
>>> regression_report(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))["mae"]
0.3333
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed._base.files import atomic_write


def _r(value: float) -> float:
    return round(float(value), 4)


def classification_report(
    truth: np.ndarray, predicted: np.ndarray, labels: list[str]
) -> dict[str, Any]:
    """Accuracy, per-class precision/recall/F1/support, macro averages (over the classes that
    occur in the truth or the predictions, as ``eval_f1`` during training) and the confusion
    matrix (rows: true class, columns: predicted). A class never predicted has precision 0."""
    k = len(labels)
    matrix = np.zeros((k, k), dtype=np.int64)
    np.add.at(matrix, (truth.astype(np.int64), predicted.astype(np.int64)), 1)
    tp = np.diag(matrix).astype(np.float64)
    support = matrix.sum(axis=1)
    predicted_count = matrix.sum(axis=0)
    precision = np.divide(tp, predicted_count, out=np.zeros(k), where=predicted_count > 0)
    recall = np.divide(tp, support, out=np.zeros(k), where=support > 0)
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros(k), where=denom > 0)
    present = (support > 0) | (predicted_count > 0)  # as jaxfeed.train.metrics and scikit-learn
    per_class = {
        name: {"precision": _r(p), "recall": _r(r), "f1": _r(f), "support": int(s)}
        for name, p, r, f, s in zip(labels, precision, recall, f1, support, strict=True)
    }
    return {
        "rows": int(matrix.sum()),
        "accuracy": _r(tp.sum() / max(matrix.sum(), 1)),
        "macro_avg": {
            "precision": _r(precision[present].mean()) if present.any() else 0.0,
            "recall": _r(recall[present].mean()) if present.any() else 0.0,
            "f1": _r(f1[present].mean()) if present.any() else 0.0,
        },
        "per_class": per_class,
        "labels": list(labels),
        "confusion_matrix": matrix.tolist(),
    }


def regression_report(truth: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """MSE, RMSE, MAE and R² in the target's units."""
    truth, predicted = np.asarray(truth, np.float64), np.asarray(predicted, np.float64)
    error = predicted - truth
    mse = float(np.mean(error**2))
    variance = float(np.var(truth))
    return {
        "rows": int(truth.size),
        "mse": _r(mse),
        "rmse": _r(mse**0.5),
        "mae": _r(np.mean(np.abs(error))),
        "r2": _r(1 - mse / variance) if variance > 0 else None,
    }


def format_classification(report: dict[str, Any]) -> str:
    """The per-class table and the confusion matrix as text; a class without rows in the split
    says so rather than scoring zeros.

    >>> table = format_classification(classification_report(np.array([0, 0]), np.array([0, 0]), ["a", "b"]))
    >>> table.splitlines()[2].split()
    ['b', 'no', 'rows', '0']
    """
    labels = report["labels"]
    width = max(9, max(len(n) for n in labels) + 2)
    lines = [f"{'class':<{width}}{'precision':>10}{'recall':>10}{'f1':>10}{'support':>10}"]
    for name in labels:
        c = report["per_class"][name]
        if not c["support"]:  # no rows of the class in this split: nothing to score, not zeros
            lines.append(f"{name:<{width}}{'no rows':>30}{'':>10}{0:>10}")
            continue
        lines.append(
            f"{name:<{width}}{c['precision']:>10.4f}{c['recall']:>10.4f}{c['f1']:>10.4f}{c['support']:>10}"
        )
    m = report["macro_avg"]
    lines.append(
        f"{'macro avg':<{width}}{m['precision']:>10.4f}{m['recall']:>10.4f}{m['f1']:>10.4f}{report['rows']:>10}"
    )
    cell = max(5, max(len(n) for n in labels) + 1)
    lines += ["", "confusion matrix (rows: true, columns: predicted)"]
    lines.append(" " * cell + "".join(f"{n[: cell - 1]:>{cell}}" for n in labels))
    for name, row in zip(labels, report["confusion_matrix"], strict=True):
        lines.append(f"{name[: cell - 1]:>{cell}}" + "".join(f"{v:>{cell}}" for v in row))
    return "\n".join(lines)


def plot_confusion(matrix: np.ndarray, labels: list[str], path: Path, title: str) -> Path:
    """The confusion matrix as a PNG (written atomically)."""
    import matplotlib  # only for the plot: matplotlib's import takes a while

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    matrix = np.asarray(matrix)
    size = max(4.5, 0.45 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    top = matrix.max() or 1
    for i in range(len(labels)):
        for j in range(len(labels)):
            if matrix[i, j]:
                color = "white" if matrix[i, j] > top / 2 else "black"
                ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=8, color=color)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, buffer.getvalue())
    return path
