"""Which parameters a Trainer trains (``trainable=``) and gradient checkpointing (``remat=``).

``trainable`` is ``"all"`` (every ``nnx.Param``), ``"head"`` (the model's head: the modules it
names in ``head_modules``, else its ``head`` attribute, else every top-level module but its
``encoder``/``backbone``/``trunk``), ``"lora"`` (the low-rank adapters, ``lora_a``/``lora_b``, and
the paths a model lists in ``trainable_with_lora``: a new head) or a regular expression searched in each parameter's dotted
path (``"classifier|encoder\\.layers\\.11\\."``; a layer stack's parameters are matched by
each layer's path, ``encoder.layers.11.…``, and where only some layers match, the others keep
their values: :attr:`layer_masks` of the filter). Frozen parameters get no gradient and no
optimizer state. ``remat=True`` turns on per-layer rematerialisation in every module that
declares ``supports_remat = True`` (it then recomputes each layer's activations in the backward
pass instead of keeping them).

>>> from flax import nnx
>>> class Net(nnx.Module):
...     def __init__(self):
...         self.encoder = nnx.Linear(2, 4, rngs=nnx.Rngs(0))
...         self.classifier = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
>>> sorted(trainable_paths(Net(), "head"))
['classifier.bias', 'classifier.kernel']
>>> sorted(trainable_paths(Net(), r"\\.bias$"))
['classifier.bias', 'encoder.bias']
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

BACKBONES = ("encoder", "backbone", "trunk", "base", "model")
PRECISION_NAMES = ("float32", "bfloat16")


def resolve_precision(precision: str, dtype: Any) -> str:
    """The Trainer's compute precision from ``precision=`` and ``dtype=`` (the same setting:
    ``dtype=jnp.bfloat16`` is ``precision="bfloat16"``; parameters stay in their own dtype).

    >>> resolve_precision("float32", "bfloat16")
    'bfloat16'
    """
    if precision not in PRECISION_NAMES:
        raise ValueError(f"precision must be one of {sorted(PRECISION_NAMES)}, got {precision!r}")
    if dtype is None:
        return precision
    import jax.numpy as jnp  # noqa: PLC0415 (import cost: jax, only when dtype= is given)

    try:
        name = jnp.dtype(dtype).name
    except TypeError:
        name = repr(dtype)
    if name not in PRECISION_NAMES:
        raise ValueError(f"dtype must be float32 or bfloat16 (compute dtype), got {dtype!r}")
    if precision != "float32" and precision != name:
        raise ValueError(f"precision={precision!r} and dtype={dtype!r} disagree; give one of them")
    return name


def _param_paths(model: Any) -> list[str]:
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    return [
        ".".join(str(p) for p in path)
        for path, node in nnx.iter_graph(model)
        if isinstance(node, nnx.Param)
    ]


def head_modules(model: Any) -> tuple[str, ...]:
    """The top-level attribute names that make up ``model``'s head (see the module docstring)."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    named = getattr(model, "head_modules", None)
    if named:
        return tuple(named)
    if isinstance(getattr(model, "head", None), nnx.Module):
        return ("head",)
    tops = {p.split(".", 1)[0] for p in _param_paths(model)}
    body = tops & set(BACKBONES)
    if not body or len(tops) == len(body):
        raise ValueError(
            f"trainable='head': {type(model).__name__} does not say which modules are its head "
            f"(no 'head_modules', 'head' or backbone attribute among {sorted(tops)}); pass a "
            "regular expression over parameter paths instead"
        )
    return tuple(sorted(tops - body))


