"""Export any Flax model for serving: weights as safetensors, JSON metadata, and the inference
function serialised with ``jax.export`` (StableHLO) with a symbolic batch dimension.

Long because writing, verifying and loading one folder format share its constants and checks;
the checks of what an export is called with live in :mod:`jaxfeed.serve.checks`.

An export is a folder of three files:

* ``model.safetensors``: every weight (parameters, BatchNorm statistics, any other variable)
  under a flat name such as ``conv1.kernel`` or ``params.Dense_0.bias``;
* ``config.json``: format and version, the model's class (and constructor arguments for
  jaxfeed's built-in models, so the CLI can rebuild them by name), the input signature, and the
  dtype, shape and SHA-256 of every weight and of the function file; plus the caller's ``extra``
  and, when given, the declared preprocessing from raw inputs (:mod:`jaxfeed.serve.spec`: data,
  never code);
* ``model.stablehlo``: the model in eval mode as ``f(weights, *inputs)``, serialised by
  ``jax.export``; the batch dimension is symbolic, so one export serves any batch size (and so
  is the sequence length of models that declare ``symbolic_length = True``, as
  :class:`~jaxfeed.models.TransformerClassifier` and :class:`~jaxfeed.models.TransformerLM` do).

A text export also carries its ``tokenizer.json`` (data, checksum recorded), applied on load.

Loading runs the StableHLO with the verified weights: no pickle, and nothing named inside the
files is ever imported or executed. :func:`load_exported` with ``like=model`` puts the weights
into a model you built instead.

>>> import tempfile
>>> import numpy as np
>>> from flax import nnx
>>> from jaxfeed import export, load_exported
>>> model = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
>>> folder = export(model, tempfile.mkdtemp() + "/linear", example_input=np.zeros((1, 4), np.float32))
>>> served = load_exported(folder)
>>> served(np.ones((3, 4), np.float32)).shape, served(np.ones((7, 4), np.float32)).shape
((3, 2), (7, 2))
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.export  # a submodule: older JAX releases do not import it with jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal
from safetensors import SafetensorError
from safetensors.numpy import load, save

from jaxfeed._base.files import (
    WRITER_LOCK,
    LockedTemporary,
    remove_abandoned,
    remove_set_aside,
    swap_into_place,
)
from jaxfeed.serve import checks
from jaxfeed.serve.spec import TEXT_SPEC_KINDS, TOKENIZER_FILE, ServingSpec, SpecError
from jaxfeed.train import ids
from jaxfeed.train.checkpoint import CheckpointError
from jaxfeed.train.cores import CallConvention

FORMAT = "jaxfeed-export"
VERSION = 2
WEIGHTS, CONFIG, FUNCTION = "model.safetensors", "config.json", "model.stablehlo"
FILES = (CONFIG, WEIGHTS, FUNCTION)
BATCH = "batch"  # the symbolic batch dimension
LENGTH = "length"  # the symbolic sequence length, for models with `symbolic_length = True`
DERIVED = ("attention_mask", "segment_ids", "positions")  # a token model's inputs a call may omit


class ExportError(CheckpointError):
    """An export cannot be written, or a folder is not a valid, intact export."""


# ---------------------------------------------------------------------------------- helpers
def _name(path: tuple) -> str:
    return ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def _flatten(tree: Any) -> tuple[list[str], list[Any], Any]:
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [_name(p) for p, _ in leaves], [x for _, x in leaves], treedef


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _spec(value: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(value.shape), value.dtype)


def _symbolic(specs: Any, length: bool = False, limit: int | None = None) -> Any:
    """The same shapes with a symbolic leading (batch) dimension shared by every input, and with
    ``length`` a symbolic second (sequence) dimension shared by every input that has one (at
    most ``limit`` when given: the export refuses longer sequences itself)."""
    bound = (f"{LENGTH} <= {int(limit)}",) if length and limit else ()
    batch, seq = jax.export.symbolic_shape(f"{BATCH}, {LENGTH}", constraints=bound)

    def one(spec: Any) -> jax.ShapeDtypeStruct:
        if not spec.shape:
            raise ValueError("export needs inputs with a batch dimension, got a scalar")
        rest = spec.shape[1:]
        if length and rest:
            rest = (seq, *rest[1:])
        return jax.ShapeDtypeStruct((batch, *rest), spec.dtype)

    return jax.tree.map(one, specs)


def _input_specs(example_input: Any) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of shape specs from an array, a tuple (positional) or a dict (keywords)."""
    if isinstance(example_input, Mapping):
        return (), {str(k): _spec(jnp.asarray(v)) for k, v in example_input.items()}
    if isinstance(example_input, tuple | list):
        return tuple(_spec(jnp.asarray(v)) for v in example_input), {}
    return (_spec(jnp.asarray(example_input)),), {}


