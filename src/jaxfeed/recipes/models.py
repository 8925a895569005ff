"""Model choice, optimizer and the :class:`~jaxfeed.Trainer` of a run, rebuilt from its config.

``--model`` is ``cnn`` or ``mlp`` (jaxfeed's models) or ``FILE.py:ClassName``: a ``flax.nnx.Module``
of your own, built as ``ClassName(num_classes, input_shape=..., rngs=...)`` (each argument passed
only when its ``__init__`` takes it; ``num_outputs`` is accepted for ``num_classes``) and called as
``model(x)``, with ``rngs=`` and a ``train``/``deterministic`` flag when its ``__call__`` takes them.

>>> opt = build_optimizer(RunConfig(optimizer="sgd", schedule="cosine", warmup_steps=2), 10)
>>> type(opt).__name__
'GradientTransformationExtraArgs'
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax

from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.preprocess import INPUTS, TARGETS, Preprocessing
from jaxfeed.train import EarlyStopping, Trainer
from jaxfeed.train.sharding import ShardingError


def model_name(config: RunConfig, kind: str) -> str:
    """The ``--model`` of a run: given, else ``cnn`` for images and ``mlp`` for tables."""
    if config.model is not None:
        return config.model
    return "mlp" if kind == "table" else "cnn"


@dataclass(frozen=True)
class CodePolicy:
    """Which model file a run may import. ``jaxfeed train`` (and ``--resume``) imports the file
    the user named, from its recorded absolute path. A run folder's own copy (``code/``), or any
    model file named by a run folder that ``eval``/``predict`` read, is imported only with
    ``trust`` (``--trust-code``): a shared run folder never runs code by surprise."""

    named_by_run: bool = False  # the spec comes from a run folder's config.json
    copy: Path | None = None  # the run's copy of the file
    trust: bool = False


def model_file(spec: str, policy: CodePolicy | None = None) -> Path:
    """The file ``FILE.py:ClassName`` imports under ``policy``; a clear error when it may not."""
    policy = policy or CodePolicy()
    path = Path(spec.rpartition(":")[0]).expanduser()
    if policy.named_by_run and not policy.trust:
        raise ConfigError(
            f"the run's model is Python code ({spec}); jaxfeed imports a model file named by a run "
            "folder only with --trust-code (a shared run folder must not run code by surprise)"
            + (
                ": eval and predict of the best checkpoint serve model/ without it"
                if policy.copy
                else ""
            )
        )
    if not path.is_file() and policy.copy is not None and policy.copy.is_file():
        if not policy.trust:
            raise ConfigError(
                f"--model {spec}: no such file {path}; the run keeps a copy in {policy.copy}, "
                "imported only with --trust-code (it is code: trust the run folder first)"
            )
        path = policy.copy
    if not path.is_file():
        raise ConfigError(f"--model {spec}: no such file {path}")
    return path


def load_user_class(spec: str, policy: CodePolicy | None = None) -> type:
    """``FILE.py:ClassName`` -> the class (the file is run as a module: it is your code)."""
    path = model_file(spec, policy)
    name = spec.rpartition(":")[2]
    module_name = f"jaxfeed_user_model_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(module_name)
    if module is None:
        spec_obj = importlib.util.spec_from_file_location(module_name, path)
        if spec_obj is None or spec_obj.loader is None:
            raise ConfigError(f"--model {spec}: {path} cannot be imported as a Python file")
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[module_name] = module
        try:
            spec_obj.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            raise ConfigError(
                f"--model {spec}: importing {path} failed: {type(err).__name__}: {err}"
            ) from err
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        found = sorted(
            k
            for k, v in vars(module).items()
            if isinstance(v, type) and v.__module__ == module_name
        )
        raise ConfigError(f"--model {spec}: {path} has no class {name!r}; its classes: {found}")
    return cls


def build_model(
    config: RunConfig,
    prep: Preprocessing,
    outputs: int,
    seed: int,
    policy: CodePolicy | None = None,
) -> Any:
    """The NNX model of a run (or a Linen module, for ``--api linen``)."""
    from flax import nnx

    shape = tuple(prep.input_shape)
    name = model_name(config, prep.kind)
    if config.api == "linen":
        if name != "cnn":
            raise ConfigError("--api linen supports --model cnn only")
        from jaxfeed.models import LinenCNN

        return LinenCNN(outputs)
    rngs = nnx.Rngs(seed)
    if name == "cnn":
        if prep.kind == "table" or len(shape) not in (2, 3):
            raise ConfigError(
                f"--model cnn needs images; the inputs have shape {shape}: use --model mlp"
            )
        image = shape if len(shape) == 3 else (*shape, 1)
        if image[0] < 4 or image[1] < 4:
            raise ConfigError(
                f"--model cnn needs images of at least 4x4, the data has {shape}; try --model mlp or --image-size"
            )
        from jaxfeed.models import CNN

        return CNN(outputs, input_shape=image, rngs=rngs)
    if name == "mlp":
        from jaxfeed.models import MLP

        return MLP(outputs, input_shape=shape, rngs=rngs)
    cls = load_user_class(name, policy)
    params = inspect.signature(
        cls.__init__
    ).parameters  # nnx.Module classes hide it behind a metaclass
    kwargs: dict[str, Any] = {}
    for key in ("num_classes", "num_outputs"):
        if key in params:
            kwargs[key] = outputs
    if "input_shape" in params:
        kwargs["input_shape"] = shape
    if "rngs" in params:
        kwargs["rngs"] = rngs
    try:
        model = cls(**kwargs)
    except Exception as err:
        raise ConfigError(
            f"--model {name}: {cls.__name__}({', '.join(kwargs)}) failed: {type(err).__name__}: {err}"
        ) from err
    if not isinstance(model, nnx.Module):
        raise ConfigError(f"--model {name}: {cls.__name__} is not a flax.nnx.Module")
    return model


def build_optimizer(config: RunConfig, total_steps: int) -> Any:
    """``--optimizer``, ``--lr``, ``--weight-decay``, ``--schedule``, ``--warmup-steps`` and
    ``--grad-accum`` as one optax transformation (``total_steps`` optimizer updates in all)."""
    warmup = min(config.warmup_steps, max(total_steps - 1, 0))
    decay_steps = max(total_steps - warmup, 1)
    if config.schedule == "constant":
        after: Any = config.lr  # a float, not a schedule: no step count in the optimizer state
    elif config.schedule == "cosine":
        after = optax.cosine_decay_schedule(config.lr, decay_steps)
    else:
        after = optax.linear_schedule(config.lr, 0.0, decay_steps)
    lr = (
        optax.join_schedules([optax.linear_schedule(0.0, config.lr, warmup), after], [warmup])
        if warmup
        else after
    )
    if config.optimizer == "adamw":
        tx = optax.adamw(lr, weight_decay=config.weight_decay)
    elif config.optimizer == "adam":
        tx = optax.adam(lr)
    else:
        tx = optax.chain(
            optax.add_decayed_weights(config.weight_decay), optax.sgd(lr, momentum=0.9)
        )
    if config.grad_accum > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=config.grad_accum)
    return tx


def build_trainer(
    config: RunConfig,
    prep: Preprocessing,
    outputs: int,
    steps_per_epoch: int,
    out_dir: Path | None = None,
    verbose: int = 1,
    policy: CodePolicy | None = None,
    *,
    mesh: Any = None,
    sharding: Any = "replicate",
) -> Trainer:
    """The trainer of a run: model, optimizer, loss and callbacks, all from the config; the
    state laid out on ``mesh`` by ``sharding`` (``--mesh``, ``--sharding``: training passes
    them; evaluation and prediction replicate)."""
    total = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    total = max(1, total // config.grad_accum)
    tx = build_optimizer(config, total)
    scale = prep.scale and prep.kind in ("image", "array")

    def preprocess(batch):  # on the device, inside the compiled step
        x = batch[INPUTS]
        if scale and jnp.issubdtype(x.dtype, jnp.integer):
            x = x.astype(jnp.float32) / 255.0
        elif not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.float32)
        return {**batch, INPUTS: x}

    regression = prep.task == "regression"
    callbacks = [] if config.patience is None else [EarlyStopping("eval_loss", config.patience)]
    common: dict[str, Any] = {
        "preprocess": preprocess,
        "seed": config.seed,
        "verbose": verbose,
        "out_dir": out_dir,
        "deterministic": config.deterministic,
        "inputs": INPUTS,
        "targets": TARGETS,
        "loss": "mse" if regression else "cross_entropy",
        "metrics": ("mae",) if regression else ("accuracy",),
        "precision": config.precision,
        "callbacks": callbacks,
        "loggers": ("tensorboard",) if config.tensorboard and out_dir is not None else (),
        "mesh": mesh,
        "sharding": sharding,
    }
    model = build_model(config, prep, outputs, config.seed, policy)
    try:
        if config.api == "linen":
            example = np.zeros((1, *prep.input_shape), dtype=np.float32)
            return Trainer.from_linen(model, tx, example, **common)
        return Trainer(model, tx, **common)
    except ShardingError as err:
        raise ConfigError(f"--sharding {json.dumps(sharding)}: {err}") from None
