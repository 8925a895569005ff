"""The model and the :class:`~jaxfeed.Trainer` of a run, built from the run: its model source
makes the model (:mod:`jaxfeed.recipes.sources`: a built-in, a Hub checkpoint, your own code), its
input kind gives the loss, metrics and inputs (:mod:`jaxfeed.recipes.kinds`), its options the
optimizer. ``run`` is a training run (:class:`~jaxfeed.recipes.train.record.Run`) or a saved one
(:class:`~jaxfeed.recipes.serving.saved.SavedRun`: eval, predict, export): both carry
:class:`TrainerInputs`.

>>> resolve_class_weights([1, 2], np.array([0, 1]), 2)
[1.0, 2.0]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.config.budget import ResumableEarlyStopping
from jaxfeed.recipes.config.optimizers import build_optimizer
from jaxfeed.runtime.freed_memory import release_now
from jaxfeed.runtime.sharding import ShardingError
from jaxfeed.train import Trainer
from jaxfeed.train.callbacks import Callback


class TrainerInputs(Protocol):
    """What :func:`build_trainer` reads of a run (a training run or a saved one)."""

    config: RunConfig  # the options (a saved run's as recorded)
    prep: Any  # the Preprocessing
    kind: Any  # the input kind
    model_source: Any  # where the model comes from
    policy: Any  # whether a model file's code may run
    mesh: Any  # the device mesh (None: one device, or a saved run's evaluation)
    class_weights: list[float] | None
    lr_logged: bool  # the learning rate is in the optimizer state (as the run's)

    @property
    def outputs(self) -> int: ...

    @property
    def steps_per_epoch(self) -> int: ...


@dataclass
class RunParts:
    """:class:`TrainerInputs` given one by one (a script's, a test's): the options, the
    preprocessing, the input kind, the model source and the outputs.

    >>> from jaxfeed.recipes.kinds.registry import KINDS
    >>> from jaxfeed.recipes.sources.registry import source_for
    >>> from jaxfeed.recipes.spec import Preprocessing
    >>> config = RunConfig(model="mlp", lr=0.01)
    >>> parts = RunParts(config, Preprocessing("array", ["x"], "y", [3]), KINDS["array"],
    ...                  source_for(config.model_spec), 2)
    >>> type(build_model(parts)).__name__
    'MLP'
    """

    config: RunConfig
    prep: Any
    kind: Any
    model_source: Any
    outputs: int
    policy: Any = None
    mesh: Any = None
    class_weights: list[float] | None = None
    lr_logged: bool = True
    steps_per_epoch: int = 1


def build_model(run: TrainerInputs, config: RunConfig | None = None) -> Any:
    """The run's NNX model (a Linen module for ``--api linen``), made by its model source
    (``config``: options other than the run's, a learning-rate probe's)."""
    assert run.model_source is not None and run.kind is not None
    return run.model_source.build_model(run, config or run.config)


def resolve_class_weights(spec: Any, labels: np.ndarray, classes: int) -> list[float] | None:
    """``--class-weights``: ``balanced`` (rows / (classes x rows of the class), over ``labels``
    of the train split) or one weight per class, checked.

    >>> resolve_class_weights("balanced", np.array([0, 0, 0, 1]), 2)
    [0.6667, 2.0]
    """
    if spec is None:
        return None
    if spec == "balanced":
        counts = np.bincount(labels[labels >= 0].astype(np.int64), minlength=classes)
        total = counts.sum()
        return [round(float(total / (classes * c)), 4) if c else 0.0 for c in counts]
    if len(spec) != classes:
        raise ConfigError(
            f"--class-weights gives {len(spec)} weights for {classes} classes; give one per class "
            "(in the order of the class names) or balanced"
        )
    return [float(w) for w in spec]


class ReleaseFreedMemory(Callback):
    """At each epoch's end, the memory the steps and compilations freed goes back to the system
    (:func:`jaxfeed.runtime.freed_memory.release_now`): the run's peak follows what it holds,
    not what it once held (glibc kept ~50 MB more after each epoch of the text classifier)."""

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        release_now()


def build_trainer(run: TrainerInputs, config: RunConfig | None = None, out: Path | None = None,
                  verbose: int = 0, model: Any = None) -> Trainer:  # fmt: skip
    """The trainer of ``run``: model, optimizer, loss, metrics and callbacks (``config``: options
    other than the run's, a learning-rate probe's; ``out``: the folder it writes to, None for
    none; ``model``: one already built for ``config``, a fitted linear model); the state laid
    out on the run's mesh by its ``--sharding`` (evaluation and prediction of a saved run
    replicate)."""
    config = config or run.config
    epochs = config.epochs if config.epochs is not None else 10  # unresolved: the old default
    total = epochs * run.steps_per_epoch
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    total = max(1, total // config.grad_accum)
    tx = build_optimizer(config, total, log_lr=run.lr_logged)
    callbacks: list[Any] = [ReleaseFreedMemory()]
    if config.patience is not None:
        mode = config.monitor_mode or "auto"
        callbacks.append(ResumableEarlyStopping(config.monitor, config.patience, mode=mode))
    kind, prep = run.kind, run.prep
    common: dict[str, Any] = {
        **kind.trainer_options(config, prep, run.class_weights),  # loss, metrics, preprocess
        **run.model_source.trainer_options(config),  # what trains
        "seed": config.seed,
        "verbose": verbose,
        "out_dir": out,
        "deterministic": config.deterministic,
        "precision": config.precision,
        "callbacks": callbacks,
        "loggers": ("tensorboard",) if config.tensorboard and out is not None else (),
        "mesh": run.mesh,
        "sharding": config.sharding if run.mesh is not None else "replicate",
    }
    model = build_model(run, config) if model is None else model
    common["inputs"] = kind.model_inputs(prep, model)
    sharding = common["sharding"]
    try:
        if config.api == "linen":
            example = np.zeros((1, *prep.input_shape), dtype=np.float32)
            trainer = Trainer.from_linen(model, tx, example, **common)
        else:
            trainer = Trainer(model, tx, **common)
    except ShardingError as err:
        raise ConfigError(f"--sharding {json.dumps(sharding)}: {err}") from None
    trainer.plot_curves = False  # the finish stage draws curves.png beside the export
    return trainer
