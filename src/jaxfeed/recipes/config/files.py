"""Config files: JSON or YAML (read safely, with bounds on aliases and size), or a run's
``config.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from jaxfeed.recipes.config.groups import RUN_FORMAT, ConfigError
from jaxfeed.recipes.config.record import is_legacy_run, legacy_options

MAX_CONFIG_NODES = 100_000  # values a config file may expand to (YAML aliases count each time)
MAX_CONFIG_ALIASES = 100
MAX_CONFIG_BYTES = 16 << 20


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses more than :data:`MAX_CONFIG_ALIASES` aliases (an alias
    "bomb" of a few hundred bytes expands to billions of values)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases = getattr(self, "aliases", 0) + 1
            if self.aliases > MAX_CONFIG_ALIASES:
                raise ConfigError(f"more than {MAX_CONFIG_ALIASES} YAML aliases (*name)")
        return super().compose_node(parent, index)


def load_yaml(text: str, where: str) -> Any:
    """YAML ``text``, safely: no Python objects, at most :data:`MAX_CONFIG_ALIASES` aliases and
    :data:`MAX_CONFIG_NODES` values once expanded; errors name ``where`` and never the value.

    >>> load_yaml("a: &x [1, 2]\\nb: *x", "run.yaml")
    {'a': [1, 2], 'b': [1, 2]}
    >>> bomb = "a: &a [x, x]\\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}]\\n"
    ...                                    for p, c in zip("abcdefghij", "bcdefghijk"))
    >>> load_yaml(bomb, "bomb.yaml")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: bomb.yaml: refused: it expands to more than 100,000 values (YAML aliases)
    """
    try:
        values = yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader: no Python objects
    except ConfigError as err:
        raise ConfigError(f"{where}: refused: {err}") from None
    except yaml.YAMLError as err:
        first = str(err).strip().splitlines()[0][:200]
        raise ConfigError(f"{where}: not valid YAML: {first}") from None
    _check_size(values, where)
    return values


def _check_size(values: Any, where: str) -> None:
    """Refuse a value that expands to more than :data:`MAX_CONFIG_NODES` values (each alias counts
    every time it is used), without expanding it."""
    count, stack = 0, [values]
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ConfigError(
                f"{where}: refused: it expands to more than {MAX_CONFIG_NODES:,} values (YAML aliases)"
            )
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The options in a JSON or YAML file (a run's ``config.json`` works too: its options); YAML
    is read by :func:`load_yaml` (no alias bombs)."""
    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"--config {path}: {path.stat().st_size:,} bytes; a config file holds at most "
                f"{MAX_CONFIG_BYTES:,}"
            )
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"--config {path}: not a text file (byte {err.object[err.start]:#04x} at offset "
            f"{err.start} is not UTF-8); give a JSON or YAML file"
        ) from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            values = load_yaml(text, f"--config {path}")
        else:
            try:
                values = json.loads(text)
            except ValueError as err:
                raise ConfigError(f"--config {path}: not valid JSON: {err}") from None
    except RecursionError:
        raise ConfigError(
            f"--config {path}: nested too deeply to read (run options are at most a few levels "
            "deep)"
        ) from None
    _check_size(values, f"--config {path}")
    if not isinstance(values, dict):
        raise ConfigError(
            f"--config {path}: expected a mapping of option names to values, got {type(values).__name__}"
        )
    if values.get("format") == RUN_FORMAT:  # a run's config.json: its options
        values = values.get("options", {})
    elif is_legacy_run(values):
        values = legacy_options(values)
    return values
