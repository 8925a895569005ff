"""Dropout that draws few random bits (``jaxfeed.models.dropout``, ``runtime.prng.keep_mask``): the
rate it keeps, the mean it preserves, reproducible masks that differ by key, independent parts of
one hashed word, 8-bit draws (a quarter of the hashed words; ``u8`` bits from other keys), and
the Hub models use it."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models.dropout import Dropout, dropout
from jaxfeed.models.hub import bert
from jaxfeed.runtime.prng import COUNTER_HASH, keep_mask, mask_bits

SHAPE = (8, 4, 64, 64)  # 131,072 values, a leading axis of 8 to split a word's bytes along


def _key(i: int = 0, impl=COUNTER_HASH) -> jax.Array:
    return jax.random.fold_in(jax.random.key(3, impl=impl), i)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.01])
@pytest.mark.parametrize("impl", [COUNTER_HASH, "threefry2x32"])
def test_rate_is_kept_and_the_mean_preserved(rate, impl):
    bits, threshold, keep = mask_bits(rate)
    assert abs((1 - keep) - rate) <= 0.02 * rate and threshold == round(keep * 2**bits)
    mask, scale = keep_mask(_key(impl=impl), rate, SHAPE)
    assert mask.dtype == jnp.bool_ and mask.shape == SHAPE
    assert abs(float(mask.mean()) - keep) < 4 * np.sqrt(keep * (1 - keep) / mask.size)
    out = dropout(jnp.ones(SHAPE), rate, _key(1, impl))
    assert abs(float(out.mean()) - 1.0) < 0.03 and scale == pytest.approx(1 / keep)


def test_masks_repeat_per_key_and_differ_between_keys():
    a, b = (np.asarray(keep_mask(_key(5), 0.5, SHAPE)[0]) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    for other in (_key(6), jax.random.split(_key(5))[0]):
        c = np.asarray(keep_mask(other, 0.5, SHAPE)[0])
        assert abs((a == c).mean() - 0.5) < 0.01  # independent masks agree half the time


def test_the_bytes_of_one_word_are_independent():
    """The four 8-bit values of a hashed word land on the quarters of the split axis: those
    quarters must be as independent as any two masks."""
    mask = np.asarray(keep_mask(_key(2), 0.5, SHAPE)[0])
    quarters = np.split(mask, 4, axis=0)
    for i in range(4):
        for j in range(i + 1, 4):
            assert abs((quarters[i] == quarters[j]).mean() - 0.5) < 0.01
    within = mask[0, 0]  # neighbours inside a word's quarter: independent too
    assert abs((within[:, 1:] == within[:, :-1]).mean() - 0.5) < 0.02


def _multiplies(jaxpr) -> list[tuple[int, ...]]:
    """Shapes of the uint32 multiplies (the hash's) in ``jaxpr`` and the jaxprs inside it."""
    out = [e.outvars[0].aval.shape for e in jaxpr.eqns
           if e.primitive.name == "mul" and e.outvars[0].aval.dtype == jnp.uint32]  # fmt: skip
    for sub in jax.extend.core.subjaxprs(jaxpr):
        out += _multiplies(sub)
    return out


def test_eight_bit_draws_hash_a_quarter_of_the_words():
    jaxpr = jax.make_jaxpr(lambda k: keep_mask(k, 0.1, SHAPE)[0])(_key()).jaxpr
    shapes = _multiplies(jaxpr)
    hashed = [s for s in shapes if len(s) == len(SHAPE)]
    assert hashed and all(int(np.prod(s)) == int(np.prod(SHAPE)) // 4 for s in hashed), shapes
    text = jax.jit(lambda k: keep_mask(k, 0.1, SHAPE)[0]).lower(_key()).as_text()
    assert "while" not in text and "rng_bit_generator" not in text  # elementwise, no loop


def test_other_keys_draw_eight_bit_values():
    jaxpr = str(jax.make_jaxpr(lambda k: keep_mask(k, 0.1, SHAPE)[0])(_key(impl="rbg")))
    assert "random_bits[bit_width=8" in jaxpr and "bit_width=32" not in jaxpr


def test_module_is_off_in_eval_and_needs_a_key_when_on():
    x = jnp.ones((4, 64))
    layer = Dropout(0.5, deterministic=False)
    y = layer(x, rngs=nnx.Rngs(dropout=_key()))
    assert set(np.unique(np.asarray(y)).tolist()) == {0.0, 2.0}
    layer.eval()
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(x))
    assert float(Dropout(1.0, deterministic=False)(x, rngs=_key()).sum()) == 0.0
    with pytest.raises(TypeError, match="has no random key"):
        Dropout(0.5, deterministic=False)(x)
    with pytest.raises(ValueError, match="no broadcast_dims"):
        Dropout(0.5, broadcast_dims=(0,))


def test_hub_models_use_it():
    config = {"vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 16}  # fmt: skip
    model = bert.build(config, task="sequence-classification", num_labels=2, dtype=None,
                       param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    layers = [m for _, m in nnx.iter_modules(model) if isinstance(m, nnx.Dropout)]
    assert layers and all(isinstance(m, Dropout) for m in layers)
