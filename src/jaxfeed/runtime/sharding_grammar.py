"""The sharding grammar, parsed once and without JAX: ``"replicate" | "fsdp" | {logical: mesh axes}``.

What ``Trainer(sharding=)``, ``from_pretrained(sharding=)`` and the command's ``--sharding``
accept: ``"replicate"``, ``"fsdp"``, or a mapping of logical axis names to a mesh axis name, a
list of them or None, in which the key ``"fsdp"`` (true or false) adds FSDP. :func:`parse_rules`
reads it; :class:`jaxfeed.runtime.sharding.ShardingPlan` is built from what it returns, and the
command's option check (which imports no JAX) calls it directly.

>>> parse_rules({"mlp": "model", "heads": ["model"], "embed": None, "fsdp": True})
(True, (('mlp', ('model',)), ('heads', ('model',)), ('embed', None)))
>>> parse_rules("fsdp")
(True, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (logical axis name, the mesh axes it splits over, or None: kept whole) per rule
Rules = tuple[tuple[str, tuple[str, ...] | None], ...]


class ShardingError(ValueError):
    """A sharding that cannot be applied: the message names the rule, parameter, dimension and
    sizes. ``rule`` is ``(key,)`` when one rule of a mapping is malformed, else ``()``.

    >>> issubclass(ShardingError, ValueError)    # raised before compiling; see Trainer(sharding=)
    True
    >>> try:
    ...     parse_rules({"mlp": 3})
    ... except ShardingError as err:
    ...     err.rule
    ('mlp',)
    """

    def __init__(self, message: str, *rule: Any) -> None:
        super().__init__(message)
        self.rule = rule


def _axes(entry: Any) -> tuple[Any, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple | list) else (entry,)


def parse_rules(sharding: Any) -> tuple[bool, Rules | None]:
    """``(fsdp, rules)`` of ``sharding``: rules None for ``"replicate"`` and ``"fsdp"`` (no
    logical axis rules), else each rule's mesh axes as a tuple (None: the dimension stays whole).
    Anything else raises :class:`ShardingError`.

    >>> parse_rules("replicate")
    (False, None)
    >>> parse_rules({"fsdp": "yes"})
    Traceback (most recent call last):
    ...
    jaxfeed.runtime.sharding_grammar.ShardingError: sharding rule 'fsdp' must be true or false, got 'yes'
    """
    if isinstance(sharding, str) and sharding in ("replicate", "fsdp"):
        return sharding == "fsdp", None
    if not isinstance(sharding, Mapping):
        raise ShardingError(
            f"sharding must be 'replicate', 'fsdp' or a dict of logical axis rules "
            f"({{'embed': None, 'mlp': 'model'}}), got {sharding!r}"
        )
    fsdp = False
    rules: list[tuple[str, tuple[str, ...] | None]] = []
    for name, entry in sharding.items():
        if name == "fsdp":
            if not isinstance(entry, bool):
                raise ShardingError(
                    f"sharding rule 'fsdp' must be true or false, got {entry!r}", name
                )
            fsdp = entry
            continue
        axes = _axes(entry)
        if not isinstance(name, str) or not all(isinstance(a, str) and a for a in axes):
            raise ShardingError(
                f"sharding rules map logical axis names to a mesh axis name, a list of them or "
                f"None; got {name!r}: {entry!r}",
                name,
            )
        rules.append((name, axes or None))
    return fsdp, tuple(rules)


__all__ = ["Rules", "ShardingError", "parse_rules"]
