"""How many programs a jitted function has compiled: JAX's private count, read in this one place.

``jax.jit`` functions (and ``nnx.jit`` ones, which wrap them) keep a cache of compiled programs,
one per shape, dtype and static argument; its size is ``_cache_size()``, a private method. Tests
read it through :func:`compile_count` only, so a JAX release that renames or drops it breaks
here, with a message that says what to update, instead of in every test that counts compiles.
"""

from __future__ import annotations

from typing import Any

import jax


def compile_count(jitted: Any) -> int:
    """The number of programs ``jitted`` has compiled in this process.

    >>> import jax.numpy as jnp
    >>> f = jax.jit(lambda x: x + 1)
    >>> _ = f(jnp.zeros(2)), f(jnp.ones(2)), f(jnp.zeros(3))
    >>> compile_count(f)
    2
    """
    size = getattr(jitted, "_cache_size", None)
    if not callable(size):
        raise AssertionError(
            f"{type(jitted).__name__} has no _cache_size(): JAX {jax.__version__} changed the private "
            "count of compiled programs; update tests/jax_compiles.py"
        )
    return int(size())
