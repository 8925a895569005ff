""":class:`RunConfig`: the sections of :mod:`~jaxfeed.recipes.config.groups` composed into one
flat config; its jsonargparse parser, and the checks the types cannot say (a run's options from
defaults, a config file, the command line or a resumed run: :func:`jaxfeed.recipes.configure.configure`)."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from dataclasses import dataclass
from typing import Any, Literal

from jaxfeed.recipes.config.groups import (
    COMPONENTS,
    SECTIONS,
    ConfigError,
    DataOptions,
    ModelOptions,
    OptimOptions,
    ProcessOptions,
)
from jaxfeed.recipes.config.model_spec import ModelSpec, parse_model
from jaxfeed.recipes.config.values import (
    _class_weights,
    _component,
    _short,
    did_you_mean,
    parse_colour,
    parse_image_size,
    parse_mesh_text,
    parse_sharding,
)


@dataclass
class RunConfig(ProcessOptions, OptimOptions, ModelOptions, DataOptions):
    """Everything ``jaxfeed train`` needs: data, model, optimisation and run options.

    The sections are listed last first: a dataclass takes its bases' fields in reverse method
    resolution order, so the fields (and the flags, ``--help`` and ``config.json``) run data,
    model, optimisation, process, as :data:`~jaxfeed.recipes.config.groups.SECTIONS` says.

    >>> config = RunConfig(data="digits", epochs=3, lr=3e-3)
    >>> config.epochs, config.replace({"epochs": 5}, where="--epochs").epochs
    (3, 5)
    """

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str) -> RunConfig:
        """A config from ``values`` (defaults for the rest), each checked; errors name ``where``."""
        return cls().replace(values, where)

    def replace(self, values: dict[str, Any], where: str) -> RunConfig:
        """A copy with ``values`` (JSON/YAML values, or flags as parsed) checked and applied."""
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: expected a mapping of option names to values")
        values = {str(k).replace("-", "_"): v for k, v in values.items()}
        known = {f.name: f for f in dataclasses.fields(self)}
        for key in values:
            if key not in known:
                raise ConfigError(
                    f"{where}: unknown option {_short(key)}{did_you_mean(key, known)}"
                )
        values = as_typed(values)
        for name in COMPONENTS:  # {init_args} alone: arguments for the class already chosen
            part = values.get(name)
            if isinstance(part, dict) and "class_path" not in part:
                path, args = self.component(name)
                if path is None:
                    raise ConfigError(
                        f"{where}: {name}.init_args needs a {name} (the class to build): give "
                        f"--{name} NAME or {name}: {{class_path: NAME, init_args: ...}}"
                    )
                values[name] = {
                    "class_path": path,
                    "init_args": {**args, **(part.get("init_args") or {})},
                }
        parser = run_parser()
        try:
            namespace = parser.parse_object(values, defaults=False)
        except Exception as err:  # jsonargparse's errors: one line, no whole value
            raise ConfigError(f"{where}: {parse_error(err)}") from None
        changes = {k: namespace[k] for k in values}
        return check(dataclasses.replace(self, **changes), where, set(changes))

    def as_dict(self) -> dict[str, Any]:
        """Every field (JSON values)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def saved(self) -> dict[str, Any]:
        """The fields kept in ``config.json`` (JSON values)."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["saved"]
        }

    def differences(self, other: RunConfig) -> list[str]:
        """Saved fields whose values differ."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.metadata["saved"] and getattr(self, f.name) != getattr(other, f.name)
        ]

    def image_hw(self) -> tuple[int, int] | None:
        """``--image-size`` as ``(height, width)``.

        >>> RunConfig(image_size="32").image_hw(), RunConfig(image_size="24x32").image_hw()
        ((32, 32), (24, 32))
        """
        return None if self.image_size is None else parse_image_size(self.image_size)

    @property
    def model_spec(self) -> ModelSpec | None:
        """``--model`` decoded (:func:`~jaxfeed.recipes.config.model_spec.parse_model`): what
        every step reads; None when it is not given (the input kind's default).

        >>> RunConfig(model="net.py:Net").model_spec.source, RunConfig().model_spec
        ('file', None)
        """
        decoded = self.__dict__.get("_model_spec")  # decoded once per value of ``model``
        if decoded is None or decoded[0] is not self.model:
            decoded = (self.model, parse_model(self.model))
            self.__dict__["_model_spec"] = decoded
        return decoded[1]

    def component(self, name: str) -> tuple[str | None, dict[str, Any]]:
        """``model`` or ``optimizer`` as ``(class_path, init_args)``.

        >>> RunConfig(model={"class_path": "net.py:Net", "init_args": {"width": 8}}).component("model")
        ('net.py:Net', {'width': 8})
        >>> RunConfig().component("optimizer")
        ('adamw', {})
        """
        value = getattr(self, name)
        if isinstance(value, dict):
            return value["class_path"], dict(value.get("init_args") or {})
        return value, {}


