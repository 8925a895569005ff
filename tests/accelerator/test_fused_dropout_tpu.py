"""On a TPU, attention dropout inside the fused splash kernel
(``jaxfeed.models.kernels.splash_dropout``, compiled: the chip's generator or the position hash)
equals XLA's path given the keep mask the kernel drew (written out by ``keep_mask`` with the same
seeding), to bfloat16 tolerance, in the forward pass and the q, k, v gradients: padding (BERT)
and causal packed segments with grouped key/value heads (Llama), in blocks of 256 and 512."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfeed.models import attention as att
from jaxfeed.models.dropout import Dropout
from jaxfeed.models.kernels import splash_dropout as sd

pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(jax.default_backend() != "tpu", reason="the fused kernel runs on a TPU"),
]
BF16 = 2e-2  # relative error (norm of the difference over the norm) of bfloat16 results
B, T, D = 2, 512, 64


def _close(a, b, tolerance=BF16):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        error = np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-12)
        assert error < tolerance, f"relative error {error:.3g} of {x.shape}"


def _xla_with_keep(q, k, v, keep, scale, dense):
    """XLA's path (``attend``) with the keep mask ``(B, H, T, S)`` given."""
    b, t, h, d = q.shape
    kv, s = k.shape[2], k.shape[1]
    logits = att.grouped_logits(q.reshape(b, t, kv, h // kv, d), k)
    keep = keep.reshape(b, kv, h // kv, t, s)
    return att.attend(logits, dense[:, None, None], keep, v, scale).reshape(b, t, h, d)


@pytest.mark.parametrize("block", [256, 512])
@pytest.mark.parametrize("case", ["padding", "causal-segments-grouped"])
@pytest.mark.parametrize("prng", ["hardware", "hash"])
def test_fused_dropout_equals_the_xla_path_with_the_kernels_mask(prng, case, block, monkeypatch):
    monkeypatch.setattr(att, "DROPOUT_BITS", prng)
    monkeypatch.setattr(att, "FLASH_BLOCK", block)
    heads, kv_heads = (8, 2) if "grouped" in case else (12, 12)
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, n, D)), jnp.bfloat16)
               for n in (heads, kv_heads, kv_heads))  # fmt: skip
    if case == "padding":
        masks = {"key_mask": jnp.asarray(np.arange(T)[None] < np.array([[T], [200]]))}
    else:
        masks = {"segment_ids": jnp.asarray(np.repeat([[1, 2], [0, 1]], T // 2, axis=1)),
                 "causal": True}  # fmt: skip
    dropout = att.WeightDropout(Dropout(0.1, deterministic=False), jax.random.key(3))
    seed, threshold, scale = dropout.fused_draw()

    def draw(seed):
        return sd.keep_mask(seed, (B, heads, T, T), threshold=threshold, block_q=block,
                            block_kv=block, prng=prng)  # fmt: skip

    keep = jax.jit(draw)(seed)
    assert abs(float(keep.mean()) - 230 / 256) < 0.005
    dense = att.dense_mask(B, T, T, **masks)
    cotangent = jnp.asarray(rng.normal(size=q.shape), jnp.bfloat16)
    real = np.asarray(dense.any(-1))  # queries that see a key (all here)

    def run(fn):
        def both(q, k, v):
            out, pullback = jax.vjp(fn, q, k, v)
            return out, pullback(cotangent)

        return jax.jit(both)(q, k, v)

    out_f, grads_f = run(lambda q, k, v: att.splash_attention(q, k, v, dropout=dropout, **masks))
    out_x, grads_x = run(lambda q, k, v: _xla_with_keep(q, k, v, keep, scale, dense))
    _close(np.asarray(out_f, np.float32)[real], np.asarray(out_x, np.float32)[real])
    _close(grads_f, grads_x, 1.5 * BF16)
