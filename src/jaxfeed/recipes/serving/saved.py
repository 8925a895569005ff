"""The saved-run reader: a run folder as eval, predict, generate and export use it
(:class:`SavedRun`), its two choices rebuilt from its record: the input kind from its
preprocessing (:func:`~jaxfeed.recipes.kinds.registry.kind_named`, read before the
preprocessing itself: predict checks its paths first) and the model source from its
``--model`` and what it resolved (:func:`~jaxfeed.recipes.sources.registry.source_of`: a Hub
checkpoint reopened at the commit the run recorded). The trainer of a saved run
(:meth:`SavedRun.trainer`) is built as training built it, before a checkpoint's weights are
restored into it (:meth:`SavedRun.restore`).

>>> import tempfile
>>> from jaxfeed.recipes import RunConfig
>>> from jaxfeed.recipes.train import train
>>> config = RunConfig(model="linear", epochs=1, out=tempfile.mkdtemp() + "/run")  # digits
>>> saved = read_saved(train(config, say=lambda *a: None, verbose=0).out)
>>> saved.kind, saved.model_source.name, saved.outputs, saved.config.model
(ArrayKind('array'), 'builtin', 10, 'linear')
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxfeed.recipes.config import RunConfig, RunRecord, read_run
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.registry import kind_named
from jaxfeed.recipes.run import model_copy, preprocessing_of, restore
from jaxfeed.recipes.sources.base import ModelSource
from jaxfeed.recipes.sources.registry import source_of
from jaxfeed.recipes.sources.user import CodePolicy
from jaxfeed.recipes.spec import Preprocessing


@dataclass
class SavedRun:
    """A run folder (``out``) and its ``config.json`` (``record``), read: its preprocessing, its
    input kind, and (on first use: a Hub checkpoint is reopened then) its model source. It
    carries what :func:`~jaxfeed.recipes.train.trainer.build_trainer` reads; a model file of the
    user's is imported only with ``trust_code``."""

    out: Path
    record: RunRecord
    kind: Kind
    policy: CodePolicy
    verify_source: bool = False  # a Hub checkpoint's files checked against the record (export)
    mesh: Any = None  # a saved run is evaluated on one device (replicated)
    steps_per_epoch: int = 1

    @functools.cached_property
    def prep(self) -> Preprocessing:
        """The run's preprocessing, read from its record (a damaged one refused naming it)."""
        return preprocessing_of(self.record, str(self.out / "config.json"))

    @property
    def config(self) -> RunConfig:
        return self.record.options

    @property
    def task(self) -> str:
        return str(self.record.resolved["task"])

    @property
    def labels(self) -> list[str]:
        return list(self.record.resolved["labels"])

    @property
    def outputs(self) -> int:
        return len(self.labels) if self.task == "classification" else 1

    @property
    def class_weights(self) -> list[float] | None:
        return self.record.resolved.get("class_weights")

    @property
    def lr_logged(self) -> bool:
        return bool(self.record.resolved.get("lr_logged", False))  # as the run's optimizer state

    @functools.cached_property
    def model_source(self) -> ModelSource:
        """The run's model source, rebuilt from its record (a Hub checkpoint at its commit)."""
        return source_of(self.record, verify=self.verify_source)

    def trainer(self, *, verbose: int = 0) -> Any:
        """The run's trainer, built as training built it (for eval, predict and generate),
        before a checkpoint's weights are restored into it."""
        from jaxfeed.recipes.train.trainer import build_trainer  # import cost: JAX, optax, flax

        return build_trainer(self, verbose=verbose)

    def restore(self, trainer: Any, which: str) -> dict[str, Any]:
        """Checkpoint ``which`` (``best``, ``last`` or a step) of the run, its weights alone,
        into ``trainer``; its metadata."""
        return restore(trainer, self.out, self.record, which)


def read_saved(run: str | Path, *, trust_code: bool = False, verify_source: bool = False,
               record: RunRecord | None = None) -> SavedRun:  # fmt: skip
    """The run folder ``run`` read (``record``: its ``config.json`` when already read);
    ``trust_code`` lets a model file it names be imported; ``verify_source``: a Hub checkpoint's
    files are checked against the hashes the run recorded."""
    run = Path(run)
    record = record if record is not None else read_run(run)
    saved = record.resolved.get("preprocess")
    kind = kind_named(saved.get("kind") if isinstance(saved, dict) else None)
    policy = CodePolicy(named_by_run=True, copy=model_copy(record, run), trust=trust_code)
    return SavedRun(run, record, kind, policy, verify_source)


__all__ = ["SavedRun", "read_saved"]
