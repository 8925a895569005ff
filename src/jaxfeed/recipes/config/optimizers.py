"""A run's optimizer: ``--optimizer`` (any optax optimizer, with its ``init_args``), ``--lr``,
``--weight-decay``, the schedule (:mod:`jaxfeed.recipes.config.schedules`), ``--grad-clip`` and
``--grad-accum``, as one optax transformation.

>>> opt = build_optimizer(RunConfig(optimizer="sgd", lr=0.1, schedule="cosine", warmup_steps=2), 10)
>>> type(opt).__name__
'GradientTransformationExtraArgs'
"""

from __future__ import annotations

import inspect
from typing import Any

import optax

from jaxfeed.recipes.config.groups import ConfigError
from jaxfeed.recipes.config.run_config import RunConfig
from jaxfeed.recipes.config.schedules import build_schedule
from jaxfeed.recipes.config.values import did_you_mean

LEGACY_OPTIMIZERS = ("adamw", "adam", "sgd")  # built as the first jaxfeed built them


def optimizer_factory(name: str) -> Any:
    """An optax optimizer function by name (``lion``, ``optax.adafactor``, ``contrib.muon``):
    only attributes of optax, nothing else is imported.

    >>> optimizer_factory("lion").__name__
    'lion'
    >>> optimizer_factory("adamx")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: --optimizer 'adamx' is not an optax optimizer (did you mean 'adamax'?)
    """
    obj: Any = optax
    for part in name.removeprefix("optax.").split("."):
        obj = getattr(obj, part, None) if not part.startswith("_") else None
    params = inspect.signature(obj).parameters if callable(obj) else {}
    if not callable(obj) or "learning_rate" not in params:
        known = [k for k, v in vars(optax).items() if callable(v) and k[0].islower()]
        raise ConfigError(
            f"--optimizer {name!r} is not an optax optimizer{did_you_mean(name, known)}"
        )
    return obj


def build_optimizer(config: RunConfig, total_steps: int, *, log_lr: bool = True) -> Any:
    """``--optimizer`` (any optax optimizer, with its ``init_args``), ``--lr``, ``--weight-decay``,
    ``--schedule`` and ``--warmup-steps`` (:mod:`jaxfeed.recipes.config.schedules`), ``--grad-clip`` and ``--grad-accum`` as one optax
    transformation (``total_steps`` optimizer updates in all). ``log_lr``: the learning rate is an
    ``optax.inject_hyperparams`` hyperparameter, so the trainer logs it (runs of earlier
    versions, whose optimizer state has none, are rebuilt with ``log_lr=False``)."""
    lr = build_schedule(config, total_steps)
    name, args = config.component("optimizer")

    def make(factory: Any, **kwargs: Any) -> Any:
        if not log_lr:
            return factory(learning_rate=lr, **kwargs)
        static = tuple(  # flags, names, None: not hyperparameters in the state
            k for k, v in kwargs.items() if isinstance(v, bool) or not isinstance(v, int | float)
        )
        return optax.inject_hyperparams(factory, static_args=static)(learning_rate=lr, **kwargs)

    if name in LEGACY_OPTIMIZERS and not args:
        if name == "adamw":
            tx = make(optax.adamw, weight_decay=config.weight_decay)
        elif name == "adam":
            tx = make(optax.adam)
        else:
            tx = optax.chain(
                optax.add_decayed_weights(config.weight_decay), make(optax.sgd, momentum=0.9)
            )
    else:
        factory = optimizer_factory(name)
        params = inspect.signature(factory).parameters
        unknown = [k for k in args if k not in params or k == "learning_rate"]
        if unknown:
            raise ConfigError(
                f"--optimizer.init_args.{unknown[0]}: optax.{factory.__name__} takes no argument "
                f"{unknown[0]!r} (learning_rate comes from --lr){did_you_mean(unknown[0], params)}"
            )
        if "weight_decay" in params and "weight_decay" not in args:
            args["weight_decay"] = config.weight_decay
        try:
            tx = make(factory, **args)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"--optimizer {name}: {type(err).__name__}: {err}") from err
    if config.grad_clip is not None:
        tx = optax.chain(optax.clip_by_global_norm(config.grad_clip), tx)
    if config.grad_accum > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=config.grad_accum)
    return tx