def _describe(specs: tuple[tuple, dict], counts: tuple[list, dict] | None = None,
              limit: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each input's argument, dtype and shape; symbolic dimensions (batch, length) as None; the
    number of ids of an input the model embeds (``token_ids``) and the longest sequence of an
    input with a symbolic length (``max_length``), which :meth:`ExportedModel.call` checks."""
    args, kwargs = specs
    given_args, given_kwargs = counts if counts is not None else ([None] * len(args), {})
    named = [(None, s, c) for s, c in zip(args, given_args, strict=True)]
    named += [(k, s, given_kwargs.get(k)) for k, s in kwargs.items()]
    out = []
    for name, s, count in named:
        shape = [None, *(d if isinstance(d, int) else None for d in s.shape[1:])]
        entry: dict[str, Any] = {"argument": name, "shape": shape, "dtype": str(s.dtype)}
        if count:
            entry["token_ids"] = int(count)
        if limit and None in shape[1:]:
            entry["max_length"] = int(limit)
        out.append(entry)
    return out


def _id_counts(model: Any, raw: _RawInputs | None, specs: tuple[tuple, dict]) -> tuple[list, dict]:
    """The number of ids of each export input that reaches an embedding of ``model`` unchanged
    (None for the others): by the model's own arguments, or through a compiled ``preprocess``
    that passes the column on as it is."""
    ranges = ids.token_id_ranges(model)
    params = ids.call_parameters(model)
    args, kwargs = specs

    def of_argument(key: int | str) -> int | None:
        name = params[key] if isinstance(key, int) and key < len(params) else key
        return ranges.get(name) if isinstance(name, str) else None

    if raw is None:
        return [of_argument(i) for i in range(len(args))], {k: of_argument(k) for k in kwargs}
    by_column = {c: of_argument(a) for a, c in raw.passthrough.items()}
    if raw.same_arguments:
        return (
            [by_column.get(c) for c in raw.inputs.positional[: len(args)]],
            {k: by_column.get(raw.inputs.keywords.get(k, k)) for k in kwargs},
        )
    return [None] * len(args), {k: by_column.get(k) for k in kwargs}


# ---------------------------------------------------------------------------------- export
def export(
    model: Any,
    path: str | os.PathLike,
    example_input: Any = None,
    *,
    variables: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    preprocessing: ServingSpec | Mapping[str, Any] | None = None,
    compile_preprocess: bool = True,
    tokenizer: Any = None,
) -> Path:
    """Write ``model`` in eval mode to the folder ``path`` for :func:`load_exported`.

    ``model`` is any NNX module, a Linen module with its ``variables``, or a
    :class:`~jaxfeed.Trainer` (its model, variables and the inputs it trained on).
    ``example_input`` is one batch of the model's input as ``__call__`` takes it (an array, a
    tuple of arrays for positional arguments, or a dict for keyword arguments); only shapes and
    dtypes count, and the batch dimension becomes symbolic. Built-in models and trainers know
    their input and need none. ``config`` overrides the ``{"class", "kwargs"}`` record;
    ``extra`` (JSON) is stored next to it, e.g. class names. ``preprocessing`` (a
    :class:`~jaxfeed.serve.spec.ServingSpec` or its JSON) is the declared preprocessing from raw
    inputs: with it, the loaded export takes raw images or table rows and returns predictions.
    A text spec (``kind="text"`` or ``"lm"``) needs ``tokenizer`` (a ``tokenizers.Tokenizer``
    or its JSON), written into the folder as ``tokenizer.json`` (data, never code): the loaded
    export takes strings, or a table with the text column.

    A Trainer's ``preprocess`` (it runs inside the Trainer's compiled steps, so it is
    jax-traceable) is compiled into the StableHLO function together with the model: the export
    takes the raw batch columns the Trainer was given (the model's own arguments when
    ``preprocess`` keeps the ``inputs=`` columns, else keyword arguments named by the raw
    columns it reads) and returns what ``trainer.predict`` returns; ``config.json`` records
    ``"compiled_preprocess"``. For a Trainer, ``example_input`` is such a raw batch. A
    ``preprocess`` that ``jax.export`` cannot serialise (a host callback) is refused, saying so:
    declare ``preprocessing=`` instead, or pass ``compile_preprocess=False`` to export the model
    alone (on preprocessed inputs). A declared ``preprocessing=`` replaces the Trainer's
    ``preprocess``, so it must describe all of it.

    The folder is written beside ``path`` and renamed into place: an earlier export at ``path``
    is replaced whole, and a path holding anything else is refused (``FileExistsError``).

    >>> import tempfile
    >>> import numpy as np
    >>> from flax import nnx
    >>> from jaxfeed import export, load_exported
    >>> model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    >>> folder = export(model, tempfile.mkdtemp() + "/linear", np.zeros((1, 3), np.float32))
    >>> load_exported(folder)(np.ones((5, 3), np.float32)).shape     # any batch size
    (5, 2)
    """
    model, variables, specs, raw = _unwrap(
        model, variables, example_input, compile_preprocess, preprocessing
    )
    weights, forward, api = _forward(model, variables)
    from jaxfeed.models.registry import model_config  # noqa: PLC0415 (import cost: flax)

    record = dict(config) if config is not None else model_config(model)
    specs = _default_specs(model, record, specs)
    names, tensors, treedef = _host_tensors(model, weights)

    def serve(flat: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        tree = jax.tree_util.tree_unflatten(treedef, [flat[n] for n in names])
        if raw is not None:
            args, kwargs = raw.model_inputs(args, kwargs)
        return forward(tree, *args, **kwargs)

    function, symbolic, limit = _serialize(model, serve, tensors, specs)
    if preprocessing is not None and not isinstance(preprocessing, ServingSpec):
        preprocessing = ServingSpec.from_dict(preprocessing, "preprocessing=")

    meta = {
        "format": FORMAT,
        "version": VERSION,
        "model": {**record, "api": api},
        "inputs": _describe(symbolic, _id_counts(model, raw, specs), limit),
    }
    files = _files(tensors, function, meta, extra, preprocessing, tokenizer, raw)
    return _write_folder(Path(path), files)


def _unwrap(
    model: Any,
    variables: Mapping[str, Any] | None,
    example_input: Any,
    compile_preprocess: bool,
    preprocessing: Any,
) -> tuple[Any, Mapping[str, Any] | None, tuple[tuple, dict] | None, _RawInputs | None]:
    """The model, its variables, its input specs (None: not known yet) and the compiled
    preprocess (None: none) of what :func:`export` was given (a model or a Trainer)."""
    specs, raw = None, None
    if hasattr(model, "core") and hasattr(model, "placement"):  # a Trainer
        trainer = model
        model = trainer.model
        if trainer.core.api == "linen" and variables is None:
            variables = trainer.variables
        specs = getattr(trainer, "input_spec", None)
        if compile_preprocess and preprocessing is None:
            raw = _RawInputs.of_trainer(trainer, example_input)
            raw.check_exportable(type(model).__name__)
            specs, example_input = raw.specs, None
    if example_input is not None:
        specs = _input_specs(example_input)
    return model, variables, specs, raw


def _forward(model: Any, variables: Mapping[str, Any] | None) -> tuple[Any, Any, str]:
    """The weights of ``model``, its eval-mode ``forward(weights, *args, **kwargs)`` and its API
    (``"linen"`` or ``"nnx"``)."""
    from flax import linen, nnx  # noqa: PLC0415 (import cost: flax, at the first export)

    convention = CallConvention.inspect(type(model).__call__)
    if isinstance(model, linen.Module):
        if variables is None:
            raise ValueError(
                f"export of a {type(model).__name__} (not an NNX module) needs variables= (its params "
                "and other collections), or pass the Trainer"
            )
        weights = {k: v for k, v in variables.items() if v}

        def forward(weights: Any, *args: Any, **kwargs: Any) -> Any:
            return model.apply(weights, *args, **kwargs, **convention.kwargs(False))

        return weights, forward, "linen"
    if isinstance(model, nnx.Module):
        if variables is not None:
            raise ValueError("variables= is for Linen modules; an NNX module holds its own")
        served = nnx.clone(model)
        served.eval()
        graphdef, state, rest = nnx.split(served, nnx.Not(nnx.RngState), ...)
        weights = nnx.to_pure_dict(state)

        def forward(weights: Any, *args: Any, **kwargs: Any) -> Any:
            m = nnx.merge(graphdef, nnx.State(weights), rest, copy=True)
            return m(*args, **kwargs, **convention.kwargs(False))

        return weights, forward, "nnx"
    raise TypeError(
        f"export takes an NNX module, a Linen module with variables=, or a Trainer; got "
        f"{type(model).__name__}"
    )


def _default_specs(
    model: Any, record: dict[str, Any], specs: tuple[tuple, dict] | None
) -> tuple[tuple, dict]:
    """``specs``, else a built-in model's own example input, else float32 of its
    ``input_shape``; refused when none is known."""
    if specs is None and callable(getattr(model, "example_input", None)):
        specs = _input_specs(model.example_input())  # built-in sequence models
    if specs is None:
        kwargs = record.get("kwargs") or {}
        if "input_shape" not in kwargs:
            raise ValueError(
                f"export of a {type(model).__name__} needs example_input= (one batch of its input, "
                "e.g. x[:1]): the exported function is traced on its shape and dtype"
            )
        specs = ((jax.ShapeDtypeStruct((1, *kwargs["input_shape"]), jnp.float32),), {})
    return specs


def _host_tensors(model: Any, weights: Any) -> tuple[list[str], dict[str, np.ndarray], Any]:
    """The flat names of ``weights``, their host arrays by name, and the tree's structure."""
    names, arrays, treedef = _flatten(weights)
    host = [np.ascontiguousarray(np.asarray(jax.device_get(a))) for a in arrays]
    tensors = dict(zip(names, host, strict=True))
    if len(tensors) != len(names):
        raise ValueError(f"two weights of {type(model).__name__} flatten to the same name")
    return names, tensors, treedef


