"""Command-line flags derived from :class:`jaxfeed.recipes.config.RunConfig`'s fields.

Each field becomes ``--field-name`` with its help, its choices (``Literal`` types) and its checks
(the same :func:`~jaxfeed.recipes.config.coerce` that reads config files); the flags default to
"not given", so that what the user typed can override a config file or be checked against a run's
saved configuration.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_run_options(parser)
>>> given(parser.parse_args(["--epochs", "3", "--input-columns", "a,b"]))
{'epochs': 3, 'input_columns': ['a', 'b']}
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Literal

from jaxfeed.recipes.config import ConfigError, RunConfig, coerce

ALIASES = {"input_columns": ["--input-column"]}  # the first jaxfeed's name
GROUPS = {
    "data": "data",
    "model": "model",
    "run": "optimisation and run",
    "process": "run folder and processes",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parser_type(f: dataclasses.Field, hint: Any) -> Any:
    def parse(text: str) -> Any:
        try:
            return coerce(f, hint, text, "")
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(": ")) from None

    parse.__name__ = f.name  # argparse names the type in some messages
    return parse


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`RunConfig` field, in help groups."""
    hints = typing.get_type_hints(RunConfig)
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    for f in dataclasses.fields(RunConfig):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        base = args[0] if len(args) == 1 else hint
        group = groups[f.metadata["group"]]
        names = [_flag(f.name), *ALIASES.get(f.name, [])]
        common: dict[str, Any] = {
            "dest": f.name,
            "default": argparse.SUPPRESS,
            "help": f.metadata["help"],
        }
        if base is bool:
            action = argparse.BooleanOptionalAction if f.metadata["saved"] else "store_true"
            group.add_argument(*names, action=action, **common)
            continue
        if typing.get_origin(base) is Literal:
            common["choices"] = typing.get_args(base)
        else:
            common["metavar"] = f.metadata["metavar"] or f.name.upper()
        group.add_argument(*names, type=_parser_type(f, hint), **common)


def given(namespace: argparse.Namespace) -> dict[str, Any]:
    """The :class:`RunConfig` options present in ``namespace`` (the flags the user typed)."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return {k: v for k, v in vars(namespace).items() if k in names}
