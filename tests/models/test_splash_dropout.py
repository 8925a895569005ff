"""Dropout on the attention weights inside the fused splash kernel
(``jaxfeed.models.kernels.splash_dropout``), run by Pallas's interpreter on a CPU (its bits from
the position hash; the chip's generator is checked by tests/accelerator/test_fused_dropout.py):
the output and the gradients of q, k and v equal XLA's path (``attend``) given the keep mask the
kernel drew (written out by ``keep_mask``) for padding, causal packed segments and grouped heads;
keeping every weight equals splash without dropout; the kept fraction is ``1 - rate``; the same
seed repeats the mask, another seed, head, row or block draws another; ``attention`` routes an
active jaxfeed or nnx dropout to the kernel on a TPU and refuses what it cannot draw."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models import attention as att
from jaxfeed.models.dropout import Dropout
from jaxfeed.models.kernels import splash_dropout as sd

B, T, D = 2, 256, 64


@pytest.fixture(autouse=True)
def blocks_of_128(monkeypatch):
    """Blocks of 128: a 256-token row is 2 x 2 blocks (per-block seeds, causal block skipping)."""
    monkeypatch.setattr(att, "FLASH_BLOCK", 128)


def _qkv(heads, kv_heads, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=(B, T, n, D)), jnp.float32)
                 for n in (heads, kv_heads, kv_heads))  # fmt: skip


def _masks(case):
    if case == "causal-segments":  # row 0: two packed segments; row 1: one
        return {
            "segment_ids": jnp.asarray(np.repeat([[1, 2], [3, 3]], 128, axis=1)),
            "causal": True,
        }
    return {"key_mask": jnp.asarray(np.arange(T)[None] < np.array([[T], [100]]))}


def _keep_mask(dropout, heads):
    seed, threshold, scale = dropout.fused_draw()
    keep = sd.keep_mask(seed, (B, heads, T, T), threshold=threshold, block_q=128, block_kv=128,
                        prng="hash", interpret=True)  # fmt: skip
    return keep, scale


def _xla_with_keep(q, k, v, keep, scale, dense):
    """XLA's path (``attend``) with the keep mask ``(B, H, T, S)`` given."""
    b, t, h, d = q.shape
    kv, s = k.shape[2], k.shape[1]
    logits = att.grouped_logits(q.reshape(b, t, kv, h // kv, d), k)
    visible = jnp.ones((1, 1, 1, 1, 1), bool) if dense is None else dense[:, None, None]
    keep = keep.reshape(b, kv, h // kv, t, s)
    return att.attend(logits, visible, keep, v, scale).reshape(b, t, h, d)


def _close(a, b, tolerance=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        assert np.abs(x - y).max() <= tolerance * max(np.abs(y).max(), 1.0), np.abs(x - y).max()


def _out_and_grads(fn, q, k, v):
    """``fn``'s output and the gradients of q, k, v of a random projection of it: one compile."""
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

    def both(q, k, v):
        out, pullback = jax.vjp(fn, q, k, v)
        return out, pullback(cotangent)

    fast = {"xla_backend_optimization_level": 0}  # the interpreted kernels compile in 2/3 the time
    return jax.jit(both).lower(q, k, v).compile(fast)(q, k, v)


@pytest.mark.parametrize("case", ["padding", "causal-segments", "grouped"])
def test_fused_dropout_equals_the_xla_path_with_the_kernels_mask(case):
    heads, kv_heads = (2, 1) if case == "grouped" else (1, 1)
    q, k, v = _qkv(heads, kv_heads)
    masks = _masks(case)
    dropout = att.WeightDropout(Dropout(0.3, deterministic=False), jax.random.key(7))
    keep, scale = _keep_mask(dropout, heads)
    dense = att.dense_mask(B, T, T, **masks)

    def fused(q, k, v):
        return att.splash_attention(q, k, v, interpret=True, dropout=dropout, **masks)

    def xla(q, k, v):
        return _xla_with_keep(q, k, v, keep, scale, dense)

    assert 0.65 < float(keep.mean()) < 0.75  # dropped weights, ~0.3 (rate rounded to 77/256)
    _close(_out_and_grads(fused, q, k, v), _out_and_grads(xla, q, k, v))


def test_keeping_every_weight_equals_splash_without_dropout():
    q, k, v = _qkv(1, 1)
    masks = _masks("causal-segments")
    seed = jnp.array([3, 4], jnp.int32)
    every = sd.keep_mask(seed, (B, 1, T, T), threshold=2**32 - 1, block_q=128, block_kv=128,
                         prng="hash", interpret=True)  # fmt: skip
    assert bool(every.all())  # this seed's words are all under 2**32 - 1
    segments = sd.SegmentIds(masks["segment_ids"], masks["segment_ids"])

    def fused(q, k, v):
        out = sd.dropout_splash(
            *(x.transpose(0, 2, 1, 3) for x in (q / np.sqrt(D), k, v)), seed,
            threshold=2**32 - 1, scale=1.0, causal=True, block_q=128, block_kv=128, prng="hash",
            interpret=True, segment_ids=segments,
        )  # fmt: skip
        return out.transpose(0, 2, 1, 3)

    def splash(q, k, v):
        return att.splash_attention(q, k, v, interpret=True, **masks)

    _close(_out_and_grads(fused, q, k, v), _out_and_grads(splash, q, k, v))


def test_the_kept_fraction_is_one_minus_the_rate_and_seeds_decide_the_mask():
    def mask(seed, rate=0.1):
        drop = att.WeightDropout(Dropout(rate, deterministic=False), jax.random.key(seed))
        return np.asarray(_keep_mask(drop, 2)[0])

    first = mask(0)  # (B, H, T, S): 262,144 weights
    assert abs(first.mean() - 230 / 256) < 0.004  # jaxfeed's rate 0.1 rounds to 26/256
    assert abs(mask(0, rate=0.5).mean() - 0.5) < 0.004
    np.testing.assert_array_equal(first, mask(0))  # the same seed, the same mask
    assert (first != mask(1)).mean() > 0.1  # another seed, another mask
    blocks = [first[b, h, i : i + 128, j : j + 128] for b in range(B) for h in range(2)
              for i in (0, 128) for j in (0, 128)]  # fmt: skip
    for n, one in enumerate(blocks):  # every row, head and block draws its own bits
        for other in blocks[n + 1 :]:
            assert (one != other).mean() > 0.1


def test_two_calls_draw_two_seeds_and_the_same_key_repeats():
    drop, rngs = Dropout(0.5, deterministic=False), nnx.Rngs(dropout=0)
    first, second = (att.WeightDropout(drop, rngs).fused_draw()[0] for _ in range(2))
    assert (first != second).any()  # one draw of the stream per call
    again = att.WeightDropout(drop, nnx.Rngs(dropout=0)).fused_draw()[0]
    np.testing.assert_array_equal(np.asarray(again), np.asarray(first))


def test_fused_draws_follow_the_modules_rate():
    key = jax.random.key(0)
    seed, threshold, scale = att.WeightDropout(Dropout(0.1), key).fused_draw()
    assert seed.dtype == jnp.int32 and seed.shape == (2,)
    assert (threshold, scale) == (230 << 24, 256 / 230)  # jaxfeed's rounded rate, as its masks
    _, threshold, scale = att.WeightDropout(nnx.Dropout(0.1), key).fused_draw()
    assert threshold == round(0.9 * 2**32) and scale == pytest.approx(1 / 0.9)  # nnx's own rate


class _OwnDropout(nnx.Dropout):
    def __call__(self, inputs, *, deterministic=None, rngs=None):
        return inputs * 0.5


def test_attention_takes_the_fused_kernel_for_dropout_on_a_tpu_and_refuses_what_it_cannot_draw(
    monkeypatch,
):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    q = jnp.ones((1, 512, 2, 64))
    key = jax.random.key(0)
    for module in (Dropout(0.1, deterministic=False), nnx.Dropout(0.1, deterministic=False)):
        assert att.flash_refusal(q, q, q, dropout=att.active_dropout(module, key)) is None
    assert "by a function" in att.flash_refusal(q, q, q, dropout=lambda w: w)
    own = att.WeightDropout(_OwnDropout(0.1, deterministic=False), key)
    assert "_OwnDropout (its own call)" in att.flash_refusal(q, q, q, dropout=own)
    whole_rows = att.WeightDropout(nnx.Dropout(0.1, broadcast_dims=(0,)), key)
    assert "broadcast_dims" in att.flash_refusal(q, q, q, dropout=whole_rows)
    drop = att.WeightDropout(Dropout(0.1), key)
    monkeypatch.setattr(att, "FUSED_KERNEL", "flash")
    assert "splash only" in att.flash_refusal(q, q, q, dropout=drop)
    monkeypatch.setattr(att, "FUSED_KERNEL", "splash")
    monkeypatch.setattr(att, "FUSED_DROPOUT", False)  # the switch back to XLA's path
    assert "FUSED_DROPOUT is off" in att.flash_refusal(q, q, q, dropout=drop)
    monkeypatch.setattr(att, "FUSED_DROPOUT", True)
    calls = []
    monkeypatch.setattr(att, "splash_attention",
                        lambda *a, **kw: calls.append(kw["dropout"]) or a[0])  # fmt: skip
    att.attention(q, q, q, dropout=drop)
    assert calls == [drop]


def test_bad_settings_are_refused_clearly():
    x = jnp.ones((1, 1, 256, 8))
    seed = jnp.zeros(2, jnp.int32)
    with pytest.raises(ValueError, match="interpreter has no TPU generator"):
        sd.dropout_splash(x, x, x, seed, threshold=2**31, scale=2.0, interpret=True)
    with pytest.raises(ValueError, match="block_q=192 must be a multiple of 128"):
        sd.dropout_splash(x, x, x, seed, threshold=2**31, scale=2.0, block_q=192, prng="hash")
    with pytest.raises(ValueError, match=r"threshold must be in \[1, 2\*\*32\)"):
        sd.keep_mask(seed, (1, 1, 256, 256), threshold=0, block_q=128, block_kv=128)
