"""The checks of a declared preprocessing spec (:mod:`jaxfeed.serve.spec`): :class:`SpecError`,
and typed reads of its JSON fields, each error naming the field (never the whole value).

>>> _Checker("spec.json").number({"max_length": -1}, "max_length", _REQUIRED, positive=True)
Traceback (most recent call last):
...
jaxfeed.serve.spec_checks.SpecError: spec.json: max_length must be a positive number, got int -1
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_REQUIRED = object()  # a field without a default


class SpecError(ValueError):
    """A preprocessing spec that cannot be read, or raw inputs it cannot take (named).

    >>> try:
    ...     _Checker("spec.json").text({}, "kind")
    ... except SpecError as e:
    ...     print(e)
    spec.json: missing field 'kind'
    """


def _lists(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


def _known(values: Mapping[str, Any], names: set[str], where: str, what: str) -> None:
    unknown = sorted(set(values) - names)
    if unknown:
        raise SpecError(f"{where}: unknown {what} field {unknown[0][:40]!r}")


class _Checker:
    """Typed reads of JSON fields, each error naming the field (never the whole value)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def _fail(self, key: str, expected: str, value: Any) -> SpecError:
        return SpecError(
            f"{self.where}: {key} must be {expected}, got {type(value).__name__} {repr(value)[:40]}"
        )

    def _get(self, values: Mapping[str, Any], key: str, default: Any) -> Any:
        if key not in values:
            if default is _REQUIRED:
                raise SpecError(f"{self.where}: missing field {key!r}")
            return default
        return values[key]

    def choice(self, values: Mapping, key: str, choices: tuple, default: Any = None) -> Any:
        required = default is None and None not in choices
        value = self._get(values, key, _REQUIRED if required else default)
        if value not in choices:
            raise self._fail(key, f"one of {[c for c in choices if c is not None]}", value)
        return value

    def text(self, values: Mapping, key: str) -> str:
        value = self._get(values, key, _REQUIRED)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def texts(self, values: Mapping, key: str, default: Any = _REQUIRED) -> list[str]:
        value = self._get(values, key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, "a list of strings", value)
        return value

    def ints(self, values: Mapping, key: str, default: Any = _REQUIRED) -> list[int] | None:
        value = self._get(values, key, default)
        if value is None and default is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**31 for v in value
        ):
            raise self._fail(key, "a list of positive integers", value)
        return value

    def list(self, values: Mapping, key: str, default: Any) -> list:
        value = self._get(values, key, default)
        if not isinstance(value, list):
            raise self._fail(key, "a list", value)
        return value

    def number(self, values: Mapping, key: str, default: Any, positive: bool = False) -> Any:
        value = self._get(values, key, default)
        if value is None and default is None:
            return None
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (positive and value <= 0):
            raise self._fail(key, "a positive number" if positive else "a finite number", value)
        return float(value)

    def flag(self, values: Mapping, key: str, default: bool) -> bool:
        value = self._get(values, key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value
