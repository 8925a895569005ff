"""jaxfeed's built-in models as ``--model`` names them: one table (:data:`BUILTINS`) of the
command name, the class it builds (a :data:`jaxfeed.models.registry.MODEL_CLASSES` name), the
input kinds it accepts and its constructor. ``recipes/config`` reads the names from here (no JAX
is imported: the constructors import the models when they run).

>>> sorted(BUILTINS)
['audio_cnn', 'cnn', 'mlp', 'transformer', 'transformer_lm']
>>> BUILTINS["cnn"].class_name, BUILTINS["transformer"].kinds
('CNN', ('text', 'lm'))
>>> BUILTINS["cnn"].defaults
{'widths': [32, 64, 128], 'head': 'mean', 'norm': 'before'}
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxfeed.recipes.config.groups import ConfigError

TOKEN_KINDS = ("text", "lm")  # token ids: the transformers' inputs
# The command's ``cnn``: three blocks (32, 64, 128), the last averaged over its positions, and
# BatchNorm before the ReLU. On 44 images of squares against discs of random colours and places
# (issue 54) the article's model (the class's defaults: two blocks, flattened, BatchNorm after
# the ReLU) learned the places and the colours; see docs/benchmarks (What the defaults learn).
CNN_DEFAULTS: dict[str, Any] = {"widths": [32, 64, 128], "head": "mean", "norm": "before"}


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
    defaults: dict[str, Any] | None = None  # init_args a new run records unless given

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
    Builtin("cnn", "CNN", ("image", "array", "audio"), _cnn, batchnorm=True, defaults=CNN_DEFAULTS),
    Builtin("mlp", "MLP", ("image", "array", "table", "audio"), _mlp),
    Builtin("audio_cnn", "AudioCNN", ("image", "array", "audio"), _audio_cnn, batchnorm=True),
    Builtin("transformer", "TransformerClassifier", TOKEN_KINDS, _transformer),
    Builtin("transformer_lm", "TransformerLM", TOKEN_KINDS, _transformer),
)
BUILTINS: dict[str, Builtin] = {b.name: b for b in _TABLE}
LINEN = {"cnn": "LinenCNN"}  # --api linen: the built-ins it has, and their Linen classes


def with_defaults(config: Any, default_model: str) -> Any:
    """``config`` of a new run with its built-in model's :attr:`Builtin.defaults` written into
    ``--model.init_args`` (those given win), so that ``config.json`` records the model it built
    and a run recorded before a default changed rebuilds as it was trained; other models as given.

    >>> from jaxfeed.recipes.config import RunConfig
    >>> with_defaults(RunConfig(), "cnn").model
    {'class_path': 'cnn', 'init_args': {'widths': [32, 64, 128], 'head': 'mean', 'norm': 'before'}}
    >>> with_defaults(RunConfig(model={"class_path": "cnn", "init_args": {"head": "flatten"}}),
    ...               "mlp").model["init_args"]["head"]
    'flatten'
    >>> with_defaults(RunConfig(), "mlp").model is None
    True
    """
    spec = config.model_spec
    name, args = (spec.text, spec.init_args) if spec is not None else (default_model, {})
    builtin = BUILTINS.get(name)
    if builtin is None or not builtin.defaults or (spec is not None and spec.source != "builtin"):
        return config
    model = {"class_path": name, "init_args": {**builtin.defaults, **args}}
    return dataclasses.replace(config, model=model)


__all__ = ["BUILTINS", "CNN_DEFAULTS", "LINEN", "Builtin", "construct", "with_defaults"]