if [f.name for f in dataclasses.fields(RunConfig)] != [
    f.name for section in SECTIONS.values() for f in dataclasses.fields(section)
]:  # the flags, --help and config.json follow this order
    raise AssertionError("RunConfig's fields are not in the order of its sections")


def as_typed(values: dict[str, Any]) -> dict[str, Any]:
    """Spellings the types do not take, as they mean: ``"a,b"`` for a list of names, ``64`` for
    a string field (``image_size: 64`` in YAML).

    >>> as_typed({"input_columns": "a, b", "image_size": 64, "epochs": 3})
    {'input_columns': ['a', 'b'], 'image_size': '64', 'epochs': 3}
    """
    hints, out = _hints(), dict(values)
    for key, value in values.items():
        base = _base(hints.get(key))
        if base is str and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = str(value)
        elif typing.get_origin(base) is list and isinstance(value, str):
            out[key] = [v.strip() for v in value.split(",") if v.strip()]
    return out


def _hints() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig)


def _base(hint: Any) -> Any:
    """``X`` of ``X | None``; the hint itself otherwise."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if type(None) in typing.get_args(hint) and len(args) == 1 else hint


def flag(name: str) -> str:
    """A field's command-line flag: ``split_train`` -> ``--split-train``."""
    return "--" + name.replace("_", "-")


@functools.cache
def run_parser() -> Any:
    """The jsonargparse parser of :class:`RunConfig` (config files and ``config.json``)."""
    return new_run_parser()


GROUPS = {
    "data": "data",
    "model": "model",
    "run": "optimisation and run",
    "process": "run folder and processes",
}


def new_run_parser(**kwargs: Any) -> Any:
    """A jsonargparse parser of :class:`RunConfig`: one ``--field_name`` per field, typed by its
    hint, with its help and default (booleans also take ``--no_field_name``), in help groups.
    ``kwargs`` go to ``ArgumentParser``. The command line spells the flags with dashes
    (``jaxfeed.cli.options`` maps them)."""
    # jsonargparse's import takes ~0.25 s: only a command or a config read builds the parser
    from jsonargparse import ActionYesNo, ArgumentParser

    parser = ArgumentParser(
        **{"prog": "jaxfeed train", "exit_on_error": False, "allow_abbrev": False, **kwargs}
    )
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    hints = _hints()
    for key, section in SECTIONS.items():  # RunConfig's field order (checked below the class)
        group = groups[key]
        for f in dataclasses.fields(section):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
            kwargs: dict[str, Any] = {"default": default, "help": f.metadata["help"]}
            if _base(hints[f.name]) is bool:
                group.add_argument(f"--{f.name}", action=ActionYesNo(no_prefix="no_"), **kwargs)
            else:
                if f.metadata.get("metavar"):
                    kwargs["metavar"] = f.metadata["metavar"]
                group.add_argument(f"--{f.name}", type=hints[f.name], **kwargs)
    return parser


def parse_error(err: BaseException) -> str:
    """A jsonargparse error as one line naming the option (its long messages list every union
    member and repeat the whole value)."""
    text = str(err).strip()
    key = re.search(r'[Kk]ey "([\w.]+)"', text)
    if key:
        name = key.group(1).split(".")[0]
        hint = _hints().get(name)
        got = re.search(r"(?:Given|Got) value: (.*)", text)
        value = got.group(1).strip() if got else None
        return f"{name} must be {describe(hint)}" + (
            f", got {_short(value)}" if value is not None else ""
        )
    first = text.splitlines()[0] if text else type(err).__name__
    return first[:200]


