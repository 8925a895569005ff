"""Where a run's numbers go: ``metrics.jsonl`` rows, TensorBoard, or any object with two methods.

A *logger* is anything with ``log_metrics(metrics, step)`` (a dict of scalar tags to floats, at a
global optimizer step) and ``close()``; see :class:`Logger`. ``Trainer(loggers=...)`` takes such
objects or the name ``"tensorboard"``. The trainer sends three kinds of rows, with these tags:

* every ``log_every`` steps: ``train/loss``, ``train/accuracy`` (and any other metric),
  ``train/learning_rate`` (when the optimizer is wrapped in ``optax.inject_hyperparams``) and
  ``perf/rows_per_second``, averaged since the previous row;
* after each evaluation: ``eval/loss``, ``eval/accuracy``;
* after each epoch: ``epoch/train_loss``, ``epoch/train_accuracy``, ``epoch/rows_per_second``,
  ``epoch/data_wait``, ``epoch/seconds``.

Only process 0 of a multi-process run logs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from jaxfeed._base.files import atomic_write


@runtime_checkable
class Logger(Protocol):
    """What the trainer calls. Weights & Biases in a few lines:

    .. code-block:: python

        class WandbLogger:
            def __init__(self, **init):
                import wandb
                self.run = wandb.init(**init)
            def log_metrics(self, metrics, step):
                self.run.log(dict(metrics), step=step)
            def close(self):
                self.run.finish()

    (MLflow: ``mlflow.log_metrics(dict(metrics), step=step)`` and ``mlflow.end_run()``.)

    >>> from jaxfeed.train import Logger
    >>> class PrintLogger:                      # Trainer(..., loggers=("tensorboard", PrintLogger()))
    ...     def log_metrics(self, metrics, step):
    ...         print(step, dict(metrics))
    ...     def close(self):
    ...         pass
    >>> isinstance(PrintLogger(), Logger)
    True
    """

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardLogger:
    """Scalars as TensorBoard event files in ``log_dir``, written by tensorboardX (no TensorFlow).

    ``purge_step``: on resume, events at or after this step from the interrupted run are hidden,
    so curves do not fold back on themselves.

    >>> import tempfile
    >>> tb = TensorBoardLogger(tempfile.mkdtemp())
    >>> tb.log_metrics({"train/loss": 0.5}, step=10)
    >>> tb.close()
    """

    def __init__(self, log_dir: str | os.PathLike, *, purge_step: int | None = None) -> None:
        try:
            from tensorboardX import (  # noqa: PLC0415 (optional: the tensorboard extra)
                SummaryWriter,
            )
        except ImportError as err:
            raise ImportError(
                "loggers=('tensorboard',) needs tensorboardX: pip install 'jaxfeed[tensorboard]'"
            ) from err
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step, flush_secs=10)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, float(value), int(step))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def check_loggers(specs: Sequence[str | Logger], out_dir: Path | None) -> None:
    """Raise now, not after an epoch, for an unknown name, an object that is not a logger, a
    TensorBoard logger without ``out_dir`` or without tensorboardX."""
    for spec in specs:
        if spec == "tensorboard":
            if out_dir is None:
                raise ValueError("loggers=('tensorboard',) writes under out_dir: pass out_dir=")
            try:
                import tensorboardX  # noqa: F401, PLC0415 (optional: the tensorboard extra)
            except ImportError as err:
                raise ImportError(
                    "loggers=('tensorboard',) needs tensorboardX: pip install 'jaxfeed[tensorboard]'"
                ) from err
        elif isinstance(spec, str):
            raise ValueError(f"unknown logger {spec!r}; known: ['tensorboard'] (or pass an object)")
        elif not isinstance(spec, Logger):
            raise TypeError(
                f"a logger needs log_metrics(metrics, step) and close(); got {type(spec).__name__}"
            )


def make_loggers(
    specs: Sequence[str | Logger], out_dir: Path | None, *, resume_step: int | None = None
) -> list[Logger]:
    """Logger objects for ``Trainer(loggers=...)``: names become loggers writing under ``out_dir``."""
    out: list[Logger] = []
    for spec in specs:
        if spec == "tensorboard":
            if out_dir is None:
                raise ValueError("loggers=('tensorboard',) writes under out_dir: pass out_dir=")
            out.append(TensorBoardLogger(out_dir / "tensorboard", purge_step=resume_step))
        elif isinstance(spec, str):
            raise ValueError(f"unknown logger {spec!r}; known: ['tensorboard'] (or pass an object)")
        elif isinstance(spec, Logger):
            out.append(spec)
        else:
            raise TypeError(
                f"a logger needs log_metrics(metrics, step) and close(); got {type(spec).__name__}"
            )
    return out


def scalars(row: Mapping[str, Any], kind: str) -> dict[str, float]:
    """The tags of a metrics row (``kind``: "train", "eval" or "epoch") for loggers.

    >>> scalars({"step": 5, "epoch": 1, "train_loss": 0.3, "learning_rate": 0.01}, "train")
    {'train/loss': 0.3, 'train/learning_rate': 0.01}
    >>> scalars({"epoch": 1, "train_loss": 0.3, "eval_loss": 0.4, "seconds": 2.0}, "epoch")
    {'epoch/train_loss': 0.3, 'eval/loss': 0.4, 'epoch/seconds': 2.0}
    """
    out = {}
    for key, value in row.items():
        if key in ("step", "epoch", "kind") or not isinstance(value, int | float | np.number):
            continue
        if key.startswith("eval_"):
            tag = f"eval/{key[5:]}"
        elif kind == "epoch":
            tag = f"epoch/{key}"
        elif key.startswith("train_"):
            tag = f"train/{key[6:]}"
        elif key == "learning_rate":
            tag = "train/learning_rate"
        else:
            tag = f"perf/{key}"
        out[tag] = float(value)
    return out


class MetricsFile:
    """``metrics.jsonl``: one JSON row per line, appended and flushed as the run goes.

    ``start(step)`` on a resumed run drops the rows an interrupted run wrote after ``step`` (the
    checkpoint it resumes from); on a fresh run (step 0) it starts an empty file.
    The file is created with the first row.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._file: Any = None

    def start(self, step: int) -> None:
        self.close()
        if not self.path.exists():
            return
        if step == 0:
            self.path.unlink()
            return
        keep = []
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if isinstance(row, dict) and int(row.get("step", 0)) <= step:
                keep.append(line + "\n")
        atomic_write(self.path, "".join(keep))

    def write(self, row: Mapping[str, Any]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a")  # noqa: SIM115 - kept open for the run
        self._file.write(json.dumps(dict(row)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class RunLog:
    """The rows of a fit, to ``<out_dir>/metrics.jsonl`` and to the loggers.

    Step rows carry ``"kind": "train"``, eval rows ``"kind": "eval"``; epoch rows are the
    :class:`~jaxfeed.train.History` rows plus ``step`` and ``state_bytes_per_device`` (what the
    device holding the most of the model and optimizer state holds). Loggers are closed with
    the log.
    """

    def __init__(self, out_dir: Path | None, loggers: Sequence[Logger] = ()) -> None:
        self.file = MetricsFile(Path(out_dir) / "metrics.jsonl") if out_dir is not None else None
        self.loggers = list(loggers)

    def start(self, step: int) -> None:
        if self.file is not None:
            self.file.start(step)

    def write(self, row: Mapping[str, Any], kind: str) -> None:
        if self.file is not None:
            self.file.write(dict(row) if kind == "epoch" else {"kind": kind, **row})
        if self.loggers:
            tags = scalars(row, kind)
            for logger in self.loggers:
                logger.log_metrics(tags, int(row["step"]))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        for logger in self.loggers:
            logger.close()
