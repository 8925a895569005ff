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

A dropout mask needs far fewer random bits than a uniform float: :func:`keep_mask` draws 8-bit
(or 16-bit) values and compares them with a threshold, so the rate is rounded to a multiple of
1/256 when that moves it by at most 2% (0.1 becomes 26/256 = 0.1016; the kept values are scaled
by the rounded rate, so the mean is kept). With a counter-hash key the mask is computed in the
array's own shape (each element's counter from ``iota``, four 8-bit values per hashed word split
along a leading axis), which XLA fuses into the consumer: no mask or bits are written to memory.
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


def _positions(shape: tuple[int, ...]) -> jax.Array:
    """Each element's row-major index in ``shape`` as uint32, built from ``iota`` per axis (no
    reshape: the elementwise code keeps the array's own layout)."""
    out = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] > 1:
            index = jax.lax.broadcasted_iota(jnp.uint32, shape, axis)
            out = out + index * jnp.uint32(stride % 2**32)
        stride *= shape[axis]
    return out


def counter_hash_words(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """uint32 words of ``shape``, word ``i`` (row-major) being ``h(h(i + key[0]) ^ key[1])``:
    :func:`counter_hash_bits`' 32-bit words, made in place (for a 1-D shape the same values).

    >>> bits = counter_hash_words(jnp.array([1, 2], jnp.uint32), (2, 3))
    >>> bits.reshape(-1)[:3].tolist() == counter_hash_bits(jnp.array([1, 2], jnp.uint32), 32, (3,)).tolist()
    True
    """
    if math.prod(shape) > 2**32:
        raise ValueError(f"counter_hash_words: {math.prod(shape):,} words is over 2**32")
    key = jnp.asarray(key, jnp.uint32)
    return _lowbias32(_lowbias32(_positions(shape) + key[0]) ^ key[1])


def mask_bits(rate: float) -> tuple[int, int, float]:
    """``(bits, threshold, keep)``: a value of ``bits`` random bits below ``threshold`` keeps an
    element, which happens with probability ``keep``; the fewest bits (8, 16, 32) whose rounding
    moves ``rate`` by at most 2% of itself.

    >>> mask_bits(0.1), mask_bits(0.5)
    ((8, 230, 0.8984375), (8, 128, 0.5))
    >>> mask_bits(0.01)[0]
    16
    """
    if not 0.0 < rate < 1.0:
        raise ValueError(f"dropout rate must be in (0, 1), got {rate!r}")
    keep = 1.0 - rate
    for bits in (8, 16, 32):
        threshold = round(keep * 2**bits)
        if 0 < threshold < 2**bits and abs(threshold / 2**bits - keep) <= 0.02 * rate:
            return bits, threshold, threshold / 2**bits
    threshold = min(max(round(keep * 2**32), 1), 2**32 - 1)
    return 32, threshold, threshold / 2**32


def _split_axis(shape: tuple[int, ...], parts: int) -> int | None:
    """A leading (not last) axis of ``shape`` that divides into ``parts``, the largest first."""
    fits = [a for a in range(len(shape) - 1) if shape[a] % parts == 0]
    return max(fits, key=lambda a: shape[a]) if fits else None


def _hashed_values(key: jax.Array, bits: int, shape: tuple[int, ...]) -> jax.Array:
    """``shape`` values of ``bits`` bits (as uint32) from a counter-hash key: one hashed word
    gives ``32 / bits`` values, laid along a leading axis by concatenation (fusible)."""
    parts = 32 // bits
    axis = _split_axis(shape, parts) if parts > 1 else None
    if axis is None:
        return counter_hash_words(key, shape) >> jnp.uint32(32 - bits)
    small = list(shape)
    small[axis] //= parts
    words = counter_hash_words(key, tuple(small))
    low = jnp.uint32(2**bits - 1)
    pieces = [(words >> jnp.uint32(bits * j)) & low for j in range(parts)]
    return jnp.concatenate(pieces, axis=axis)


def keep_mask(key: jax.Array, rate: float, shape: tuple[int, ...]) -> tuple[jax.Array, float]:
    """A boolean mask of ``shape`` keeping each element with probability about ``1 - rate``
    (:func:`mask_bits`), and the factor the kept values are scaled by (``1 / keep``). A
    counter-hash key makes it elementwise in place (:func:`counter_hash_words`); any other key
    draws ``jax.random.bits`` of 8 (or 16, 32) bits.

    >>> key = jax.random.key(0, impl=COUNTER_HASH)
    >>> mask, scale = keep_mask(key, 0.1, (64, 1000))
    >>> round(float(mask.mean()), 2), scale
    (0.9, 1.1130434782608696)
    """
    bits, threshold, keep = mask_bits(rate)
    shape = tuple(int(d) for d in shape)
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    if typed and str(jax.random.key_impl(key)) == str(COUNTER_HASH):
        values = _hashed_values(jax.random.key_data(key), bits, shape)
        return values < jnp.uint32(threshold), 1.0 / keep
    values = jax.random.bits(key, shape, _UNSIGNED[bits])
    return values < jnp.asarray(threshold, _UNSIGNED[bits]), 1.0 / keep


def dropout_impl(backend: str | None = None) -> Any:
    """The key implementation for dropout on ``backend`` (default: JAX's default backend):
    :data:`COUNTER_HASH` on a CPU, ``"rbg"`` on accelerators (their hardware generator).

    >>> dropout_impl("gpu")
    'rbg'
    """
    return COUNTER_HASH if (backend or jax.default_backend()) == "cpu" else "rbg"