def _with_lora(model: Any) -> set[str]:
    """The paths (from ``model``) that its modules list in ``trainable_with_lora``."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    out = set()
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Module) and getattr(node, "trainable_with_lora", None):
            prefix = "".join(f"{p}." for p in path)
            out |= {prefix + p for p in node.trainable_with_lora}
    return out


def layer_paths(model: Any) -> dict[str, list[str]]:
    """Each parameter's path, and the paths of its layers' slices when it belongs to a layer
    stack (``encoder.layers.layer.query.bias`` -> ``encoder.layers.0.query.bias``, ...), as the
    checkpoint's layout names them.

    >>> from flax import nnx
    >>> from jaxfeed.models.stacked import Stack
    >>> class Net(nnx.Module):
    ...     def __init__(self):
    ...         self.layers = Stack(lambda rngs: nnx.Linear(2, 2, rngs=rngs), 2, rngs=nnx.Rngs(0))
    >>> layer_paths(Net())["layers.layer.bias"]
    ['layers.0.bias', 'layers.1.bias']
    """
    from jaxfeed.models.stacked import stacks  # noqa: PLC0415 (import cost: flax, for NNX models)

    found = {f"{where}.layer.": (where, len(stack)) for where, stack in stacks(model).items()}
    out = {}
    for path in _param_paths(model):
        prefix = next((p for p in found if path.startswith(p)), None)
        if prefix is None:
            out[path] = [path]
            continue
        where, count = found[prefix]
        out[path] = [f"{where}.{i}.{path[len(prefix) :]}" for i in range(count)]
    return out


def trainable_layers(model: Any, trainable: str) -> dict[str, np.ndarray]:
    """The layer stacks' parameters that a regular expression ``trainable`` selects in some of
    their layers only: ``{path: [layers] booleans}`` (the other layers stay as they are)."""
    if trainable in ("all", "head", "lora") or not isinstance(trainable, str):
        return {}
    pattern = re.compile(trainable)
    out = {}
    for path, names in layer_paths(model).items():
        hits = np.array([bool(pattern.search(n)) for n in names])
        if len(names) > 1 and hits.any() and not hits.all():
            out[path] = hits
    return out


def trainable_paths(model: Any, trainable: str) -> set[str]:
    """The dotted paths of the parameters ``trainable`` selects (for a regular expression: in
    any of a stack's layers); refuses a selection of none."""
    paths = _param_paths(model)
    if trainable == "all":
        return set(paths)
    if not isinstance(trainable, str):
        raise TypeError(
            f"trainable must be 'all', 'head', 'lora' or a regular expression, got {trainable!r}"
        )
    if trainable == "lora":
        extra = _with_lora(model)
        chosen = {p for p in paths if p.rsplit(".", 1)[-1] in ("lora_a", "lora_b") or p in extra}
        if not any(p.rsplit(".", 1)[-1] in ("lora_a", "lora_b") for p in chosen):
            raise ValueError(
                f"trainable='lora': {type(model).__name__} has no LoRA adapters; load it with "
                "from_pretrained(..., lora=LoRA()) or adapter="
            )
    elif trainable == "head":
        heads = head_modules(model)
        chosen = {p for p in paths if p.split(".", 1)[0] in heads}
    else:
        try:
            pattern = re.compile(trainable)
        except re.error as err:
            raise ValueError(
                f"trainable={trainable!r} is not a regular expression: {err}"
            ) from None
        chosen = {p for p, names in layer_paths(model).items()
                  if any(pattern.search(n) for n in names)}  # fmt: skip
    if not chosen:
        raise ValueError(
            f"trainable={trainable!r} selects no parameter of {type(model).__name__} "
            f"(its paths look like {', '.join(paths[:3])}, ...)"
        )
    return chosen


def trainable_filter(model: Any, trainable: str) -> Any:
    """An ``nnx`` filter of the trainable parameters (``nnx.Param`` for ``"all"``)."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    if trainable == "all":
        return nnx.Param
    chosen = frozenset(trainable_paths(model, trainable))

    def selected(path: tuple, value: Any) -> bool:
        return isinstance(value, nnx.Param) and ".".join(str(p) for p in path) in chosen

    selected.layer_masks = trainable_layers(model, trainable)  # type: ignore[attr-defined]
    return selected


def refuse_integer_params(model: Any) -> None:
    """Integer (quantized, frozen) weights cannot take gradients: full fine-tuning is refused."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Param):
            dtype = getattr(node.get_value(), "dtype", None)
            if dtype is not None and not (
                np.issubdtype(dtype, np.floating) or str(dtype) == "bfloat16"
            ):
                raise ValueError(
                    f"trainable='all': parameter {'.'.join(str(p) for p in path)} is {dtype} "
                    "(quantized, frozen); train its adapters with trainable='lora'"
                )


def enable_remat(model: Any, remat: bool | str = True) -> int:
    """Switch on rematerialisation (``True``/``"full"``, ``"dots"`` or ``"attention"``, see
    :func:`jaxfeed.models.stacked.remat_policy`) in every module of ``model`` declaring
    ``supports_remat``; the number of such modules (a model with none is refused)."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    from jaxfeed.models.stacked import remat_policy  # noqa: PLC0415 (import cost: as flax)

    remat_policy(remat)  # a name it does not know is refused here, not at the first step
    count = 0
    for _, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Module) and getattr(type(node), "supports_remat", False):
            node.remat = remat
            count += 1
    if not count:
        raise ValueError(
            f"remat=True: {type(model).__name__} has no module that supports gradient "
            "checkpointing (a layer stack with supports_remat = True, as the models of "
            "jaxfeed.models.from_pretrained have)"
        )
    return count
