"""How many programs a jitted function has compiled: JAX's private count, read in this one place.

``jax.jit`` functions (and ``nnx.jit`` ones, which wrap them) keep a cache of compiled programs,
one per shape, dtype and static argument; its size is ``_cache_size()``, a private method. Tests
read it through :func:`compile_count` only, so a JAX release that renames or drops it breaks
here, with a message that says what to update, instead of in every test that counts compiles.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


@contextlib.contextmanager
def eager_operations() -> Iterator[list[str]]:
    """The operations JAX runs one by one (outside any ``jit``) inside the block: a list of their
    names, filled as they run. Each is dispatched alone, and compiled once per process and
    shape (a ``jnp.zeros(())`` is one, a ``jax.device_put`` of a tree another; a jitted call is
    none). JAX's private eager trace, read in this one place like :func:`compile_count`.

    >>> import jax.numpy as jnp
    >>> with eager_operations() as ran:
    ...     x = jnp.ones(2)  # a conversion and a broadcast
    ...     _ = jax.jit(lambda x: x * 2 + 1)(x)
    >>> ran
    ['convert_element_type', 'broadcast_in_dim']
    """
    try:
        from jax._src.core import EvalTrace  # JAX's private module: read here only
    except ImportError as err:
        raise AssertionError(
            f"JAX {jax.__version__} moved its eager trace (jax._src.core.EvalTrace); update "
            "tests/jax_compiles.py"
        ) from err
    ran: list[str] = []
    process = EvalTrace.process_primitive

    def counted(self: Any, primitive: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(primitive.name)
        return process(self, primitive, *args, **kwargs)

    EvalTrace.process_primitive = counted
    try:
        yield ran
    finally:
        EvalTrace.process_primitive = process
