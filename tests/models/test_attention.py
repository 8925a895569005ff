"""The Hub models' one attention function (``jaxfeed.models.attention``): on a CPU ``"auto"``
takes the plain XLA path, which equals a reference softmax attention for padding masks, packed
segments, causality, grouped heads and dropout; ``"flash"`` refuses clearly where the fused kernel
cannot run; the choice comes from ``use_attention`` or ``$JAXFEED_ATTENTION``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfeed.models import attention as att


def _qkv(b=2, t=6, h=4, kv=2, d=8, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    return q, k, v


def _reference(q, k, v, allowed):
    """Per (row, head, query) softmax over the allowed keys, in numpy float64."""
    q, k, v, allowed = (np.asarray(x, np.float64) for x in (q, k, v, allowed))
    b, _, h, d = q.shape
    group = h // k.shape[2]
    out = np.zeros_like(q)
    for i in range(b):
        for j in range(h):
            logits = q[i, :, j] @ k[i, :, j // group].T / np.sqrt(d)
            logits = np.where(allowed[i] > 0, logits, -np.inf)
            w = np.exp(logits - logits.max(-1, keepdims=True))
            out[i, :, j] = (w / w.sum(-1, keepdims=True)) @ v[i, :, j // group]
    return out


def test_cpu_auto_is_the_xla_path():
    q, k, v = _qkv()
    assert att.flash_refusal(q, k, v) == f"the backend is {jax.default_backend()}, not tpu"
    got = att.attention(q, k, v, implementation="auto")
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, np.ones((2, 6, 6))), atol=1e-5)


def test_padding_segments_and_causal_masks_equal_the_reference():
    q, k, v = _qkv()
    key_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    got = att.attention(q, k, v, key_mask=key_mask)
    allowed = np.broadcast_to(key_mask[:, None, :], (2, 6, 6))
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, allowed), atol=1e-5)
    segments = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]])
    got = att.attention(q, k, v, segment_ids=segments, causal=True)
    tril = np.tril(np.ones((6, 6)))
    allowed = (segments[:, :, None] == segments[:, None, :]) * tril
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, allowed), atol=1e-5)


def test_dropout_applies_to_the_weights():
    q, k, v = _qkv()
    zero = att.attention(q, k, v, dropout=lambda w: w * 0.0)
    assert float(jnp.abs(zero).max()) == 0.0


def test_flash_refuses_clearly_where_it_cannot_run():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match='attention="flash" cannot run here'):
        att.attention(q, k, v, implementation="flash")
    with pytest.raises(ValueError, match="one of auto, xla, flash"):
        att.attention(q, k, v, implementation="fast")


def test_choice_from_context_and_environment(monkeypatch):
    monkeypatch.setenv(att.ENV, "xla")
    assert att.current_implementation() == "xla"
    with att.use_attention("flash"):
        assert att.current_implementation() == "flash"
    assert att.current_implementation() == "xla"
    monkeypatch.setenv(att.ENV, "nonsense")
    with pytest.raises(ValueError, match="JAXFEED_ATTENTION"):
        att.current_implementation()


def test_flash_refusals_name_the_reason(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    q = jnp.ones((1, 256, 2, 128))
    assert att.flash_refusal(q, q, q) is None
    narrow = jnp.ones((1, 256, 2, 64))  # BERT-base's heads: XLA's path measured faster
    assert "head width 64 under 128" in att.flash_refusal(narrow, narrow, narrow)
    assert att.flash_refusal(narrow, narrow, narrow, implementation="flash") is None
    assert "multiples of 128" in att.flash_refusal(jnp.ones((1, 197, 2, 128)), q, q)
    assert "dropout" in att.flash_refusal(q, q, q, dropout=lambda w: w)
    assert "sliding window" in att.flash_refusal(q, q, q, mask=jnp.ones((1, 256, 256), bool))
    assert "head width" in att.flash_refusal(jnp.ones((1, 256, 2, 192)), q, q)
    monkeypatch.setattr(jax, "device_count", lambda: 4)
    assert "several devices" in att.flash_refusal(q, q, q)
    assert att.flash_refusal(q, q, q, implementation="flash") is None


@pytest.fixture
def interpreted_flash(monkeypatch):
    """The Pallas TPU flash kernel run by Pallas's interpreter (on a CPU)."""
    import functools

    from jax.experimental import pallas as pl
    from jax.experimental.pallas.ops.tpu import flash_attention as kernel

    monkeypatch.setattr(kernel.pl, "pallas_call", functools.partial(pl.pallas_call, interpret=True))


@pytest.mark.parametrize("case", ["padding", "causal-segments"])
def test_flash_path_equals_xla_path_interpreted(interpreted_flash, case):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 128, 2, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(1, 128, 1, 64)), jnp.float32) for _ in range(2))
    kwargs = (
        {"key_mask": jnp.asarray(np.arange(128)[None] < 100)}
        if case == "padding"
        else {"segment_ids": jnp.asarray(np.repeat([[1, 2]], 64, axis=1)), "causal": True}
    )

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, **kwargs) ** 2)

    def xla(q, k, v, **kw):
        return att.attention(q, k, v, implementation="xla", **kw)

    for a, b in ((att.flash_attention(q, k, v, **kwargs), xla(q, k, v, **kwargs)),
                 (jax.grad(loss, (1, 2, 3))(att.flash_attention, q, k, v),
                  jax.grad(loss, (1, 2, 3))(xla, q, k, v))):  # fmt: skip
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-4)


def test_flash_pairs_each_query_head_with_its_groups_kv_head_interpreted(interpreted_flash):
    """Grouped-query attention with 2 key/value heads and 4 query heads: query heads 0, 1 read
    key/value head 0 and heads 2, 3 read head 1, as the XLA path and transformers group them
    (with one key/value head every layout agrees, so the test above cannot tell)."""
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.normal(size=(1, 128, 4, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(1, 128, 2, 8)), jnp.float32) for _ in range(2))
    key_mask = jnp.asarray(np.arange(128)[None] < 100)
    got = np.asarray(att.flash_attention(q, k, v, key_mask=key_mask))
    allowed = np.broadcast_to(np.asarray(key_mask)[:, None, :], (1, 128, 128))
    np.testing.assert_allclose(got, _reference(q, k, v, allowed), rtol=1e-4, atol=1e-4)
    xla = att.attention(q, k, v, key_mask=key_mask, implementation="xla")
    np.testing.assert_allclose(got, np.asarray(xla), rtol=1e-4, atol=1e-4)