def _serialize(
    model: Any, serve: Any, tensors: dict[str, np.ndarray], specs: tuple[tuple, dict]
) -> tuple[bytes, tuple[tuple, dict], int | None]:
    """``serve`` exported with a symbolic batch (and length) dimension: the serialised function,
    its symbolic ``(args, kwargs)`` and the model's input length limit (None: none)."""
    length = bool(getattr(model, "symbolic_length", False))
    limit = getattr(model, "max_input_length", None)
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
    args, kwargs = _symbolic(specs, length, limit)
    try:
        exported = jax.export.export(jax.jit(serve))(
            {n: _spec(a) for n, a in tensors.items()}, *args, **kwargs
        )
    except Exception as err:
        raise ValueError(
            f"cannot export {type(model).__name__} with a symbolic batch "
            f"{'and length ' if length else ''}dimension: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err
    return bytes(exported.serialize()), (args, kwargs), limit


def _files(
    tensors: dict[str, np.ndarray],
    function: bytes,
    meta: dict[str, Any],
    extra: Mapping[str, Any] | None,
    preprocessing: ServingSpec | None,
    tokenizer: Any,
    raw: _RawInputs | None,
) -> dict[str, bytes]:
    """The export folder's files: weights, function, ``config.json`` (``meta`` completed with
    the checksums, ``extra``, the declared and compiled preprocessing) and any tokenizer."""
    blob = save(tensors, metadata={"format": FORMAT})
    meta = {
        **meta,
        "tensors": {
            n: {"dtype": str(a.dtype), "shape": list(a.shape), "sha256": _digest(a)}
            for n, a in tensors.items()
        },
        "function": {"file": FUNCTION, "sha256": hashlib.sha256(function).hexdigest()},
        **dict(extra or {}),
    }
    files = {WEIGHTS: blob, FUNCTION: function}
    if preprocessing is not None:
        meta["preprocessing"] = preprocessing.to_dict()
        if preprocessing.kind in TEXT_SPEC_KINDS:
            files[TOKENIZER_FILE] = _tokenizer_bytes(tokenizer)
            meta["tokenizer"] = {
                "file": TOKENIZER_FILE,
                "sha256": hashlib.sha256(files[TOKENIZER_FILE]).hexdigest(),
            }
    if raw is not None:
        meta["compiled_preprocess"] = raw.describe()
    text = json.dumps(meta, indent=2)
    return {**files, CONFIG: text.encode()}


def _tokenizer_bytes(tokenizer: Any) -> bytes:
    """The ``tokenizer.json`` of a text export: a ``tokenizers.Tokenizer`` or its JSON."""
    if tokenizer is None:
        raise ValueError("a text preprocessing= needs tokenizer= (its tokenizer.json)")
    data = tokenizer if isinstance(tokenizer, str | bytes) else tokenizer.to_str()
    return data.encode() if isinstance(data, str) else data


class _RawInputs:
    """A Trainer's ``preprocess`` compiled in front of its model: the raw batch columns the export
    takes (``specs``: ``(args, kwargs)`` of shapes) and how they become the model's inputs.

    The columns are those the model's inputs depend on after ``preprocess`` (found by walking its
    jaxpr); other batch columns that ``preprocess`` touches (a label it casts) are zeros."""

    def __init__(self, trainer: Any, batch: dict[str, jax.ShapeDtypeStruct]) -> None:
        step = trainer.core.spec
        self.preprocess, self.inputs, self.batch = step.preprocess, step.inputs, batch
        try:
            jaxpr = jax.make_jaxpr(lambda b: self.inputs.call(self.preprocess(b)))(batch)
        except Exception as err:
            raise ValueError(
                f"the Trainer's preprocess cannot be traced on its raw batch columns "
                f"{sorted(batch)} for the export ({type(err).__name__}: {err}); pass "
                "example_input= (a raw batch), declare preprocessing=, or pass "
                "compile_preprocess=False"
            ) from err
        used = _inputs_used(jaxpr.jaxpr)  # a dict flattens in sorted key order
        self.passthrough = _passed_on(jaxpr.jaxpr, sorted(batch), self.inputs)
        read = [k for k, u in zip(sorted(batch), used, strict=True) if u]
        columns = self.inputs.columns
        self.same_arguments = set(read) <= set(columns) and set(columns) <= set(batch)
        if self.same_arguments:  # the model's own arguments, raw
            self.specs: tuple[tuple, dict] = (
                tuple(batch[c] for c in self.inputs.positional),
                {k: batch[c] for k, c in self.inputs.keywords.items()},
            )
            self.fed = list(columns)
        else:  # keyword arguments named by the raw columns
            self.specs = ((), {c: batch[c] for c in read})
            self.fed = read
        if not self.fed:
            raise ValueError(
                "after the Trainer's preprocess the model's inputs depend on no batch column: "
                "the export would take nothing"
            )

    @classmethod
    def of_trainer(cls, trainer: Any, example_input: Any = None) -> _RawInputs:
        """The raw inputs of a Trainer: ``example_input`` (a raw batch laid out as ``inputs=``),
        else the columns of the first batch it saw, else (a built-in model) float32 inputs of
        its ``input_shape``."""
        inputs = trainer.core.spec.inputs
        if example_input is not None:
            example = inputs.example(example_input)
            return cls(trainer, {c: _spec(v) for c, v in example.items()})
        batch = getattr(trainer, "batch_spec", None)
        if batch is None:
            from jaxfeed.models.registry import model_config  # noqa: PLC0415 (import cost: flax)

            shape = (model_config(trainer.model).get("kwargs") or {}).get("input_shape")
            if shape is None or len(inputs.columns) != 1:
                raise ValueError(
                    "export of a Trainer that has seen no batch needs example_input= (one raw "
                    "batch of its inputs= columns, before preprocess)"
                )
            batch = {inputs.columns[0]: jax.ShapeDtypeStruct((1, *shape), jnp.float32)}
        return cls(trainer, dict(batch))

    def model_inputs(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        """The model's ``(args, kwargs)`` from the export's raw arguments (traced)."""
        if self.same_arguments:
            raw = dict(zip(self.inputs.positional, args, strict=True))
            raw.update({self.inputs.keywords[k]: v for k, v in kwargs.items()})
        else:
            raw = dict(kwargs)
        n = next(iter(raw.values())).shape[0]
        for key, spec in self.batch.items():  # columns the model's inputs do not depend on
            if key not in raw:
                raw[key] = jnp.zeros((n, *spec.shape[1:]), spec.dtype)
        return self.inputs.call(self.preprocess(raw))

    def check_exportable(self, model: str) -> None:
        """Refuse, naming it, a ``preprocess`` that ``jax.export`` cannot serialise (the
        preprocess alone is exported first, so a failure is not blamed on the model)."""
        args, kwargs = _symbolic(self.specs)
        try:
            jax.export.export(jax.jit(self.model_inputs))(args, kwargs)
        except Exception as err:
            first = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            raise ValueError(
                f"the Trainer's preprocess cannot be compiled into the export of {model} "
                f"({first}): jax.export cannot serialise it (e.g. a host callback); declare it "
                "with preprocessing= (a jaxfeed.serve.spec.ServingSpec), or pass "
                "compile_preprocess=False to export the model alone (it then takes "
                "preprocessed inputs)"
            ) from err

    def describe(self) -> dict[str, Any]:
        """The record in ``config.json``: compiled into the function, and the raw columns read."""
        return {"compiled": True, "columns": self.fed}


def _inputs_used(jaxpr: Any, wanted: list[bool] | None = None) -> list[bool]:
    """Which inputs of ``jaxpr`` its (``wanted``) outputs depend on: a backward walk over its
    equations, into the jaxpr of a nested ``jit`` (a jitted ``preprocess``)."""
    wanted = [True] * len(jaxpr.outvars) if wanted is None else wanted
    live = {v for v, w in zip(jaxpr.outvars, wanted, strict=True) if w and not _literal(v)}
    for eqn in reversed(jaxpr.eqns):
        outs = [v in live for v in eqn.outvars]
        if not any(outs):
            continue
        inner = eqn.params.get("jaxpr") if eqn.primitive.name in ("jit", "pjit") else None
        inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
        if inner is not None and len(inner.invars) == len(eqn.invars):
            used = _inputs_used(inner, outs)
        else:
            used = [True] * len(eqn.invars)
        live.update(v for v, u in zip(eqn.invars, used, strict=True) if u and not _literal(v))
    return [v in live for v in jaxpr.invars]


def _literal(var: Any) -> bool:
    return isinstance(var, Literal)


def _passed_on(jaxpr: Any, columns: list[str], inputs: Any) -> dict[Any, str]:
    """``{model argument: raw column}`` for the model's arguments that are a raw batch column
    as it is (or only cast): positional arguments by index, keyword arguments by name."""
    keys: list[Any] = list(range(len(inputs.positional))) + sorted(inputs.keywords)
    source = dict(zip(jaxpr.invars, columns, strict=True))
    casts = {
        eqn.outvars[0]: eqn.invars[0]
        for eqn in jaxpr.eqns
        if eqn.primitive.name == "convert_element_type" and not _literal(eqn.invars[0])
    }
    out = {}
    for key, var in zip(keys, jaxpr.outvars, strict=False):
        if _literal(var):
            continue
        var = casts.get(var, var)
        if var in source:
            out[key] = source[var]
    return out


def _is_export(path: Path) -> bool:
    """An earlier export (of this or the first version): only export files, a config that says so
    (and perhaps the lock file of an export killed just after its rename)."""
    names = {p.name for p in path.iterdir()} - {WRITER_LOCK}
    if not names:
        return True
    if not names <= {*FILES, TOKENIZER_FILE} or CONFIG not in names:
        return False
    try:
        config = json.loads((path / CONFIG).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and (
        config.get("format") == FORMAT or isinstance(config.get("model"), dict)
    )


def _write_folder(path: Path, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` into a new folder beside ``path`` and rename it into place (permissions
    follow the umask). An earlier export at ``path`` is replaced; anything else is refused.

    The folder is a :class:`LockedTemporary` (locked by this process until renamed or removed):
    what an export killed midway left beside ``path`` (its temporary folder, or the earlier export
    it had set aside) is removed by the next export to ``path``, and only once its writer is
    provably dead, never another live export's."""
    if path.exists() and not (path.is_dir() and _is_export(path)):
        raise FileExistsError(
            f"{path} exists and is not a jaxfeed export: refusing to overwrite it "
            "(export into a new or empty folder)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path.parent, f".{path.name}.tmp-")
    with LockedTemporary(path, "export being written") as writing:  # mkdir: honours the umask
        for name, data in files.items():
            with open(writing.path / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        writing.publish(move=swap_into_place)
    remove_set_aside(path)
    return path


# ---------------------------------------------------------------------------------- loading
class ExportedModel:
    """A loaded export: call it on a batch of any size (eval mode, no Python model class).

    ``config`` is the export's ``config.json`` (with the caller's ``extra``, e.g. ``labels``);
    ``weights`` the verified arrays by name. An export with a declared ``preprocessing``
    (``spec``) is called on raw inputs (images, or table rows as a dict of columns) and returns
    class probabilities or regression values in the label's units, as ``jaxfeed predict`` prints
    them; :meth:`predict` gives labels and scores; :meth:`call` runs the bare model function.
    """

    def __init__(self, path: Path, config: dict[str, Any], weights: dict[str, jax.Array],
                 exported: Any, spec: ServingSpec | None = None,
                 tokenizer: Any = None) -> None:  # fmt: skip
        self.path, self.config, self.weights, self._exported = path, config, weights, exported
        self.inputs = config.get("inputs", [])
        self.spec = spec
        self.tokenizer = tokenizer  # a text export's tokenizer.json, loaded

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.spec is None or (self.spec.takes_tokens and kwargs and not args):
            return self.call(*args, **kwargs)  # model inputs (a text export: token ids by name)
        return self.spec.outputs(self.logits(*args, **kwargs))

    def logits(self, raw: Any) -> np.ndarray:
        """The model's outputs for raw inputs (the declared preprocessing applied first)."""
        if self.spec is None:
            raise TypeError(f"{self.path} declares no preprocessing: call it on model inputs")
        if self.spec.takes_tokens:  # texts (tokenized here) or token ids
            inputs = self.spec.token_inputs(self.tokenizer, raw)
            if not len(next(iter(inputs.values()))):
                return np.zeros((0, max(len(self.spec.labels), 1)), np.float32)
            return np.asarray(self.call(**inputs))
        x = self.spec.model_inputs(raw)
        if len(x) == 0:
            return np.zeros((0, max(len(self.spec.labels), 1)), np.float32)
        return np.asarray(self.call(x))

    def predict(self, *args: Any, **kwargs: Any) -> tuple[list[Any], np.ndarray | None]:
        """``(labels, scores)`` for raw inputs: the class names and their probabilities, or the
        regression values (label units) and ``None``. An export of a Trainer whose
        ``preprocess`` is compiled in, with class names in ``extra={"labels": [...]}``, gives
        the names and the softmax probabilities of its outputs."""
        if self.spec is None:
            labels = self.config.get("labels")
            if "compiled_preprocess" not in self.config or not isinstance(labels, list):
                raise TypeError(
                    f"{self.path} declares no preprocessing (export it with preprocessing=, or "
                    'export a Trainer with extra={"labels": [...]}): call it on model inputs'
                )
            spec = ServingSpec(kind="array", input_shape=(1,), labels=tuple(map(str, labels)))
            return spec.predictions(spec.outputs(self.call(*args, **kwargs)))
        return self.spec.predictions(self(*args, **kwargs))

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """The exported function on model inputs (after any preprocessing).

        Every input is checked first, and refused naming it: numbers of its dtype's kind (token
        ids are never strings), its shape, one batch size and one sequence length across the
        inputs, no zero-length sequences, at most the model's ``max_length`` tokens (learned
        positions) and token ids inside the model's vocabulary. An empty batch gives an empty
        result. A token model's ``attention_mask``, ``segment_ids`` and ``positions`` left out
        are those of plain prompts (:meth:`token_defaults`)."""
        positional = [i for i in self.inputs if i["argument"] is None]
        keywords = {i["argument"]: i for i in self.inputs if i["argument"] is not None}
        kwargs = self.token_defaults(kwargs, keywords)
        if len(args) != len(positional) or set(kwargs) != set(keywords):
            raise TypeError(
                f"the exported model takes {len(positional)} positional input(s) and the keyword "
                f"input(s) {sorted(keywords)}; got {len(args)} and {sorted(kwargs)}"
            )
        named = [(i, a, w) for i, (a, w) in enumerate(zip(args, positional, strict=True))]
        named += [(k, v, keywords[k]) for k, v in kwargs.items()]
        checked = [(n, checks.check_input(self.path, n, v, w), w) for n, v, w in named]
        checks.check_together(self.path, self.config, checked)
        args = tuple(v for name, v, _ in checked if isinstance(name, int))
        kwargs = {name: v for name, v, _ in checked if isinstance(name, str)}
        if checked and checked[0][1].shape[0] == 0:  # an empty batch: the outputs of none
            ones = {n: np.zeros((1, *v.shape[1:]), v.dtype) for n, v, _ in checked}
            out = self._exported.call(
                self.weights, *(ones[i] for i in range(len(args))),
                **{k: ones[k] for k in kwargs},
            )  # fmt: skip
            return jax.tree.map(lambda x: x[:0], out)
        return self._exported.call(self.weights, *args, **kwargs)

    def token_defaults(self, kwargs: dict[str, Any], keywords: Mapping[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the token inputs they leave out, as a batch of plain prompts has them:
        every token real (or the given ``attention_mask``), one segment per row, positions
        counting its real tokens from 0 (:func:`~jaxfeed.serve.spec.token_batch`'s); only when
        the token ids are given and nothing else is missing. Ids or a mask of the wrong shape
        are refused naming them."""
        columns = self._token_columns(keywords)
        missing = [a for a in keywords if a not in kwargs]
        ids = next((a for a, c in columns.items() if c == "input_ids"), None)
        if not missing or ids not in kwargs or any(columns.get(a) not in DERIVED for a in missing):
            return kwargs
        shape = checks.check_input(self.path, ids, kwargs[ids], keywords[ids]).shape
        mask = np.ones(shape, np.int32)
        given = next((a for a, c in columns.items() if c == "attention_mask" and a in kwargs), None)
        if given is not None:
            mask = np.asarray(checks.check_input(self.path, given, kwargs[given], keywords[given]))
            if mask.shape != shape:
                raise ValueError(
                    f"input {given} of {self.path} has shape {mask.shape}; input {ids} "
                    f"{tuple(shape)}: they must be the same"
                )
        derived = {
            "attention_mask": mask,
            "segment_ids": mask.astype(np.int32),
            "positions": np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32),
        }
        return {**kwargs, **{a: derived[columns[a]] for a in missing}}

    def _token_columns(self, keywords: Mapping[str, Any]) -> dict[str, str]:
        """``{argument: column}`` of a token model's keyword inputs: the declared text inputs
        (a run's export), else the arguments named as the columns."""
        declared = (self.spec.text or {}).get("inputs") if self.spec is not None else None
        declared = declared or (self.config.get("text") or {}).get("inputs") or {}
        return {a: str(declared.get(a, a)) for a in keywords}

    def __repr__(self) -> str:
        return f"ExportedModel({str(self.path)!r}, {self.config['model'].get('class')})"


def _fail(path: Path, message: str) -> ExportError:
    return ExportError(f"{path}: {message}")


def _read_config(path: Path) -> dict[str, Any]:
    file = path / CONFIG
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _fail(file, f"cannot read the export config: {str(err).splitlines()[0]}") from None
    problems = []
    if not isinstance(config, dict):
        problems.append("not a JSON object")
    else:
        model = config.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("class"), str):
            problems.append("'model' must be an object with a 'class' name")
        tensors = config.get("tensors")
        version = config.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool):
            problems.append(f"'version' must be an integer, got {str(version)[:40]!r}")
            version = 2  # check the rest as the current version
        if version >= 2:
            if config.get("format") != FORMAT:
                problems.append(f"'format' must be {FORMAT!r}")
            if not isinstance(tensors, dict) or not all(
                isinstance(t, dict) and isinstance(t.get("dtype"), str)
                and isinstance(t.get("shape"), list) and isinstance(t.get("sha256"), str)
                for t in tensors.values()
            ):  # fmt: skip
                problems.append("'tensors' must map names to {dtype, shape, sha256}")
            if not isinstance(config.get("inputs"), list) or not all(
                isinstance(i, dict) and isinstance(i.get("shape"), list) for i in config["inputs"]
            ):
                problems.append("'inputs' must be a list of {argument, shape, dtype}")
            function = config.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("sha256"), str):
                problems.append("'function' must hold the sha256 of model.stablehlo")
    if problems:
        raise _fail(file, f"malformed export config: {problems[0]}")
    return config


def _read_tensors(path: Path, config: dict[str, Any]) -> dict[str, np.ndarray]:
    file = path / WEIGHTS
    try:
        tensors = load(file.read_bytes())
    except (OSError, SafetensorError, ValueError) as err:
        raise _fail(file, f"not a readable safetensors file: {str(err).splitlines()[0]}") from None
    recorded = config.get("tensors")
    if recorded is None:  # a version-1 export: no checksums were recorded
        return tensors
    if set(tensors) != set(recorded):
        extra = sorted(set(tensors) ^ set(recorded))[0]
        raise _fail(file, f"weight {extra!r} is in one of model.safetensors and config.json only")
    for name, array in tensors.items():
        want = recorded[name]
        if str(array.dtype) != want["dtype"] or list(array.shape) != want["shape"]:
            raise _fail(
                file, f"weight {name!r} is {array.dtype}{list(array.shape)}, the export recorded "
                f"{want['dtype']}{want['shape']}",
            )  # fmt: skip
        if _digest(array) != want["sha256"]:
            raise _fail(
                file, f"weight {name!r} does not match its recorded checksum: the file is corrupted"
            )
    return tensors


def load_exported(path: str | os.PathLike, like: Any = None) -> Any:
    """Load an export written by :func:`export`.

    Without ``like``: an :class:`ExportedModel`, a callable that runs the exported StableHLO on a
    batch of any size (no Python model class needed). With ``like=model`` (an NNX module, or a
    Linen variables dict): ``model`` with the exported weights (its mode unchanged; for a dict, a
    new dict). Every weight's dtype, shape and checksum are verified first; a corrupted or
    malformed export raises :class:`ExportError` naming the file.

    >>> import tempfile
    >>> import numpy as np
    >>> from flax import nnx
    >>> from jaxfeed.models import MLP
    >>> trained = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0))
    >>> folder = export(trained, tempfile.mkdtemp() + "/mlp")
    >>> fresh = load_exported(folder, like=MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)))
    >>> x = np.ones((2, 4), np.float32)
    >>> bool(np.allclose(fresh(x), trained(x))), load_exported(folder)(x).shape
    (True, (2, 3))
    """
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise ExportError(f"{path} is not an exported model: expected {CONFIG} and {WEIGHTS}")
    config = _read_config(path)
    tensors = _read_tensors(path, config)
    if like is not None:
        return _into(path, tensors, like)
    if config.get("version", 1) < 2 or not (path / FUNCTION).is_file():
        raise _fail(
            path, f"this export has no {FUNCTION} (written by an older jaxfeed): load it with "
            "like=model, or export it again",
        )  # fmt: skip
    function = (path / FUNCTION).read_bytes()
    if hashlib.sha256(function).hexdigest() != config["function"]["sha256"]:
        raise _fail(path / FUNCTION, "does not match its recorded checksum: the file is corrupted")
    try:
        exported = jax.export.deserialize(bytearray(function))
    except Exception as err:
        raise _fail(path / FUNCTION, f"cannot deserialise the function: {err}") from None
    weights_avals = jax.tree_util.tree_unflatten(exported.in_tree, exported.in_avals)[0][0]
    for name, aval in weights_avals.items():
        if name not in tensors or tensors[name].dtype != aval.dtype:
            got = tensors[name].dtype if name in tensors else "missing"
            raise _fail(path / WEIGHTS, f"weight {name!r} is {got}; the model takes {aval.dtype}")
    weights = {n: jnp.asarray(a) for n, a in tensors.items()}
    spec = None
    if "preprocessing" in config:
        try:
            spec = ServingSpec.from_dict(config["preprocessing"], str(path / CONFIG))
        except SpecError as err:
            raise ExportError(str(err)) from None
    tokenizer = None
    if spec is not None and spec.kind in TEXT_SPEC_KINDS:
        tokenizer = _read_tokenizer(path, config)
    return ExportedModel(path, config, weights, exported, spec, tokenizer)


def _read_tokenizer(path: Path, config: dict[str, Any]) -> Any:
    """A text export's ``tokenizer.json``, its checksum verified, read by ``tokenizers`` (data,
    never code)."""
    file = path / TOKENIZER_FILE
    if not file.is_file():
        raise _fail(file, "is missing: a text export carries its tokenizer")
    data = file.read_bytes()
    if hashlib.sha256(data).hexdigest() != (config.get("tokenizer") or {}).get("sha256"):
        raise _fail(file, "does not match its recorded checksum: the file is corrupted")
    try:
        from tokenizers import Tokenizer  # noqa: PLC0415 (optional: the text extra)
    except ImportError as err:
        raise ExportError(
            f"{path} is a text export: reading its tokenizer.json needs the tokenizers package "
            "(pip install 'jaxfeed[text]')"
        ) from err
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:
        raise _fail(file, f"is not a tokenizer this tokenizers reads: {err}") from None


def _into(path: Path, tensors: dict[str, np.ndarray], like: Any) -> Any:
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only when an export is rebuilt)

    if isinstance(like, nnx.Module):
        state = nnx.state(like, nnx.Not(nnx.RngState))
        pure = nnx.to_pure_dict(state)
    elif isinstance(like, Mapping):
        state, pure = None, {k: v for k, v in like.items() if v}
    else:
        raise TypeError(
            f"like= takes an NNX module or a Linen variables dict, got {type(like).__name__}"
        )
    names, leaves, treedef = _flatten(pure)
    missing = [n for n in names if n not in tensors]
    if missing:
        raise _fail(path / WEIGHTS, f"has no weight {missing[0]!r}, which the model needs")
    unused = sorted(set(tensors) - set(names))
    if unused:
        raise _fail(path / WEIGHTS, f"has weight {unused[0]!r}, which the model does not")
    for name, leaf in zip(names, leaves, strict=True):
        array = tensors[name]
        if tuple(array.shape) != tuple(leaf.shape) or array.dtype != leaf.dtype:
            raise _fail(
                path / WEIGHTS, f"weight {name!r} is {array.dtype}{list(array.shape)}; the model "
                f"has {leaf.dtype}{list(leaf.shape)}",
            )  # fmt: skip
    filled = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(tensors[n]) for n in names])
    if state is None:
        return filled
    nnx.replace_by_pure_dict(state, filled)
    nnx.update(like, state)
    return like


def rebuild(path: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """A built-in model reconstructed by its registry name from an export, in eval mode, and the
    export's config (what ``jaxfeed predict`` uses); any other model: :func:`load_exported`."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only when an export is rebuilt)

    from jaxfeed.models.registry import model_classes  # noqa: PLC0415 (import cost: flax)

    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise ExportError(f"{path} is not an exported model: expected {CONFIG} and {WEIGHTS}")
    config = _read_config(path)
    spec = config["model"]
    classes = model_classes()
    if spec.get("class") not in classes or not isinstance(spec.get("kwargs"), dict):
        raise _fail(
            path / CONFIG, f"model class {spec.get('class')!r} is not a built-in one "
            f"({sorted(classes)}); serve it with load_exported(path)",
        )  # fmt: skip
    tensors = _read_tensors(path, config)
    cls = classes[spec["class"]]
    try:
        if spec.get("api") == "linen":
            module = cls(**spec["kwargs"])
            variables: dict[str, Any] = {}
            for name, value in tensors.items():
                node = variables
                *parents, leaf = name.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = jnp.asarray(value)
            return _LinenInference(module, variables), config
        model = cls(**spec["kwargs"], rngs=nnx.Rngs(0))
    except TypeError as err:
        raise _fail(path / CONFIG, f"bad arguments for {spec['class']}: {err}") from None
    _into(path, tensors, model)
    model.eval()
    return model, config


class _LinenInference:
    """A Linen module and its variables, called like an NNX model in eval mode."""

    def __init__(self, module: Any, variables: dict[str, Any]) -> None:
        self.module, self.variables = module, variables

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.module.apply(self.variables, x, train=False)
