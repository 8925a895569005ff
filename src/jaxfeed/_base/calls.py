"""How jaxfeed calls a user's function: with or without a generator, and the generator's seeding.

This module imports no other jaxfeed module (and never jax).

>>> takes_rng(lambda row: row), takes_rng(lambda row, rng: row)
(False, True)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np


def takes_rng(fn: Callable) -> bool:
    """Whether ``fn`` accepts a second positional argument (the generator)."""
    try:
        params = [
            p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]  # fmt: skip
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def seeded_rng(*key: int) -> np.random.Generator:
    """The generator of one call of a transform: the same ``key`` (seed, epoch, step or
    position) gives the same draws in any process.

    >>> seeded_rng(0, 1, 2).random() == seeded_rng(0, 1, 2).random()
    True
    """
    return np.random.default_rng([int(k) for k in key])
