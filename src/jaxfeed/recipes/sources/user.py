"""Models of your own (:class:`UserSource`): ``--model FILE.py:ClassName`` or
``package.module.ClassName``, imported under a :class:`CodePolicy` (a run folder's model file runs
only with ``--trust-code``) and built as ``ClassName(num_classes, input_shape=..., vocab_size=...,
rngs=...)`` (each argument passed only when its ``__init__`` takes it; ``num_outputs`` is
accepted for ``num_classes``). A new run keeps a copy of the file in ``RUN/code/``.

>>> model_file("missing.py:Net")
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: --model missing.py:Net: no such file missing.py
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxfeed._base.files import atomic_write
from jaxfeed.recipes.config import ConfigError, RunConfig, did_you_mean
from jaxfeed.recipes.sources.base import ModelSource
from jaxfeed.recipes.spec import Preprocessing

CODE_DIR = "code"  # the run's copy of a user's model file, for reference


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


def build_user_model(spec: str, cls: type, prep: Preprocessing, outputs: int,
                     init_args: dict[str, Any], rngs: Any) -> Any:  # fmt: skip
    """``cls`` (``--model spec``) built with what its ``__init__`` takes of the run's outputs,
    input shape, vocabulary and ``rngs``, plus ``init_args``; it must be a ``flax.nnx.Module``."""
    from flax import nnx  # import cost: flax, when a model is built

    params = inspect.signature(cls.__init__).parameters  # nnx.Module hides it behind a metaclass
    kwargs: dict[str, Any] = {}
    for key in ("num_classes", "num_outputs"):
        if key in params:
            kwargs[key] = outputs
    if "input_shape" in params:
        kwargs["input_shape"] = tuple(prep.input_shape)
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
            f"--model {spec}: {cls.__name__}({', '.join([*kwargs, *init_args])}) failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    if not isinstance(model, nnx.Module):
        raise ConfigError(f"--model {spec}: {cls.__name__} is not a flax.nnx.Module")
    return model


def _takes_kwargs(params: Any) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class UserSource(ModelSource):
    """A model class of your own (see the module docstring): its file checked when the run
    opens, imported under the run's :class:`CodePolicy`, built with the run's outputs, input
    shape and vocabulary; a failed export leaves a note (eval and predict use the checkpoints).

    >>> from jaxfeed.recipes.config.model_spec import parse_model
    >>> UserSource(parse_model("net.py:Net")).absolute("net.py:Net")  # no such file: as given
    'net.py:Net'
    """

    name = "code"
    runs_code = True

    def absolute(self, model: Any) -> Any:
        spec = self.spec
        assert spec is not None
        local = Path(spec.path).expanduser() if spec.path is not None else None
        if local is None or "://" in spec.text or not local.is_file():
            return model
        resolved = f"{local.resolve()}:{spec.name}"
        return {**model, "class_path": resolved} if isinstance(model, dict) else resolved

    def open(self, config: RunConfig, record: Any, policy: Any) -> None:
        """A missing model file (or copy) is refused before any work."""
        assert self.spec is not None
        if self.spec.path is not None:
            model_file(self.spec.text, policy)

    def build_model(self, run: Any, config: RunConfig) -> Any:
        from flax import nnx  # import cost: flax, when a model is built

        spec = config.model_spec
        assert spec is not None
        if config.api == "linen":
            raise ConfigError("--api linen supports --model cnn only")
        cls = load_user_class(spec.text, run.policy)
        return build_user_model(
            spec.text, cls, run.prep, run.outputs, dict(spec.init_args), nnx.Rngs(config.seed)
        )

    def copy_code(self, out: Path) -> dict[str, Any] | None:
        """The model file copied into ``out/code/`` (for reference: imported only with
        ``--trust-code``), and what ``config.json`` records of it; a module: None."""
        spec = self.spec
        assert spec is not None
        if spec.path is None:  # a module by name: no file to keep
            return None
        source = Path(spec.path)
        data = source.read_bytes()
        target = out / CODE_DIR / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
        return {
            "file": f"{CODE_DIR}/{source.name}",
            "source": str(source),
            "sha256": hashlib.sha256(data).hexdigest(),
        }


__all__ = ["CODE_DIR", "CodePolicy", "UserSource", "build_user_model", "load_user_class",
           "model_file"]  # fmt: skip
