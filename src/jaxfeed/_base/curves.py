"""``curves.png``: a run's loss and metrics per epoch, drawn with matplotlib (:func:`plot_history`,
public as ``jaxfeed.plot_history``), here or in another Python process (:class:`CurvesInBackground`).

Drawing costs about 0.85 CPU s, half of it matplotlib's import: ``jaxfeed train`` draws in a
process of its own while it exports the chosen checkpoint and reads the test split, and waits
for it before its summary. The module sits on the ground floor because that process must not
import JAX (``jaxfeed.train`` does): it imports matplotlib and :mod:`jaxfeed._base.files` only.
It uses matplotlib's ``Figure`` and Agg canvas, not ``pyplot`` (whose import and figure manager
cost about 15% more here, and whose global state a background caller need not share).

>>> import tempfile, os
>>> h = [{"epoch": 1, "train_loss": 1.0, "eval_loss": 1.2, "train_accuracy": 0.5, "eval_accuracy": 0.4}]
>>> job = CurvesInBackground(h, os.path.join(tempfile.mkdtemp(), "curves.png"), best=1)
>>> job.result().stat().st_size > 10_000
True
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from jaxfeed._base.files import atomic_write

CURVE_METRICS = ("accuracy", "token_accuracy", "r2", "perplexity", "f1", "rmse", "mae")
#: The modules :func:`plot_history` imports: where all are imported, drawing costs no import.
_DRAWING_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg")
WAIT_SECONDS = 120.0  # a drawing process that takes longer is stopped and the curves drawn here


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
    from matplotlib.backends.backend_agg import (  # noqa: PLC0415 (import cost: matplotlib)
        FigureCanvasAgg,
    )
    from matplotlib.figure import Figure  # noqa: PLC0415 (import cost: matplotlib, when plotted)

    epochs = [r["epoch"] for r in history]
    metrics = ["loss", *(curve_metrics(history) or ["accuracy"])]
    fig = Figure(figsize=(5.5 * len(metrics), 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(metrics))
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
    # tight_layout leaves a placeholder layout engine, for which savefig draws the whole figure
    # once more before it renders (0.1-0.2 of the 0.5-0.7 CPU s a three-panel figure took): the
    # layout is fixed now, so none; the PNG is the same, byte for byte (matplotlib 3.11)
    fig.set_layout_engine(None)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    atomic_write(path, buffer.getvalue())
    return path


class CurvesInBackground:
    """:func:`plot_history` of ``history`` into ``path``, drawn by another Python process
    started now (it imports this module and matplotlib, never JAX); :meth:`result` waits for it
    and returns the path. Where that process could not draw (it failed to start or import, or
    took :data:`WAIT_SECONDS`), :meth:`result` draws here instead, raising what that raises
    (the other process's output is not kept: drawing here says what went wrong). Where this
    process has already imported matplotlib's figure and Agg canvas (a notebook, a test
    process), no process starts: :meth:`result` draws here (about 0.3 CPU s, where starting
    Python and importing matplotlib again cost 1.4)."""

    def __init__(self, history: list[dict[str, Any]], path: str | os.PathLike,
                 best: int | None = None, stopped: int | None = None) -> None:  # fmt: skip
        self.history, self.path = [dict(r) for r in history], Path(path)
        self.best, self.stopped = best, stopped
        payload = json.dumps({"history": self.history, "path": str(self.path), "best": best,
                              "stopped": stopped}).encode()  # fmt: skip
        # the child imports jaxfeed from where this process did (a path added at run time too)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._process: subprocess.Popen | None = None
        if all(name in sys.modules for name in _DRAWING_MODULES):  # drawing here is cheaper
            return
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from jaxfeed._base.curves import _main; _main()"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env,
            )  # fmt: skip
            assert self._process.stdin is not None
            self._process.stdin.write(payload)
            self._process.stdin.close()
        except OSError:  # no process to start (or it died at once): result() draws here
            self._process = None

    def result(self, timeout: float = WAIT_SECONDS) -> Path:
        """Wait for the drawing process; the path it wrote (or drawn here if it could not)."""
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.returncode == 0 and self.path.is_file():
                return self.path
        return plot_history(self.history, self.path, best=self.best, stopped=self.stopped)

    def cancel(self) -> None:
        """Stop the drawing process (the caller failed or was interrupted)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _main() -> None:
    """The drawing process: the JSON :class:`CurvesInBackground` wrote on stdin."""
    task = json.loads(sys.stdin.buffer.read())
    plot_history(task["history"], task["path"], best=task["best"], stopped=task["stopped"])
