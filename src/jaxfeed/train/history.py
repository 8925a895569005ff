"""`History` of a run (one dict per epoch), its files, and `plot_history` (drawn by
:mod:`jaxfeed._base.curves`, which a process without JAX can import)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from jaxfeed._base.curves import CURVE_METRICS, curve_metrics, plot_history
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


__all__ = ["COLUMNS", "CURVE_METRICS", "History", "curve_metrics", "plot_history"]
