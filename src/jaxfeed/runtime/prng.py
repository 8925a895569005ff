"""Random keys for dropout that are cheap on every backend.

On a CPU, JAX's random bits are slow: XLA:CPU runs ``threefry2x32`` as a rolled loop over whole
arrays and ``rbg`` no faster, so a ``jax.random.bernoulli`` mask of 47M values (the dropout of
one BERT-base 8x128 training step) took 1.8 s on the 2-core machine, about a fifth of the step,
where PyTorch's ``bernoulli_`` took 0.68 s. :data:`COUNTER_HASH` is a JAX PRNG implementation
(``jax.extend.random.define_prng_impl``) whose bits are an elementwise hash of a counter, keyed
by the key's two words: XLA fuses and vectorizes it, and the same mask took 0.09 s. Its keys
split and fold in with threefry (the keys are two words; only the bits are made differently),
so ``nnx.Rngs``, ``jax.random.split`` and ``fold_in`` work on them as on any key.

The bits are a keyed integer hash (two rounds of Wellons' ``lowbias32``), not a cryptographic
generator: good for dropout masks and augmentation noise, where every mask of a run differs and
none is predictable from another, not for anything an adversary sees. :func:`dropout_impl`
picks it on a CPU and ``rbg`` (the accelerators' hardware generator) elsewhere.

>>> key = jax.random.key(0, impl=COUNTER_HASH)
>>> mask = jax.random.bernoulli(jax.random.fold_in(key, 1), 0.9, (100_000,))
>>> round(float(mask.mean()), 2)
0.9
>>> dropout_impl("cpu") is COUNTER_HASH, dropout_impl("tpu")
(True, 'rbg')
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import random as jax_random

_THREEFRY = jax_random.threefry_prng_impl
_UNSIGNED = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}


def _lowbias32(x: jax.Array) -> jax.Array:
    """Wellons' ``lowbias32`` integer hash of uint32 ``x`` (a bijection with full avalanche)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def counter_hash_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    """``shape`` random unsigned integers of ``bit_width`` bits from a key's two uint32 words:
    word ``i`` is ``h(h(i + key[0]) ^ key[1])``, split into 8- or 16-bit values or paired into
    64-bit ones.

    >>> import jax.numpy as jnp
    >>> bits = counter_hash_bits(jnp.array([1, 2], jnp.uint32), 8, (3, 5))
    >>> bits.shape, bits.dtype
    ((3, 5), dtype('uint8'))
    """
    if bit_width not in _UNSIGNED:
        raise ValueError(f"counter_hash_bits: bit_width must be 8, 16, 32 or 64, got {bit_width}")
    count = math.prod(shape)
    words = -(-count * bit_width // 32)
    if words >= 2**32:
        raise ValueError(
            f"counter_hash_bits: {count:,} values of {bit_width} bits is over 2**32 words"
        )
    key = jnp.asarray(key, jnp.uint32)
    out = _lowbias32(_lowbias32(jax.lax.iota(jnp.uint32, words) + key[0]) ^ key[1])
    if bit_width == 32:
        return out.reshape(shape)
    if bit_width == 64:
        return jax.lax.bitcast_convert_type(out.reshape(count, 2), jnp.uint64).reshape(shape)
    parts = jax.lax.bitcast_convert_type(out, _UNSIGNED[bit_width]).reshape(-1)
    return parts[:count].reshape(shape)


COUNTER_HASH = jax_random.define_prng_impl(
    key_shape=(2,),
    seed=_THREEFRY.seed,
    split=_THREEFRY.split,
    random_bits=counter_hash_bits,
    fold_in=_THREEFRY.fold_in,
    name="jaxfeed_counter_hash",
    tag="ch",
)


def dropout_impl(backend: str | None = None) -> Any:
    """The key implementation for dropout on ``backend`` (default: JAX's default backend):
    :data:`COUNTER_HASH` on a CPU, ``"rbg"`` on accelerators (their hardware generator).

    >>> dropout_impl("gpu")
    'rbg'
    """
    return COUNTER_HASH if (backend or jax.default_backend()) == "cpu" else "rbg"
