"""jaxfeed's built-in models as ``--model`` names them: one table (:data:`BUILTINS`) of the
command name, the class it builds (a :data:`jaxfeed.models.registry.MODEL_CLASSES` name), the
input kinds it accepts and its constructor. ``recipes/config`` reads the names from here (no JAX
is imported: the constructors import the models when they run).

>>> sorted(BUILTINS)
['audio_cnn', 'cnn', 'linear', 'mlp', 'ngram', 'transformer', 'transformer_lm']
>>> BUILTINS["cnn"].class_name, BUILTINS["transformer"].kinds, BUILTINS["ngram"].kinds
('CNN', ('text', 'lm', 'tokens'), ('text',))
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxfeed.recipes.config.groups import ConfigError

TOKEN_KINDS = ("text", "lm", "tokens")  # token ids: the transformers' inputs


@dataclass(frozen=True)
class Builtin:
    """One built-in model: ``build(builtin, kind, prep, outputs, init_args, rngs)`` makes it for
    a run of ``kind`` (checking that the run's inputs fit it, with the message that says what
    does)."""

    name: str  # --model NAME
    class_name: str  # its class in jaxfeed.models.registry.MODEL_CLASSES
    kinds: tuple[str, ...]  # the Preprocessing kinds whose inputs it takes
    build: Callable[..., Any]
    batchnorm: bool = False  # it takes a BatchNorm ``momentum`` (the budget may set it)

    def model_class(self) -> Any:
        """The class (imports flax)."""
        from jaxfeed.models.registry import MODEL_CLASSES  # import cost: flax, when built

        return MODEL_CLASSES[self.class_name]


def construct(cls: type, name: str, init_args: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """A built-in model with ``--model.init_args``, their names checked against its signature."""
    params = inspect.signature(cls.__init__).parameters
    for key in init_args:
        if key not in params or key in kwargs or key in ("self", "num_classes"):
            raise ConfigError(
                f"--model.init_args.{key}: {name} takes no argument {key!r} (it takes "
                f"{[p for p in params if p not in ('self', 'num_classes', *kwargs)]})"
            )
    return cls(*args, **kwargs, **init_args)


def _no_tokens(builtin: Builtin, kind: Any) -> None:
    if kind.tokens and kind.name not in builtin.kinds:
        raise ConfigError(
            f"--model {builtin.name} does not fit this run's token ids of text; use --model "
            "transformer (or your own)"
        )


def _cnn(
    builtin: Builtin, kind: Any, prep: Any, outputs: int, init_args: dict[str, Any], rngs: Any
) -> Any:
    _no_tokens(builtin, kind)
    shape = tuple(prep.input_shape)
    if kind.name not in builtin.kinds or len(shape) not in (2, 3):
        raise ConfigError(
            f"--model cnn needs images; the inputs have shape {shape}: use --model mlp"
        )
    image = shape if len(shape) == 3 else (*shape, 1)
    if image[0] < 4 or image[1] < 4:
        raise ConfigError(
            f"--model cnn needs images of at least 4x4, the data has {shape}; try --model mlp or --image-size"
        )
    cls = builtin.model_class()
    return construct(cls, builtin.name, init_args, outputs, input_shape=image, rngs=rngs)


def _audio_cnn(builtin: Builtin, kind: Any, prep: Any, outputs: int, init_args: dict[str, Any],
               rngs: Any) -> Any:  # fmt: skip
    shape = tuple(prep.input_shape)
    if kind.name not in builtin.kinds or len(shape) != 2:
        raise ConfigError(
            f"--model audio_cnn needs (frames, mel bins) spectrograms; the inputs have shape "
            f"{shape}: train it on an audio column"
        )
    cls = builtin.model_class()
    try:
        return construct(cls, builtin.name, init_args, outputs, input_shape=shape, rngs=rngs)
    except ValueError as err:
        raise ConfigError(f"--model audio_cnn: {err}") from None


def _mlp(
    builtin: Builtin, kind: Any, prep: Any, outputs: int, init_args: dict[str, Any], rngs: Any
) -> Any:
    _no_tokens(builtin, kind)
    shape = tuple(prep.input_shape)
    cls = builtin.model_class()
    return construct(cls, builtin.name, init_args, outputs, input_shape=shape, rngs=rngs)


def _linear(
    builtin: Builtin, kind: Any, prep: Any, outputs: int, init_args: dict[str, Any], rngs: Any
) -> Any:
    """``linear``: one linear layer on the inputs (images averaged over ``pool`` x ``pool``
    blocks first): logistic regression, or a linear regressor."""
    _no_tokens(builtin, kind)
    shape = tuple(prep.input_shape)
    cls = builtin.model_class()
    try:
        return construct(cls, builtin.name, init_args, outputs, input_shape=shape, rngs=rngs)
    except ValueError as err:
        raise ConfigError(f"--model linear: {err}") from None


def _ngram(
    builtin: Builtin, kind: Any, prep: Any, outputs: int, init_args: dict[str, Any], rngs: Any
) -> Any:
    """``ngram``: a bag of the text's token n-grams, hashed, under one linear layer."""
    vocab_size = getattr(prep, "vocab_size", None)
    if kind.name not in builtin.kinds or not vocab_size:
        raise ConfigError(
            f"--model ngram needs a text column classified or regressed (token ids); the data is "
            f"{prep.kind}: use --model linear"
        )
    cls = builtin.model_class()
    try:
        return construct(cls, builtin.name, init_args, vocab_size, outputs, rngs=rngs)
    except ValueError as err:
        raise ConfigError(f"--model ngram: {err}") from None


