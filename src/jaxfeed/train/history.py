"""`History` of a run (one dict per epoch), its files, and `plot_history`."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from jaxfeed._base.files import atomic_write
from jaxfeed.train.monitor import DEFAULT_MONITOR, monitor_mode, pick_best

COLUMNS = [
    "epoch",
    "train_loss",
    "train_accuracy",
    "eval_loss",
    "eval_accuracy",
    "seconds",
    "rows_per_second",
    "data_wait",
]


class History(list):
    """Per-epoch metrics: ``epoch``, ``train_loss``, ``train_accuracy``, ``eval_loss``,
    ``eval_accuracy``, ``seconds``, ``rows_per_second`` and ``data_wait`` (the share of the
    epoch spent waiting for the loader); eval keys only with an eval loader.

    >>> h = History([{"epoch": 1, "eval_loss": 0.9, "eval_accuracy": 0.5},
    ...              {"epoch": 2, "eval_loss": 0.7, "eval_accuracy": 0.5}])
    >>> h.best()["epoch"], h.best("eval_accuracy")["epoch"]
    (2, 1)
    """

    def best(self, metric: str = DEFAULT_MONITOR, mode: str | None = None) -> dict[str, Any] | None:
        """The epoch with the best ``metric``, by the rule of :mod:`jaxfeed.train.monitor`
        (default ``eval_loss``; min for losses and errors, max otherwise, unless ``mode``; the
        earliest on ties); None when no epoch has it."""
        mode = monitor_mode(metric, mode)
        index = pick_best(((i, r.get(metric)) for i, r in enumerate(self)), mode)
        return None if index is None else self[index]

    def column(self, key: str) -> list[Any]:
        return [r.get(key) for r in self]

    def to_jsonl(self) -> str:
        return "".join(json.dumps(r) + "\n" for r in self)

    def to_csv(self) -> str:
        keys = [k for k in COLUMNS if any(k in r for r in self)] + sorted(
            {k for r in self for k in r} - set(COLUMNS)
        )
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self)
        return buffer.getvalue()

    def save(self, out_dir: str | os.PathLike) -> None:
        """Write ``metrics.jsonl`` and ``history.csv`` into ``out_dir`` (atomically)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "metrics.jsonl", self.to_jsonl())
        atomic_write(out / "history.csv", self.to_csv())

    @classmethod
    def load(cls, path: str | os.PathLike) -> History:
        """Read the epoch rows of a ``metrics.jsonl`` file (or the folder holding one); step and
        eval rows (those with a ``kind``) are skipped."""
        path = Path(path)
        if path.is_dir():
            path = path / "metrics.jsonl"
        rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
        return cls(row for row in rows if "kind" not in row)


CURVE_METRICS = ("accuracy", "token_accuracy", "r2", "perplexity", "f1", "rmse", "mae")


def curve_metrics(history: list[dict[str, Any]], most: int = 2) -> list[str]:
    """The metrics ``curves.png`` draws beside the loss: the first ``most`` of
    :data:`CURVE_METRICS` the history holds (a classifier's accuracy, a language model's token
    accuracy and perplexity, a regressor's R² and RMSE).

    >>> curve_metrics([{"eval_loss": 1.0, "eval_perplexity": 3.0, "eval_token_accuracy": 0.4}])
    ['token_accuracy', 'perplexity']
    >>> curve_metrics([{"train_loss": 1.0, "eval_r2": 0.5, "eval_rmse": 2.0, "eval_mae": 1.0}])
    ['r2', 'rmse']
    """
    found = {k.split("_", 1)[1] for r in history for k in r if k.startswith(("train_", "eval_"))}
    return [m for m in CURVE_METRICS if m in found][:most]


def plot_history(
    history: list[dict[str, Any]],
    path: str | os.PathLike,
    title: str | None = None,
    best: int | None = None,
    stopped: int | None = None,
) -> Path:
    """Write a PNG with a panel of the loss per epoch, train against eval, and one for each of
    :func:`curve_metrics` (accuracy when there is nothing else: an empty panel); perplexity on
    a log axis; the ``best`` epoch (the one kept) and the epoch early stopping ``stopped`` at
    marked by vertical lines.

    >>> import tempfile, os
    >>> h = [{"epoch": 1, "train_loss": 1.0, "eval_loss": 1.2, "train_accuracy": 0.5, "eval_accuracy": 0.4}]
    >>> out = plot_history(h, os.path.join(tempfile.mkdtemp(), "curves.png"))
    >>> out.stat().st_size > 10_000
    True
    """
    import matplotlib  # noqa: PLC0415 (import cost: matplotlib, only when plotted)

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # noqa: PLC0415 (import cost: matplotlib, only when plotted)

    epochs = [r["epoch"] for r in history]
    metrics = ["loss", *(curve_metrics(history) or ["accuracy"])]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.2))
    names = {"r2": "R²", "rmse": "RMSE", "mae": "MAE", "f1": "F1"}
    for ax, metric in zip(axes, metrics, strict=True):
        label = names.get(metric, metric.replace("_", " "))
        for split, style in (("train", "-o"), ("eval", "-s")):
            values = [r.get(f"{split}_{metric}") for r in history]
            if any(v is not None for v in values):
                ax.plot(
                    epochs,
                    [math.nan if v is None else v for v in values],
                    style,
                    markersize=3,
                    label=split,
                )
        if best is not None:
            ax.axvline(best, color="tab:green", linestyle="--", linewidth=1, label=f"best ({best})")
        if stopped is not None:
            ax.axvline(stopped, color="tab:red", linestyle=":", linewidth=1,
                       label=f"early stop ({stopped})")  # fmt: skip
        if metric == "perplexity":
            ax.set_yscale("log")
        ax.set_title(f"{label} per epoch")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a regression run has no accuracy to plot
            ax.legend()
        if epochs:
            ax.set_xlim(min(epochs) - 0.2, max(epochs) + 0.2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, buffer.getvalue())
    return path
