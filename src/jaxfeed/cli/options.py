"""The flags of ``jaxfeed train``: :class:`~jaxfeed.recipes.config.RunConfig`'s jsonargparse parser
on the command line.

The parser is :func:`jaxfeed.recipes.config.new_run_parser` (one flag per field, typed by its
hint) plus ``--config``, ``--print-config`` and ``--debug``. Flags are spelled with dashes
(``--split-train``; jsonargparse's own ``--split_train`` works too), booleans take ``--no-...``,
and ``model`` and ``optimizer`` also take their ``{class_path, init_args}`` parts one by one
(``--model.init_args.width 64``). :func:`parse_train` returns only the options the user typed,
so that they can override a config file or be checked against a resumed run.

>>> given = parse_train(["--epochs", "3", "--input-column", "a,b", "--no-tensorboard",
...                      "--optimizer", "lion", "--optimizer.init_args.b1", "0.95"])
>>> given.options
{'input_columns': ['a', 'b'], 'epochs': 3, 'optimizer': {'class_path': 'lion', 'init_args': {'b1': 0.95}}, 'tensorboard': False}
>>> parse_train(["--epoch", "3"])
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: unknown flag --epoch (did you mean --epochs?)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

from jaxfeed.recipes.config import (
    COMPONENTS,
    ConfigError,
    RunConfig,
    as_typed,
    check,
    did_you_mean,
    flag,
    load_yaml,
    new_run_parser,
    parse_error,
)

ALIASES = {"input_column": "input_columns"}  # the first jaxfeed's name
EXTRA_FLAGS = ("config", "print_config", "debug", "help")


@dataclass
class TrainFlags:
    """What ``jaxfeed train`` was given: the run options typed, and the command's own flags."""

    options: dict[str, Any] = field(default_factory=dict)
    config: str | None = None
    print_config: bool = False
    debug: bool = False
    help: bool = False


def train_parser(epilog: str | None = None) -> Any:
    """The jsonargparse parser of ``jaxfeed train``, for ``--help``."""
    parser = new_run_parser(epilog=epilog, formatter_class=_formatter())
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="start from the options in a JSON or YAML file (a run's config.json works); flags "
        "override it",
    )
    parser.add_argument(
        "--print_config",
        action="store_true",
        help="print the resolved options (config file, flags, or the resumed run's) as YAML and exit",
    )
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    return parser


def _formatter() -> Any:
    from jsonargparse import DefaultHelpFormatter

    class Dashed(DefaultHelpFormatter):
        """Flags shown as typed: ``--split-train``; the examples kept as written."""

        def format_help(self) -> str:
            text = super().format_help()
            return re.sub(r"--[a-z][a-z0-9_]*", lambda m: m.group().replace("_", "-"), text)

        def _format_action_invocation(self, action: Any) -> str:
            # jsonargparse adds "--name+" (append to a list) to list flags: not a flag of ours
            shown = [s for s in action.option_strings if not s.endswith("+")]
            if shown != list(action.option_strings):
                action = copy.copy(action)
                action.option_strings = shown
            return super()._format_action_invocation(action)

        def _get_help_string(self, action: Any) -> str:  # the field's help says its default
            text = action.help or ""
            default = action.default
            if "default" in text or default in (None, False, "==SUPPRESS=="):
                return text
            return f"{text} (default: {default})"

        def _fill_text(self, text: str, width: int, indent: str) -> str:
            return "".join(indent + line for line in text.splitlines(keepends=True))

    return Dashed


def _name(token: str) -> tuple[str, str | None]:
    """``--split-train=x`` -> ``("split_train", "x")``."""
    name, eq, value = token[2:].partition("=")
    head, dot, rest = name.partition(".")
    return head.replace("-", "_") + dot + rest, value if eq else None