def _transformer(builtin: Builtin, kind: Any, prep: Any, outputs: int, init_args: dict[str, Any],
                 rngs: Any) -> Any:  # fmt: skip
    """``transformer`` (the classifier of a text column; on ``--task lm`` the language model) or
    ``transformer_lm`` over the run's token ids: ``prep.vocab_size``, and ``prep.max_length`` (the
    longest row the data gives) as the context unless ``--model.init_args.max_length`` sets it."""
    name = "transformer_lm" if kind.task == "lm" else builtin.name  # the language model's
    vocab_size = getattr(prep, "vocab_size", None)
    if not vocab_size:
        raise ConfigError(
            f"--model {name} needs text (token ids from a tokenizer); the data is {prep.kind} "
            f"with inputs of shape {tuple(prep.input_shape)}"
        )
    context = getattr(prep, "max_length", None)
    extra = {"max_length": int(context)} if context and "max_length" not in init_args else {}
    cls = BUILTINS[name].model_class()
    if name == "transformer":
        return construct(cls, name, init_args, vocab_size, outputs, rngs=rngs, **extra)
    return construct(cls, name, init_args, vocab_size, rngs=rngs, **extra)


_TABLE = (
    Builtin("cnn", "CNN", ("image", "array", "audio"), _cnn, batchnorm=True),
    Builtin("mlp", "MLP", ("image", "array", "table", "audio"), _mlp),
    Builtin("audio_cnn", "AudioCNN", ("image", "array", "audio"), _audio_cnn, batchnorm=True),
    Builtin("transformer", "TransformerClassifier", TOKEN_KINDS, _transformer),
    Builtin("transformer_lm", "TransformerLM", TOKEN_KINDS, _transformer),
    Builtin("linear", "LinearModel", ("image", "array", "table", "audio"), _linear),
    Builtin("ngram", "NGramModel", ("text",), _ngram),
)
BUILTINS: dict[str, Builtin] = {b.name: b for b in _TABLE}
LINEN = {"cnn": "LinenCNN"}  # --api linen: the built-ins it has, and their Linen classes


def build_builtin(spec: Any, kind: Any, prep: Any, outputs: int, config: Any) -> Any:
    """The built-in model ``spec`` names (None: ``kind``'s default) for a run of ``kind`` and
    ``prep`` with ``outputs`` outputs, seeded by ``config.seed``; the Linen CNN for ``--api
    linen``."""
    name = spec.text if spec is not None else kind.default_model
    init_args = dict(spec.init_args) if spec is not None else {}
    if config.api == "linen":
        if name not in LINEN:
            raise ConfigError("--api linen supports --model cnn only")
        from jaxfeed.models.registry import MODEL_CLASSES  # import cost: flax, when built

        return MODEL_CLASSES[LINEN[name]](outputs, **init_args)
    from flax import nnx  # import cost: flax, when a model is built

    builtin = BUILTINS[name]

    def create(rngs: nnx.Rngs) -> Any:
        return builtin.build(builtin, kind, prep, outputs, init_args, rngs)

    # one compiled program for the initialisers, not one per operation: the command's CNN was
    # built in 2.5 CPU s op by op and in 1.6 s compiled, with the same weights (every run, and
    # every eval, predict and export of one, builds its model)
    return nnx.jit(create)(nnx.Rngs(config.seed))


def with_init_args(config: Any, default_model: str, name: str, defaults: dict[str, Any]) -> Any:
    """``config`` whose model, when it is the built-in ``name`` (given, or ``default_model`` when
    ``--model`` is not), has ``defaults`` written into its init_args (those given win), so that
    ``config.json`` records the model the run built; any other model as given.

    >>> from jaxfeed.recipes.config import RunConfig
    >>> with_init_args(RunConfig(), "cnn", "cnn", {"head": "mean"}).model
    {'class_path': 'cnn', 'init_args': {'head': 'mean'}}
    >>> given = RunConfig(model={"class_path": "cnn", "init_args": {"head": "flatten"}})
    >>> with_init_args(given, "cnn", "cnn", {"head": "mean", "norm": "before"}).model["init_args"]
    {'head': 'flatten', 'norm': 'before'}
    >>> with_init_args(RunConfig(model="mlp"), "cnn", "cnn", {"head": "mean"}).model
    'mlp'
    """
    spec = config.model_spec
    if spec is not None and not spec.names_builtin(name):
        return config
    if spec is None and default_model != name:
        return config
    args = spec.init_args if spec is not None else {}
    return dataclasses.replace(
        config, model={"class_path": name, "init_args": {**defaults, **args}}
    )


__all__ = ["BUILTINS", "LINEN", "Builtin", "build_builtin", "construct", "with_init_args"]
