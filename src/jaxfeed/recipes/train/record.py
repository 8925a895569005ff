"""The record a training run carries through its stages (:class:`Run`) and what it returns
(:class:`TrainResult`).

:meth:`Run.resolved` is the part of ``config.json`` beside the options, its keys in the order
every release wrote them: the run's own values first (:data:`HEAD_KEYS`), then what a resumed run
carries over from its record (:data:`CARRIED_KEYS`), then the rest in :data:`LATER_KEYS`'s order.

>>> [k for k in LATER_KEYS if k not in CARRIED_KEYS][:3]
['pretrained', 'class_weights', 'lr_logged']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax

from jaxfeed._base.files import atomic_write
from jaxfeed.recipes.config import RunConfig, RunRecord

if TYPE_CHECKING:  # the record's field types: the modules that fill them import these
    from jaxfeed.recipes.kinds.base import Kind
    from jaxfeed.recipes.run_data import RunData
    from jaxfeed.recipes.sources.base import ModelSource
    from jaxfeed.recipes.sources.user import CodePolicy
    from jaxfeed.recipes.spec import Preprocessing

HEAD_KEYS = (
    "task", "labels", "preprocess", "best_metric", "best_mode", "data_kind", "eval_split",
    "test_split", "processes", "devices", "data_fingerprint",
)  # fmt: skip
LATER_KEYS = (
    "budget", "pretrained", "class_weights", "lr_logged", "lr_finder", "pretrained_eval",
    "model_code", "early_stopping", "baselines", "choice",
)  # fmt: skip
# a resumed run's, as it recorded them
CARRIED_KEYS = ("model_code", "budget", "early_stopping", "baselines", "choice")
ALWAYS = ("class_weights", "lr_logged")  # recorded when None too


@dataclass
class TrainResult:
    """A finished run: its folder, history, the chosen checkpoint's validation figures (``best``:
    ``step``, ``epoch``, ``eval_*``) and the test split's figures on that checkpoint (``test``:
    ``test_*``; None without a test split)."""

    out: Path
    history: Any
    best: dict[str, Any] | None
    seconds: float
    test: dict[str, Any] | None = None


@dataclass
class Run:
    """One run as the stages of :func:`~jaxfeed.recipes.train.train` fill it in: opened (the
    options, the folder, a resumed run's record, its model source: a Hub checkpoint opened),
    planned (data, its input kind, preprocessing, loaders, the resolved values ``config.json``
    records), then built, fitted and finished. Its two choices, each made once: ``model_source``
    (where the model comes from, by ``open_run``) and ``kind`` (what the inputs are, by
    ``plan``). A resolved value of None is not recorded (``class_weights`` and ``lr_logged``
    are)."""

    config: RunConfig
    out: Path
    primary: bool  # process 0: the one that writes
    say: Callable[..., None]
    verbose: int = 1
    own_process: bool = False  # nothing else runs in this process (the command): see build()
    record: RunRecord | None = None  # the resumed run's config.json
    policy: CodePolicy | None = None  # whether a model file's code may run
    model_source: ModelSource | None = None  # where the model comes from (opened)
    # planned
    run_data: RunData | None = None
    kind: Kind | None = None  # what the inputs are
    prep: Preprocessing | None = None
    loaders: tuple[Any, ...] = ()  # train, validation (or None), test (or None)
    mesh: Any = None
    # the resolved values, as config.json records them
    preprocess: dict[str, Any] | None = None
    best_metric: str | None = None
    best_mode: str | None = None
    data_fingerprint: str | None = None
    budget: dict[str, Any] | None = None
    pretrained: dict[str, Any] | None = None
    class_weights: list[float] | None = None
    lr_logged: bool = True  # the learning rate is in the optimizer state, logged
    lr_finder: dict[str, Any] | None = None
    pretrained_eval: dict[str, Any] | None = None
    model_code: dict[str, Any] | None = None
    early_stopping: dict[str, Any] | None = None
    baselines: dict[str, Any] | None = None  # the majority class's and the linear model's figures
    choice: dict[str, Any] | None = None  # the run's model against the linear one (candidates)
    carried: tuple[str, ...] = ()  # the CARRIED_KEYS a resumed run's record holds
    model_given: bool = False  # --model (or --api linen) named the model: it is not compared
    candidate: Any = None  # the linear model as fitted (recipes.train.candidates.Candidate)

    @property
    def data(self) -> RunData:
        assert self.run_data is not None, "the run is not planned yet"
        return self.run_data

    @property
    def task(self) -> str:
        return self.data.task

    @property
    def splits(self) -> Any:
        return self.data.splits

    @property
    def outputs(self) -> int:
        """The model's outputs: a classifier's classes, else 1."""
        return len(self.data.labels) if self.task == "classification" else 1

    @property
    def steps_per_epoch(self) -> int:
        """Batches of an epoch of the train loader (1 before the loaders are made)."""
        return len(self.loaders[0]) if self.loaders else 1

    @property
    def selection(self) -> bool:
        """Whether a validation split selects the checkpoint."""
        return self.data.splits.eval is not None

    def resolved(self) -> dict[str, Any]:
        """What ``config.json`` records beside the options (see the module's docstring)."""
        data = self.data
        values: dict[str, Any] = {
            "task": data.task,
            "labels": data.labels,
            "preprocess": self.preprocess,
            "best_metric": self.best_metric,
            "best_mode": self.best_mode,
            "data_kind": data.source.kind,
            "eval_split": data.splits.eval_name,
            "test_split": data.splits.test_name,
            "processes": jax.process_count(),
            "devices": jax.device_count(),
            "data_fingerprint": self.data_fingerprint,
        }
        values.update((key, getattr(self, key)) for key in self.carried)
        for key in LATER_KEYS:
            value = getattr(self, key)
            if key not in self.carried and (value is not None or key in ALWAYS):
                values[key] = value
        return values

    def to_record(self) -> RunRecord:
        """The run's ``config.json``: its options as they stand, and :meth:`resolved`."""
        return RunRecord(self.config, self.resolved())

    def write_record(self) -> None:
        """Write ``config.json`` (process 0 only)."""
        if self.primary:
            atomic_write(self.out / "config.json", self.to_record().to_json())
