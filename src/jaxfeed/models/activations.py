"""The activations ``transformers`` names in ``config.json`` (``hidden_act``, ``activation``,
``activation_function``), as its ``ACT2FN`` computes them; one table for every Hub family.

Exact GELU is ``x / 2 * (1 + erf(x / sqrt(2)))``, the formula of PyTorch's ``gelu``, not
``jax.nn.gelu(approximate=False)``'s ``x / 2 * erfc(-x / sqrt(2))``: the same function (within
float32 rounding), but XLA expands ``erfc`` into two polynomials, an exponential and a division
evaluated for every element, ``erf`` into one rational polynomial. On a TPU v5e the BERT-base
32x512 step spent 8.9 of its 131.8 ms on the ``erfc`` of the backward pass alone (profile of
``benchmarks/accelerator.py --profile``).

>>> import jax.numpy as jnp
>>> x = jnp.linspace(-6.0, 6.0, 1001)
>>> bool(jnp.abs(gelu(x) - jax.nn.gelu(x, approximate=False)).max() < 1e-6)
True
>>> float(ACTIVATIONS["relu"](jnp.array(-1.0)))
0.0
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


def gelu(x: jax.Array) -> jax.Array:
    """Exact GELU, ``x * Phi(x)`` with the normal CDF written with ``erf`` (see the module).

    >>> round(float(gelu(jnp.array(1.0))), 6)
    0.841345
    """
    half = np.sqrt(0.5).astype(x.dtype)
    return x * (0.5 * (1 + jax.lax.erf(x * half))).astype(x.dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU's tanh approximation (``gelu_new``, ``gelu_pytorch_tanh``, ``gelu_fast``).

    >>> round(float(gelu_tanh(jnp.array(1.0))), 6)
    0.841192
    """
    return jax.nn.gelu(x, approximate=True)


#: ``ACT2FN``'s names and what each computes.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": gelu,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_fast": gelu_tanh,
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}
