"""Model choice, optimizer and the :class:`~jaxfeed.Trainer` of a run, rebuilt from its config.

``--model`` is ``cnn``, ``mlp``, ``audio_cnn``, ``transformer`` or ``transformer_lm`` (jaxfeed's
models; the transformers need a run on text, :mod:`jaxfeed.recipes.text`, whose preprocessing
gives ``vocab_size``; ``transformer`` is the classifier of a text column, or the language model of
``--task lm``) or ``FILE.py:ClassName``: a ``flax.nnx.Module`` of your own, built as
``ClassName(num_classes, input_shape=..., rngs=...)`` (each argument passed only when its
``__init__`` takes it; ``num_outputs`` is accepted for ``num_classes``) and called as
``model(x)``, with ``rngs=`` and a ``train``/``deterministic`` flag when its ``__call__`` takes them.

>>> opt = build_optimizer(RunConfig(optimizer="sgd", schedule="cosine", warmup_steps=2), 10)
>>> type(opt).__name__
'GradientTransformationExtraArgs'
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax

from jaxfeed.recipes import schedules, text
from jaxfeed.recipes.budget import ResumableEarlyStopping
from jaxfeed.recipes.config import ConfigError, RunConfig, did_you_mean
from jaxfeed.recipes.spec import INPUTS, TARGETS, TEXT_KINDS, Preprocessing
from jaxfeed.train import Trainer
from jaxfeed.train.losses import resolve_loss
from jaxfeed.train.metrics import SPLIT_METRICS, SplitMetric, rmse
from jaxfeed.train.sharding import ShardingError


def model_name(config: RunConfig, kind: str) -> str:
    """The ``--model`` of a run: given, else ``cnn`` for images, ``mlp`` for tables,
    ``audio_cnn`` for audio and ``transformer`` for text."""
    if config.model is not None:
        return config.component("model")[0]
    if kind in TEXT_KINDS:
        return "transformer"
    return {"table": "mlp", "audio": "audio_cnn"}.get(kind, "cnn")


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
    """``FILE.py:ClassName`` or ``package.module.ClassName`` -> the class (the file or module is
    run: it is your code; named by a run folder, only under ``policy.trust``)."""
    if ":" not in spec:
        policy = policy or CodePolicy()
        if policy.named_by_run and not policy.trust:
            raise ConfigError(
                f"the run's model is Python code ({spec}); jaxfeed imports a model named by a run "
                "folder only with --trust-code (a shared run folder must not run code by surprise)"
            )
        module_name, _, name = spec.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ConfigError(f"--model {spec}: cannot import {module_name}: {err}") from err
        cls = getattr(module, name, None)
        if not isinstance(cls, type):
            raise ConfigError(f"--model {spec}: {module_name} has no class {name!r}")
        return cls
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
    init_args = config.component("model")[1] if config.model is not None else {}
    from jaxfeed.recipes import pretrained  # import cost: the Hub layer, when a model is built

    if pretrained.is_hub_model(name):
        if config.api == "linen":
            raise ConfigError(f"--api linen: --model {name} is an nnx model from the Hub")
        return pretrained.build_model(name, prep, outputs, config)
    if config.api == "linen":
        if name != "cnn":
            raise ConfigError("--api linen supports --model cnn only")
        from jaxfeed.models import LinenCNN  # import cost: flax, when a model is built

        return LinenCNN(outputs, **init_args)
    rngs = nnx.Rngs(seed)
    if name in ("cnn", "mlp") and prep.kind in TEXT_KINDS:
        raise ConfigError(
            f"--model {name} does not fit this run's token ids of text; use --model transformer "
            "(or your own)"
        )
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
        from jaxfeed.models import CNN  # import cost: flax, when a model is built

        return _construct(CNN, name, init_args, outputs, input_shape=image, rngs=rngs)
    if name == "audio_cnn":
        from jaxfeed.models import AudioCNN  # import cost: flax, when a model is built

        if prep.kind == "table" or len(shape) != 2:
            raise ConfigError(
                f"--model audio_cnn needs (frames, mel bins) spectrograms; the inputs have shape "
                f"{shape}: train it on an audio column"
            )
        try:
            return _construct(AudioCNN, name, init_args, outputs, input_shape=shape, rngs=rngs)
        except ValueError as err:
            raise ConfigError(f"--model audio_cnn: {err}") from None
    if name == "mlp":
        from jaxfeed.models import MLP  # import cost: flax, when a model is built

        return _construct(MLP, name, init_args, outputs, input_shape=shape, rngs=rngs)
    if name in ("transformer", "transformer_lm"):
        return _text_model(text.transformer_name(name, prep), prep, outputs, init_args, rngs)
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
    if "vocab_size" in params and prep.text:
        kwargs["vocab_size"] = int(prep.text["vocab_size"])
    if "rngs" in params:
        kwargs["rngs"] = rngs
    clash = sorted(set(kwargs) & set(init_args))
    if clash:
        raise ConfigError(
            f"--model.init_args.{clash[0]}: jaxfeed passes {clash[0]} itself (from the data)"
        )
    unknown = [k for k in init_args if k not in params] if not _takes_kwargs(params) else []
    if unknown:
        raise ConfigError(
            f"--model.init_args.{unknown[0]}: {cls.__name__}() takes no argument {unknown[0]!r}"
            f"{did_you_mean(unknown[0], params)}"
        )
    try:
        model = cls(**kwargs, **init_args)
    except Exception as err:
        raise ConfigError(
            f"--model {name}: {cls.__name__}({', '.join([*kwargs, *init_args])}) failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    if not isinstance(model, nnx.Module):
        raise ConfigError(f"--model {name}: {cls.__name__} is not a flax.nnx.Module")
    return model


def _text_model(name: str, prep: Preprocessing, outputs: int, init_args: dict[str, Any],
                rngs: Any) -> Any:  # fmt: skip
    """``transformer`` (:class:`~jaxfeed.models.TransformerClassifier`) or ``transformer_lm``
    (:class:`~jaxfeed.models.TransformerLM`) over the run's token ids: ``prep.vocab_size``, and
    ``prep.max_length`` (the longest row the data gives) as the context unless
    ``--model.init_args.max_length`` sets it."""
    from jaxfeed.models import TransformerClassifier, TransformerLM  # import cost: flax

    vocab_size = getattr(prep, "vocab_size", None)
    if not vocab_size:
        raise ConfigError(
            f"--model {name} needs text (token ids from a tokenizer); the data is {prep.kind} "
            f"with inputs of shape {tuple(prep.input_shape)}"
        )
    context = getattr(prep, "max_length", None)
    extra = {"max_length": int(context)} if context and "max_length" not in init_args else {}
    if name == "transformer":
        return _construct(
            TransformerClassifier, name, init_args, vocab_size, outputs, rngs=rngs, **extra
        )
    return _construct(TransformerLM, name, init_args, vocab_size, rngs=rngs, **extra)


def _takes_kwargs(params: Any) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _construct(cls: type, name: str, init_args: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """A built-in model with ``--model.init_args``, their names checked against its signature."""
    params = inspect.signature(cls.__init__).parameters
    for key in init_args:
        if key not in params or key in kwargs or key in ("self", "num_classes"):
            raise ConfigError(
                f"--model.init_args.{key}: {name} takes no argument {key!r} (it takes "
                f"{[p for p in params if p not in ('self', 'num_classes', *kwargs)]})"
            )
    return cls(*args, **kwargs, **init_args)


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
    ``--schedule`` and ``--warmup-steps`` (:mod:`jaxfeed.recipes.schedules`), ``--grad-clip`` and ``--grad-accum`` as one optax
    transformation (``total_steps`` optimizer updates in all). ``log_lr``: the learning rate is an
    ``optax.inject_hyperparams`` hyperparameter, so the trainer logs it (runs of earlier
    versions, whose optimizer state has none, are rebuilt with ``log_lr=False``)."""
    lr = schedules.build_schedule(config, total_steps)
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


