"""The short-sequence attention kernel (:mod:`jaxfeed.models.kernels.short_attention`), run by
Pallas's interpreter: it equals XLA's path in values and gradients (odd lengths as ViT's 197,
padding masks, a row with no real key, heads of 32 to 256 wide), refuses what it does not
compute, is what ``"auto"`` picks on a TPU where the fused kernel is refused, and names its output
so that ``remat="attention"`` runs no second forward kernel. On the chip:
``tests/accelerator/test_short_attention_tpu.py``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models import attention as att
from jaxfeed.models.kernels import short_attention as short
from jaxfeed.models.stacked import REMAT_POLICIES


def _inputs(b, t, h, d, dtype=jnp.float32, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(key, (b, t, h, d), dtype) for key in keys)


def _xla(q, k, v, key_mask):
    b, t = q.shape[:2]
    mask = None if key_mask is None else att.dense_mask(b, t, t, key_mask=key_mask)
    return att.xla_attention(q, k, v, mask)


def _kernel(q, k, v, key_mask):
    return short.short_attention(q, k, v, key_mask=key_mask, interpret=True)


def _output_and_gradients(run, q, k, v, key_mask):
    """``run``'s output and the gradients of its output's squares' sum, in one compiled call."""

    def both(q, k, v):
        out, pullback = jax.vjp(lambda q, k, v: run(q, k, v, key_mask), q, k, v)
        return out, pullback(2 * out)

    return jax.jit(both)(q, k, v)


@pytest.mark.parametrize(
    ("shape", "lengths"),
    [((2, 13, 4, 32), None), ((2, 197, 2, 64), (150, 197)), ((1, 9, 1, 128), (0,)),
     ((2, 17, 2, 256), None)],
    ids=["4-heads-of-32", "vit-length-padded", "no-real-key", "256-wide"],
)  # fmt: skip
def test_the_kernel_equals_xla_in_values_and_gradients(shape, lengths):
    q, k, v = _inputs(*shape)
    t = shape[1]
    key_mask = None
    if lengths is not None:
        key_mask = jnp.arange(t)[None, :] < jnp.asarray(lengths)[:, None]
    out_k, grads_k = _output_and_gradients(_kernel, q, k, v, key_mask)
    out_x, grads_x = _output_and_gradients(_xla, q, k, v, key_mask)
    np.testing.assert_allclose(out_k, out_x, atol=2e-6)
    for a, b in zip(grads_k, grads_x, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_bfloat16_inputs_stay_within_bfloat16_of_xla():
    q, k, v = _inputs(2, 21, 4, 64, jnp.bfloat16)
    key_mask = jnp.arange(21)[None, :] < jnp.asarray([[21], [10]])
    out_k, out_x = (jax.jit(run)(q, k, v, key_mask) for run in (_kernel, _xla))
    assert out_k.dtype == jnp.bfloat16
    error = jnp.linalg.norm((out_k - out_x).astype(jnp.float32)) / jnp.linalg.norm(
        out_x.astype(jnp.float32)
    )
    assert float(error) < 1e-2


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "expected"),
    [((1, 8, 4, 64), (1, 8, 2, 64), "4 query heads over 2 key-value heads"),
     ((1, 8, 2, 64), (1, 9, 2, 64), "8 queries to 9 keys"),
     ((1, 8, 2, 48), (1, 8, 2, 48), "head width 48"),
     ((1, 8, 1, 64), (1, 8, 1, 64), "1 heads of 64 (64 wide) is not a multiple of 128"),
     ((1, 513, 2, 64), (1, 513, 2, 64), "513 tokens: more than 512")],
)  # fmt: skip
def test_it_refuses_what_it_does_not_compute_and_says_why(q_shape, k_shape, expected):
    q, k = jnp.ones(q_shape), jnp.ones(k_shape)
    assert expected in short.refusal(q, k, k)
    with pytest.raises(ValueError, match="short_attention cannot take these inputs"):
        short.short_attention(q, k, k, interpret=True)


@pytest.fixture
def on_one_tpu(monkeypatch):
    """The refusals' view of the machine: one TPU chip; the kernels are spies."""
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(jax, "device_count", lambda *a: 1)
    calls = []
    monkeypatch.setattr(short, "short_attention", lambda q, *a, **kw: calls.append("short") or q)
    monkeypatch.setattr(att, "splash_attention", lambda q, *a, **kw: calls.append("splash") or q)
    return calls


def test_auto_runs_it_where_the_fused_kernel_is_refused_on_a_tpu(on_one_tpu, monkeypatch):
    vit_q = jnp.ones((1, 197, 12, 64))
    bert_q = jnp.ones((1, 128, 12, 64))
    long_q = jnp.ones((1, 512, 12, 64))
    att.attention(vit_q, vit_q, vit_q)  # 197 patches: splash refused (not a multiple of 128)
    att.attention(bert_q, bert_q, bert_q, key_mask=jnp.ones((1, 128)))  # narrow heads, 128
    att.attention(long_q, long_q, long_q)  # splash takes 512 tokens
    assert on_one_tpu == ["short", "short", "splash"]
    on_one_tpu.clear()
    dropout = att.WeightDropout(att.Dropout(0.1, deterministic=False), nnx.Rngs(dropout=0))
    monkeypatch.setattr(att, "FUSED_DROPOUT", False)
    att.attention(vit_q, vit_q, vit_q, dropout=dropout)  # dropout: XLA's path
    att.attention(bert_q, bert_q, bert_q, causal=True)  # causal: XLA's path
    att.attention(vit_q, vit_q, vit_q, implementation="xla")
    monkeypatch.setattr(att, "SHORT_KERNEL", False)
    att.attention(vit_q, vit_q, vit_q)
    assert on_one_tpu == []


def test_the_refusal_on_this_machine_names_the_backend():
    q = jnp.ones((1, 197, 12, 64))
    assert att.short_refusal(q, q, q) == f"the backend is {jax.default_backend()}, not tpu"


def test_remat_attention_keeps_its_output_so_the_forward_kernel_runs_once():
    """The output feeds the next projection, whose weight gradient needs it: named
    :data:`attention.RESIDUALS`, ``remat="attention"`` keeps it; unnamed, a checkpointed layer's
    backward pass runs the forward kernel again (counted as the lowered step's exponentials: the
    forward kernel computes one a head, the backward kernel one)."""
    q, w = jnp.ones((1, 16, 2, 64)), jnp.ones((64, 64))

    def exponentials(name):
        def layer(q, w):
            out = short.short_attention(q, q, q, interpret=True, residual_checkpoint_name=name)
            return jnp.sum(out @ w)

        policy = REMAT_POLICIES["attention"]
        step = jax.jit(jax.value_and_grad(jax.checkpoint(layer, policy=policy), argnums=(0, 1)))
        return step.lower(q, w).as_text().count("exponential")

    assert exponentials(att.RESIDUALS) == 4  # 2 heads: forward 2, backward 2
    assert exponentials(None) == 6  # the forward kernel once more