def describe(hint: Any) -> str:
    """What a field's type accepts, in words."""
    base = _base(hint)
    members = typing.get_args(base)
    if float in members and any(typing.get_origin(m) is Literal for m in members):
        words = [a for m in members if typing.get_origin(m) is Literal for a in typing.get_args(m)]
        return "a number or " + ", ".join(words)  # --lr: a number or auto
    if typing.get_origin(base) is Literal:
        return "one of " + ", ".join(typing.get_args(base))
    simple = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if base in simple:
        return simple[base]
    if typing.get_origin(base) is list:
        return "a list"
    return (
        "a name or a {class_path, init_args} mapping"
        if dict in map(typing.get_origin, typing.get_args(base))
        else "a valid value"
    )


AUGMENTATIONS = ("flip", "crop")  # --augment
_WHY_MAXIMUM = {
    "sample_rate": " (the highest rate audio is recorded at; clips are resampled to it)",
    "clip_seconds": " (every clip is cropped or padded to it)",
    "seed": " (a 32-bit seed)",
    "num_workers": " (worker processes)",
}


def check(config: RunConfig, where: str, names: typing.Iterable[str] | None = None) -> RunConfig:
    """Bounds and forms the types do not say, for fields ``names`` (default: all); normalises
    comma-separated lists and ``{class_path, init_args}`` specs."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    for name in fields if names is None else names:
        f, value = fields[name], getattr(config, name)
        low, below = f.metadata.get("minimum"), f.metadata.get("below")
        if isinstance(value, int | float) and not isinstance(value, bool):
            kind = "an integer" if isinstance(value, int) else "a number"
            if low is not None and (value <= low if f.metadata["exclusive"] else value < low):
                sign = ">" if f.metadata["exclusive"] else ">="
                raise ConfigError(f"{where}: {name} must be {kind} {sign} {low:g}, got {value!r}")
            if below is not None and value >= below:
                raise ConfigError(f"{where}: {name} must be {kind} < {below:g}, got {value!r}")
            if value != value or value in (math.inf, -math.inf):
                raise ConfigError(f"{where}: {name} must be a finite number, got {value!r}")
            high = f.metadata.get("maximum")
            if high is not None and value > high:
                top, got = (
                    (f"{int(high):,}", f"{value:,}")
                    if kind == "an integer"
                    else (f"{high:g}", f"{value:g}")
                )
                why = _WHY_MAXIMUM.get(name, "")
                raise ConfigError(f"{where}: {name} must be {kind} <= {top}, got {got}{why}")
        if name in ("input_columns", "metrics", "augment") and isinstance(value, str):
            value = changes[name] = [v.strip() for v in value.split(",") if v.strip()]
            if not value:
                raise ConfigError(f"{where}: {name} must name at least one column or metric")
        if name == "augment" and value == ["none"]:  # --augment none: not even the default
            value = changes[name] = []
        if name == "augment" and value is not None:
            unknown = [v for v in value if v not in AUGMENTATIONS]
            if unknown or not isinstance(value, list):
                raise ConfigError(
                    f"{where}: augment: {unknown[0] if unknown else value!r} is not an "
                    f"augmentation; known: {', '.join(AUGMENTATIONS)} (or none alone)"
                )
        if name == "class_weights" and value is not None:
            changes[name] = _class_weights(value, where)
        if name == "image_size" and value is not None:
            try:
                parse_image_size(value)
            except ConfigError as err:
                raise ConfigError(f"{where}: image_size: {err}") from None
        if name == "image_background" and value is not None:
            try:
                parse_colour(value)
            except ConfigError as err:
                raise ConfigError(f"{where}: image_background: {err}") from None
        if name in COMPONENTS and value is not None:
            changes[name] = _component(name, value, where)
        if name == "mesh" and value is not None:
            parse_mesh_text(value, where)
        if name == "sharding":
            changes[name] = parse_sharding(value, where)
    return dataclasses.replace(config, **changes) if changes else config
