"""On a TPU, the short-sequence kernel (:mod:`jaxfeed.models.kernels.short_attention`, which
``"auto"`` runs where the fused kernel is refused) equals XLA's path to bfloat16 tolerance in the
forward pass and the gradients: ViT's 197 patches of 64-wide heads, BERT's padded 128 tokens,
heads of 128 and 32, and a ViT and a BERT model whole under ``"auto"`` and ``"xla"``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models import attention as att
from jaxfeed.models.hub import bert, vit
from jaxfeed.models.kernels.short_attention import short_attention

pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(jax.default_backend() != "tpu", reason="the Pallas kernel runs on a TPU"),
]
BF16 = 2e-2  # relative error (norm of the difference over the norm) of bfloat16 results


def _close(a, b, tolerance=BF16):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        error = np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-12)
        assert error < tolerance, f"relative error {error:.3g} of {x.shape}"


@pytest.mark.parametrize(("b", "t", "h", "d", "padded"),
                         [(4, 197, 12, 64, False), (4, 128, 12, 64, True), (2, 200, 4, 128, True),
                          (2, 64, 8, 32, False)])  # fmt: skip
def test_the_kernel_equals_xla_forward_and_gradients(b, t, h, d, padded):
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.bfloat16) for _ in range(3))
    key_mask = (
        jnp.asarray(np.arange(t)[None, :] < rng.integers(t // 3, t, (b, 1))) if padded else None
    )
    real = np.ones((b, t), bool) if key_mask is None else np.asarray(key_mask)

    def loss(run):
        def fn(q, k, v):
            out = run(q, k, v).astype(jnp.float32)
            return jnp.sum(jnp.where(real[:, :, None, None], out, 0.0) ** 2), out

        return jax.jit(jax.grad(fn, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    mask = None if key_mask is None else att.dense_mask(b, t, t, key_mask=key_mask)
    grads_k, out_k = loss(lambda q, k, v: short_attention(q, k, v, key_mask=key_mask))
    grads_x, out_x = loss(lambda q, k, v: att.xla_attention(q, k, v, mask))
    _close(np.asarray(out_k)[real], np.asarray(out_x)[real])
    _close(grads_k, grads_x, 1.5 * BF16)


def test_models_run_it_under_auto_and_equal_xla():
    vit_config = {"model_type": "vit", "hidden_size": 256, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "intermediate_size": 512, "image_size": 224,
                  "patch_size": 16}  # fmt: skip
    image = vit.FAMILY.build(vit_config, task="image-classification", num_labels=10,
                             dtype=jnp.bfloat16, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    bert_config = {"vocab_size": 100, "hidden_size": 256, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "intermediate_size": 512,
                   "max_position_embeddings": 128, "hidden_dropout_prob": 0.0,
                   "attention_probs_dropout_prob": 0.0}  # fmt: skip
    text = bert.build(bert_config, task="feature-extraction", num_labels=None,
                      dtype=jnp.bfloat16, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    pixels = jnp.asarray(np.random.default_rng(1).normal(size=(4, 224, 224, 3)), jnp.float32)
    ids = jnp.asarray(np.random.default_rng(1).integers(1, 100, (2, 128)))
    mask = jnp.ones((2, 128), jnp.int32).at[1, 90:].set(0)
    runs = [(image, lambda m: m(pixel_values=pixels), np.ones((4,), bool)),
            (text, lambda m: m(ids, mask), np.asarray(mask).astype(bool))]  # fmt: skip
    for model, call, real in runs:
        graphdef, state = nnx.split(model)

        def fn(graphdef=graphdef, state=state, call=call):
            return call(nnx.merge(graphdef, state))

        with att.use_attention("xla"):  # each traced afresh (a second jit of fn reuses its trace)
            plain = jax.jit(lambda fn=fn: fn())()
        with att.use_attention("auto"):
            lowered = jax.jit(lambda fn=fn: fn()).lower()
            assert "_short_attention_forward" in lowered.as_text()  # the kernel ran
            short = lowered.compile()()
        _close(np.asarray(plain)[real], np.asarray(short)[real])
