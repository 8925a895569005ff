"""On a TPU, the fused Pallas kernels (flash and splash, ``attention.FUSED_KERNEL``) equal the
plain XLA path to bfloat16 tolerance, in the forward pass and in the gradients: padding masks
(BERT), causal packed segments with grouped key/value heads (Llama), and whole models (BERT,
Llama) under ``use_attention``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models import attention as att
from jaxfeed.models.hub import bert, decoder

pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(jax.default_backend() != "tpu", reason="the fused kernel runs on a TPU"),
]
BF16 = 2e-2  # relative error (norm of the difference over the norm) of bfloat16 results


def _qkv(b, t, h, kv, d, dtype=jnp.bfloat16):
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.normal(size=(b, t, n, d)), dtype) for n in (h, kv, kv))


@pytest.fixture(params=["flash", "splash"], autouse=True)
def kernel(request, monkeypatch):
    """Each test under both fused kernels."""
    monkeypatch.setattr(att, "FUSED_KERNEL", request.param)
    return request.param


def _both(fn):
    """``fn()`` on XLA's path, then on the fused path (``FUSED_KERNEL``'s kernel), each traced
    afresh: a second ``jax.jit`` of one function reuses its first trace whatever setting is in
    force (so the two ran XLA's path both, before the check of the kernel's call was added)."""
    out = []
    for name in ("xla", "flash"):
        with att.use_attention(name):
            lowered = jax.jit(lambda: fn()).lower()
            assert ("tpu_custom_call" in lowered.as_text()) == (name == "flash"), name
            out.append(lowered.compile()())
    return tuple(out)


def _close(a, b, tolerance=BF16):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        error = np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-12)
        assert error < tolerance, f"relative error {error:.3g} of {x.shape}"


def test_padding_mask_forward_and_gradients():
    q, k, v = _qkv(2, 256, 12, 12, 64)
    key_mask = jnp.asarray(np.arange(256)[None, :] < np.array([[256], [100]]))

    def fn():
        def loss(q, k, v):
            out = att.attention(q, k, v, key_mask=key_mask).astype(jnp.float32)
            return jnp.sum(jnp.where(key_mask[:, :, None, None], out, 0.0) ** 2), out

        return jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)

    (grads_p, out_p), (grads_f, out_f) = _both(fn)
    real = np.asarray(key_mask)
    _close(np.asarray(out_p)[real], np.asarray(out_f)[real])
    _close(grads_p, grads_f, 1.5 * BF16)


def test_causal_segments_grouped_heads():
    q, k, v = _qkv(2, 256, 8, 2, 64)
    segments = jnp.asarray(np.repeat([[1, 2], [0, 1]], 128, axis=1))

    def fn():
        return att.attention(q, k, v, segment_ids=segments, causal=True)

    _close(*_both(fn))


def test_whole_models_equal_under_both_kernels():
    config = {"vocab_size": 100, "hidden_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 512, "max_position_embeddings": 256,
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}  # fmt: skip
    encoder = bert.build(config, task="feature-extraction", num_labels=None, dtype=jnp.bfloat16,
                         param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    spec = decoder.llama_like_spec({**config, "num_key_value_heads": 2})
    lm = decoder.CausalLM(spec, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    ids = jnp.asarray(np.random.default_rng(1).integers(1, 100, (2, 128)))
    mask = jnp.ones((2, 128), jnp.int32).at[1, 90:].set(0)
    for model in (encoder, lm):
        graphdef, state = nnx.split(model)

        def fn(graphdef=graphdef, state=state):
            return nnx.merge(graphdef, state)(ids, mask)

        plain, fused = _both(fn)
        real = np.asarray(mask).astype(bool)
        _close(np.asarray(plain)[real], np.asarray(fused)[real])
