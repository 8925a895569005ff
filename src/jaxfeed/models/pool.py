"""2x2 max pooling written as reshape + max.

``flax.linen.max_pool`` lowers to ``reduce_window``, whose gradient is ``select-and-scatter``: XLA
has no deterministic GPU kernel for it, so ``--xla_gpu_deterministic_ops=true`` refuses to compile
it. For non-overlapping windows a reshape and a max compute the same thing, and the gradient is a
plain comparison mask.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """Max over non-overlapping 2x2 windows of ``(batch, H, W, C)``; odd edges are dropped (VALID).

    >>> import jax.numpy as jnp
    >>> max_pool_2x2(jnp.arange(16.0).reshape(1, 4, 4, 1))[0, :, :, 0]
    Array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    """
    b, h, w, c = x.shape
    x = x[:, : h - h % 2, : w - w % 2, :]
    return jnp.max(x.reshape(b, h // 2, 2, w // 2, 2, c), axis=(2, 4))