def label_unit_errors(std: float) -> dict[str, Any]:
    """``mse`` and ``mae`` per example in the label column's units, for a model trained on the
    standardised target (``std``: the target's deviation); the loss stays standardised.

    >>> m = label_unit_errors(10.0)
    >>> batch = {TARGETS: jnp.array([0.0, 1.0])}
    >>> m["mse"](jnp.array([[0.5], [1.0]]), batch).tolist(), m["mae"](jnp.array([0.5, 1.0]), batch).tolist()
    ([25.0, 0.0], [5.0, 0.0])
    """

    def error(outputs: Any, batch: Any) -> Any:
        y = batch[TARGETS].astype(jnp.float32)
        return (outputs.astype(jnp.float32).reshape(y.shape) - y) * std

    def mse(outputs: Any, batch: Any) -> Any:
        return jnp.square(error(outputs, batch))

    def mae(outputs: Any, batch: Any) -> Any:
        return jnp.abs(error(outputs, batch))

    return {"mse": mse, "mae": mae}


CLASSIFICATION_METRICS = ("accuracy", "f1", "precision", "recall", "auc")
REGRESSION_METRICS = ("mse", "mae", "rmse", "r2")


def run_metrics(config: RunConfig, regression: bool, std: float | None) -> dict[str, Any]:
    """``--metrics`` for the Trainer; regression errors in the label column's units (``std``: the
    target's deviation; the model learns the standardised target).

    >>> sorted(run_metrics(RunConfig(), True, 2.0)), run_metrics(RunConfig(metrics=["f1"]), False, None)
    (['mae', 'mse', 'r2', 'rmse'], {'f1': 'f1'})
    """
    if not regression:
        names = config.metrics or ["accuracy"]
        for name in names:
            if name not in CLASSIFICATION_METRICS and not re.fullmatch(r"top\d+_accuracy", name):
                raise ConfigError(
                    f"--metrics {name}: not a classification metric; known: "
                    f"{', '.join(CLASSIFICATION_METRICS)}, topK_accuracy"
                    + did_you_mean(name, CLASSIFICATION_METRICS)
                )
        return {name: name for name in names}
    scale = float(std or 1.0)
    errors = label_unit_errors(scale)
    out: dict[str, Any] = {}
    for name in config.metrics or REGRESSION_METRICS:
        if name in errors:
            out[name] = errors[name]
        elif name == "rmse":
            out[name] = SplitMetric(lambda o, t: rmse(o, t) * scale, classification=False)
        elif name == "r2":
            out[name] = SPLIT_METRICS["r2"]
        else:
            raise ConfigError(
                f"--metrics {name}: not a regression metric; known: {', '.join(REGRESSION_METRICS)}"
                + did_you_mean(name, REGRESSION_METRICS)
            )
    return out


