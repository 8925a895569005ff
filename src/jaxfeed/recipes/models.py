"""Model choice, optimizer and the :class:`~jaxfeed.Trainer` of a run, rebuilt from its config.

``--model`` is one of jaxfeed's models (:mod:`jaxfeed.recipes.kinds.builtins`: ``cnn``, ``mlp``,
``audio_cnn``, ``transformer``, ``transformer_lm``), a Hub checkpoint, or a ``flax.nnx.Module`` of
your own (:mod:`jaxfeed.recipes.user_models`), called as ``model(x)``, with ``rngs=`` and a
``train``/``deterministic`` flag when its ``__call__`` takes them; the run's input kind builds it
(:mod:`jaxfeed.recipes.kinds`).

>>> resolve_class_weights([1, 2], np.array([0, 1]), 2)
[1.0, 2.0]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed.recipes.budget import ResumableEarlyStopping
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.registry import kind_of
from jaxfeed.recipes.optimizers import LEGACY_OPTIMIZERS as LEGACY_OPTIMIZERS
from jaxfeed.recipes.optimizers import build_optimizer as build_optimizer
from jaxfeed.recipes.optimizers import optimizer_factory as optimizer_factory
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.recipes.user_models import CodePolicy as CodePolicy
from jaxfeed.recipes.user_models import load_user_class as load_user_class
from jaxfeed.recipes.user_models import model_file as model_file
from jaxfeed.runtime.freed_memory import release_now
from jaxfeed.runtime.sharding import ShardingError
from jaxfeed.train import Trainer
from jaxfeed.train.callbacks import Callback


def build_model(
    config: RunConfig,
    prep: Preprocessing,
    outputs: int,
    seed: int,
    policy: CodePolicy | None = None,
) -> Any:
    """The NNX model of a run (or a Linen module, for ``--api linen``), as its kind builds it
    (:mod:`jaxfeed.recipes.kinds`: a built-in, a Hub checkpoint's or a class of your own)."""
    kind = kind_of(prep, model=config.model_spec)
    return kind.build_model(config, prep, outputs, seed, policy)


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


def build_trainer(
    config: RunConfig,
    prep: Preprocessing,
    outputs: int,
    steps_per_epoch: int,
    out_dir: Path | None = None,
    verbose: int = 1,
    policy: CodePolicy | None = None,
    *,
    class_weights: list[float] | None = None,
    log_lr: bool = True,
    mesh: Any = None,
    sharding: Any = "replicate",
) -> Trainer:
    """The trainer of a run: model, optimizer, loss, metrics and callbacks, all from the config
    (``class_weights``: the run's resolved ``--class-weights``; ``log_lr``: see
    :func:`build_optimizer`); the state laid out on ``mesh`` by ``sharding`` (``--mesh``,
    ``--sharding``: training passes them; evaluation and prediction replicate)."""
    epochs = config.epochs if config.epochs is not None else 10  # unresolved: the old default
    total = epochs * steps_per_epoch
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    total = max(1, total // config.grad_accum)
    tx = build_optimizer(config, total, log_lr=log_lr)
    callbacks: list[Any] = [ReleaseFreedMemory()]
    if config.patience is not None:
        mode = config.monitor_mode or "auto"
        callbacks.append(ResumableEarlyStopping(config.monitor, config.patience, mode=mode))
    kind = kind_of(prep, model=config.model_spec)
    common: dict[str, Any] = {
        **kind.trainer_options(config, prep, class_weights),  # loss, metrics, preprocess
        "seed": config.seed,
        "verbose": verbose,
        "out_dir": out_dir,
        "deterministic": config.deterministic,
        "precision": config.precision,
        "callbacks": callbacks,
        "loggers": ("tensorboard",) if config.tensorboard and out_dir is not None else (),
        "mesh": mesh,
        "sharding": sharding,
    }
    model = kind.build_model(config, prep, outputs, config.seed, policy)
    common["inputs"] = kind.model_inputs(prep, model)
    if getattr(config, "lora", None) is not None:
        common["trainable"] = "lora"  # the adapters (and a new head); the checkpoint frozen
    try:
        if config.api == "linen":
            example = np.zeros((1, *prep.input_shape), dtype=np.float32)
            return Trainer.from_linen(model, tx, example, **common)
        return Trainer(model, tx, **common)
    except ShardingError as err:
        raise ConfigError(f"--sharding {json.dumps(sharding)}: {err}") from None