def parse_train(argv: list[str]) -> TrainFlags:
    """The flags of ``jaxfeed train`` in ``argv``: checked, with only the typed options."""
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    flags = TrainFlags()
    rest: list[str] = []
    parts: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token == "--":
            if token in ("-h",):
                flags.help = True
                continue
            rest.append(token)
            continue
        name, value = _name(token)
        name = ALIASES.get(name, name)
        head = name.split(".")[0]
        if "." in name and head in COMPONENTS:  # --model.init_args.width 64
            if value is None:
                if i >= len(argv):
                    raise ConfigError(f"--{name} needs a value")
                value, i = argv[i], i + 1
            _component_part(parts.setdefault(head, {}), name, value)
            continue
        known = fields | set(EXTRA_FLAGS) | {f"no_{f}" for f in fields}
        if name not in known:
            shown = "--" + name.replace("_", "-")
            dashed = ["--" + k.replace("_", "-") for k in known]
            raise ConfigError(f"unknown flag {shown}{did_you_mean(shown, dashed, quote=False)}")
        if name in ("print_config", "debug", "help"):
            setattr(flags, name, True)
            continue
        if name == "config":
            if value is None:
                if i >= len(argv):
                    raise ConfigError("--config needs a FILE")
                value, i = argv[i], i + 1
            flags.config = value
            continue
        if (
            value is None
            and i < len(argv)
            and not argv[i].startswith("--")
            and (name in fields and not name.startswith("no_") and _takes_value(name))
        ):
            value, i = argv[i], i + 1
        if value is not None and name in fields:
            typed = as_typed({name: value})[name]
            value = json.dumps(typed) if isinstance(typed, list) else value
        rest.append(f"--{name}" + ("" if value is None else f"={value}"))
    if flags.help:
        return flags
    parser = new_run_parser()
    try:
        namespace = parser.parse_args(rest, defaults=False)
    except Exception as err:  # jsonargparse's errors: one line naming the flag
        raise ConfigError(_flag_error(err)) from None
    order = [f.name for f in dataclasses.fields(RunConfig)]
    options = {k: namespace[k] for k in order if k in namespace}
    for head, part in parts.items():  # merged into the config file's (or the run's) by replace
        base = options.get(head)
        spec = (
            dict(base) if isinstance(base, dict) else {} if base is None else {"class_path": base}
        )
        spec["init_args"] = {**(spec.get("init_args") or {}), **part.get("init_args", {})}
        if "class_path" in part:
            spec["class_path"] = part["class_path"]
        options[head] = spec
    partial = {
        k for k in COMPONENTS if isinstance(options.get(k), dict) and "class_path" not in options[k]
    }
    checked = RunConfig(**options)
    for name in options:
        if name not in partial:
            checked = check(checked, f"argument {flag(name)}", [name])
    flags.options = {k: getattr(checked, k) for k in options}
    return flags


def _takes_value(name: str) -> bool:
    return typing.get_type_hints(RunConfig)[name] not in (bool, bool | None)


def _component_part(part: dict[str, Any], name: str, value: str) -> None:
    head, _, key = name.partition(".")
    if key == "class_path":
        part["class_path"] = value
        return
    section, _, arg = key.partition(".")
    if section != "init_args" or not arg.isidentifier():
        raise ConfigError(
            f"--{name}: expected --{head}.class_path NAME or --{head}.init_args.ARGUMENT VALUE"
        )
    try:  # a number, a list, a mapping, true/false/null: as YAML; anything else: the text
        parsed = load_yaml(value, f"--{name}")
    except ConfigError:
        parsed = value
    part.setdefault("init_args", {})[arg] = parsed


def _flag_error(err: BaseException) -> str:
    text = str(err)
    unknown = re.search(r"[Uu]nrecognized arguments: (\S+)", text)
    if unknown:
        name = _name(unknown.group(1))[0] if unknown.group(1).startswith("--") else unknown.group(1)
        return f"unexpected argument {name!r} (flags are --name VALUE)"
    message = parse_error(err)
    key = re.match(r"(\w+) must", message)
    return f"argument --{key.group(1).replace('_', '-')}: {message}" if key else message


def print_config(config: RunConfig) -> str:
    """The options as YAML (what ``--print-config`` shows; ``--config`` reads it back)."""
    return yaml.safe_dump(config.as_dict(), sort_keys=False, default_flow_style=None)