def run_loss(config: RunConfig, regression: bool, class_weights: list[float] | None) -> Any:
    """``--loss`` (checked against the task), weighted per class by ``class_weights``."""
    name = config.loss or ("mse" if regression else "cross_entropy")
    if regression != (name != "cross_entropy"):
        task = "regression" if regression else "classification"
        raise ConfigError(
            f"--loss {name} does not fit a {task} task; use "
            + ("mse, mae or huber" if regression else "cross_entropy")
        )
    if class_weights is None:
        return name
    if regression:
        raise ConfigError("--class-weights is for classification; this task is regression")
    weights = jnp.asarray(class_weights, jnp.float32)
    base = resolve_loss("cross_entropy", TARGETS)

    def weighted(outputs: Any, batch: Any) -> Any:
        y = jnp.clip(batch[TARGETS].astype(jnp.int32), 0, len(class_weights) - 1)
        return base.per_example(outputs, batch) * weights[y]

    return dataclasses.replace(base, per_example=weighted)


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
    scale = prep.scale and prep.kind in ("image", "array")

    def preprocess(batch):  # on the device, inside the compiled step
        x = batch[INPUTS]
        if scale and jnp.issubdtype(x.dtype, jnp.integer):
            x = x.astype(jnp.float32) / 255.0
        elif not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.float32)
        return {**batch, INPUTS: x}

    regression = prep.task == "regression"
    callbacks = (
        []
        if config.patience is None
        else [
            ResumableEarlyStopping(
                config.monitor, config.patience, mode=config.monitor_mode or "auto"
            )
        ]
    )
    lm = prep.kind == "lm"
    common: dict[str, Any] = {
        "preprocess": None if prep.kind in TEXT_KINDS else preprocess,
        "seed": config.seed,
        "verbose": verbose,
        "out_dir": out_dir,
        "deterministic": config.deterministic,
        "inputs": INPUTS,
        "targets": None if lm else TARGETS,
        "loss": text.LM_LOSS if lm else run_loss(config, regression, class_weights),
        "metrics": text.lm_metrics(config)
        if lm
        else run_metrics(config, regression, prep.target_std),
        "precision": config.precision,
        "callbacks": callbacks,
        "loggers": ("tensorboard",) if config.tensorboard and out_dir is not None else (),
        "mesh": mesh,
        "sharding": sharding,
    }
    model = build_model(config, prep, outputs, config.seed, policy)
    if prep.kind in TEXT_KINDS:  # token columns, as the model's __call__ names them
        common["inputs"] = text.model_inputs(prep, model)
    try:
        if config.api == "linen":
            example = np.zeros((1, *prep.input_shape), dtype=np.float32)
            return Trainer.from_linen(model, tx, example, **common)
        return Trainer(model, tx, **common)
    except ShardingError as err:
        raise ConfigError(f"--sharding {json.dumps(sharding)}: {err}") from None
