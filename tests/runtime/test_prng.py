"""The counter-hash PRNG behind dropout on CPU: reproducible bits, as random as dropout needs
(balanced bits, independent keys and neighbours), every bit width, and no loop in the program
(XLA:CPU's threefry is a rolled loop over whole arrays: the reason this exists)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfeed.runtime.prng import COUNTER_HASH, counter_hash_bits, dropout_impl

N = 200_000


def _key(i: int = 0) -> jax.Array:
    return jax.random.fold_in(jax.random.key(7, impl=COUNTER_HASH), i)


def test_bits_are_reproducible_and_are_the_documented_hash():
    a = np.asarray(jax.random.bits(_key(), (4,), jnp.uint32))
    b = np.asarray(jax.jit(lambda k: jax.random.bits(k, (4,), jnp.uint32))(_key()))
    np.testing.assert_array_equal(a, b)
    # h(h(i + 1) ^ 2) for i = 0, 1, 2 with lowbias32 worked out in Python integers: a change of
    # the hash would change every run's dropout, so it is pinned; bytes come little-end first
    data = jnp.array([1, 2], jnp.uint32)
    assert counter_hash_bits(data, 32, (3,)).tolist() == [3405767568, 4056789687, 3568491650]
    assert counter_hash_bits(data, 8, (5,)).tolist() == [144, 227, 255, 202, 183]


def test_every_bit_is_balanced_and_neighbours_are_uncorrelated():
    words = np.asarray(jax.random.bits(_key(), (N,), jnp.uint32))
    ones = np.unpackbits(words.view(np.uint8)).reshape(N, 32).mean(axis=0)
    assert np.all(np.abs(ones - 0.5) < 0.01), ones  # 0.5 +- 9 sigma of 1/sqrt(4N)
    u = words / 2**32
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    assert len(np.unique(words)) > 0.99 * N


def test_keys_from_fold_in_and_split_give_independent_masks():
    masks = [np.asarray(jax.random.bernoulli(_key(i), 0.5, (N,))) for i in range(4)]
    masks += [np.asarray(jax.random.bernoulli(k, 0.5, (N,))) for k in jax.random.split(_key(9), 3)]
    for i, a in enumerate(masks):
        assert abs(a.mean() - 0.5) < 0.01
        for b in masks[i + 1 :]:
            assert abs((a == b).mean() - 0.5) < 0.01  # independent: agree half the time
            # nor the same mask shifted (a counter hash keyed by addition alone would be)
            assert max(abs((a[s:] == b[:-s]).mean() - 0.5) for s in (1, 2, 3, 64)) < 0.01


@pytest.mark.parametrize("dtype", [jnp.uint8, jnp.uint16, jnp.uint32])
def test_each_width_is_uniform(dtype):
    bits = np.asarray(jax.random.bits(_key(3), (N + 3,), dtype))  # not a multiple of a word
    assert bits.dtype == dtype and bits.shape == (N + 3,)
    top = np.iinfo(dtype).max + 1
    counts = np.histogram(bits, bins=16, range=(0, top))[0]
    expected = (N + 3) / 16
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 50, counts  # 15 degrees of freedom: 50 is far in the tail
    floats = np.asarray(jax.random.uniform(_key(4), (N,), jnp.bfloat16)).astype(np.float32)
    assert abs(floats.mean() - 0.5) < 0.01


def test_the_mask_is_elementwise_code_not_a_loop_and_bad_widths_are_named():
    hlo = jax.jit(lambda k: jax.random.bernoulli(k, 0.9, (1000,))).lower(_key()).as_text()
    assert "while" not in hlo and "rng_bit_generator" not in hlo
    threefry = jax.jit(lambda k: jax.random.bernoulli(k, 0.9, (1000,)))
    assert "while" in threefry.lower(jax.random.key(0)).as_text()  # what it replaces, on CPU
    with pytest.raises(ValueError, match="bit_width must be 8, 16, 32 or 64, got 12"):
        counter_hash_bits(jnp.zeros(2, jnp.uint32), 12, (3,))
    assert dropout_impl("cpu") is COUNTER_HASH and dropout_impl("gpu") == "rbg"
