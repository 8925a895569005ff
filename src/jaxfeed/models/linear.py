"""Linear models: :class:`LinearModel` (multinomial logistic regression, or a linear regressor,
on the inputs: images averaged over ``pool`` x ``pool`` blocks first) and :class:`NGramModel`
(the same on a bag of hashed token n-grams). Each splits into :meth:`features` (fixed, no
parameters) and one linear layer, so that a full-batch fit of the layer on precomputed features
(:func:`jaxfeed.train.linear_fit.fit_linear`, what ``jaxfeed train`` compares its default model
with) is the model's own: its weights go into the layer as they are.

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> model = LinearModel(3, input_shape=(8, 8, 1), pool=2, rngs=nnx.Rngs(0))
>>> model.features(jnp.ones((2, 8, 8, 1))).shape, model(jnp.ones((2, 8, 8, 1))).shape
((2, 16), (2, 3))
>>> bag = NGramModel(100, 2, n=2, buckets=64, rngs=nnx.Rngs(0))
>>> ids = jnp.array([[5, 6, 7, 0]]); mask = jnp.array([[1, 1, 1, 0]])
>>> index, value = bag.features(ids, mask)
>>> index.shape, round(float((value**2).sum()), 6), bag(ids, mask).shape
((1, 8), 1.0, (1, 2))
>>> import numpy as np  # the same features on the host
>>> bool((np.asarray(index) == bag.features(np.asarray(ids), np.asarray(mask))[0]).all())
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxfeed.models.nnx import axes

# n-gram hashing (uint32 arithmetic, as numpy and XLA both wrap it): a polynomial of the ids
# with an odd multiplier, mixed by a multiply-xorshift (MurmurHash3's finaliser constants)
_MULTIPLIER, _MIX1, _MIX2 = 0x01000193, 0x85EBCA6B, 0xC2B2AE35


def pooled_shape(input_shape: Sequence[int], pool: int) -> tuple[int, ...]:
    """The shape of one example after :class:`LinearModel` averages its first two axes over
    ``pool`` x ``pool`` blocks (a remainder is cropped); inputs of one axis are not pooled.

    >>> pooled_shape((32, 30, 3), 4), pooled_shape((10,), 4)
    ((8, 7, 3), (10,))
    """
    shape = tuple(int(d) for d in input_shape)
    if len(shape) < 2 or pool <= 1:
        return shape
    return (shape[0] // pool, shape[1] // pool, *shape[2:])


class LinearModel(nnx.Module):
    """One linear layer on the inputs flattened: with the cross-entropy loss, multinomial
    logistic regression; with a squared error, a linear regressor. Inputs of two or more axes
    (images, spectrograms) are averaged over ``pool`` x ``pool`` blocks of their first two axes
    first (``pool=1``: as they are). The weights start at zero (the fit is convex).

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> LinearModel(2, input_shape=(5,), rngs=nnx.Rngs(0))(jnp.ones((4, 5))).tolist()
    [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    """

    def __init__(
        self, num_classes: int, input_shape: Sequence[int], *, pool: int = 1, rngs: nnx.Rngs
    ) -> None:
        pool = int(pool)
        if pool < 1:
            raise ValueError(f"LinearModel takes pool >= 1, got {pool}")
        shape = tuple(int(d) for d in input_shape)
        pooled = pooled_shape(shape, pool)
        if min(pooled, default=1) < 1:
            raise ValueError(f"LinearModel: pool {pool} is larger than the inputs {shape}")
        self.num_classes, self.input_shape, self.pool = num_classes, shape, pool
        # zeros from the host: no initialiser to compile (a fit fills them in)
        zeros = np.zeros((int(np.prod(pooled)), num_classes), np.float32)
        self.kernel = nnx.Param(jnp.asarray(zeros), **axes("embed", "classes"))
        self.bias = nnx.Param(jnp.asarray(zeros[0]), **axes("classes"))

    def config(self) -> dict:
        """Constructor arguments (without ``rngs``), for export."""
        return {
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "pool": self.pool,
        }

    def features(self, x: jax.Array) -> jax.Array:
        """The inputs as the layer reads them: ``(batch, features)``, float32 (a numpy array
        for a numpy array: a fit computes them on the host)."""
        x = x.reshape(x.shape[0], *self.input_shape).astype(np.float32)
        if len(self.input_shape) >= 2 and self.pool > 1:
            p = self.pool
            h, w, *rest = pooled_shape(self.input_shape, p)
            x = x[:, : h * p, : w * p].reshape(x.shape[0], h, p, w, p, *rest).mean(axis=(2, 4))
        return x.reshape(x.shape[0], -1)

    def set_weights(self, weights: Any, bias: Any) -> None:
        """The layer's ``(features, outputs)`` weights and ``(outputs,)`` bias, as a fit on
        :meth:`features` found them."""
        self.kernel[...] = _host(weights, self.kernel.shape)
        self.bias[...] = _host(bias, self.bias.shape)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.features(x) @ self.kernel[...] + self.bias[...]


class NGramModel(nnx.Module):
    """A bag of token n-grams (1 to ``n`` tokens in a row) hashed into ``buckets`` rows of
    weights, one per class: the text's logits are the weights of its n-grams, each counted once
    per occurrence and scaled by one over the square root of the row's n-gram count (a
    count vector of unit length when they differ), plus a bias. Padding (``attention_mask``
    0) takes no part. Unigrams are their token ids (modulo ``buckets``), longer n-grams a hash
    of them.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> bag = NGramModel(50, 3, n=1, buckets=50, rngs=nnx.Rngs(0))
    >>> bag.features(jnp.array([[3, 4, 1]]), jnp.array([[1, 1, 0]]))[0].tolist()
    [[3, 4, 1]]
    """

    symbolic_length = True  # jaxfeed.export keeps the sequence length symbolic: any text length

    def __init__(
        self, vocab_size: int, num_classes: int, *, n: int = 2, buckets: int = 2**18,
        rngs: nnx.Rngs,
    ) -> None:  # fmt: skip
        if n < 1 or buckets < 1:
            raise ValueError(
                f"NGramModel takes n >= 1 and buckets >= 1, got n={n}, buckets={buckets}"
            )
        self.vocab_size, self.num_classes = int(vocab_size), int(num_classes)
        self.n, self.buckets = int(n), int(buckets)
        zeros = np.zeros((self.buckets, num_classes), np.float32)  # from the host: no compile
        self.weights = nnx.Param(jnp.asarray(zeros), **axes("vocab", "classes"))
        self.bias = nnx.Param(jnp.asarray(zeros[0]), **axes("classes"))

    def config(self) -> dict:
        """Constructor arguments (without ``rngs``), for export."""
        return {
            "vocab_size": self.vocab_size,
            "num_classes": self.num_classes,
            "n": self.n,
            "buckets": self.buckets,
        }

    def features(
        self, input_ids: jax.Array, attention_mask: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """``(index, value)``, each ``(batch, n * length)``: the bucket of each n-gram and its
        weight (0 for those that reach into padding or past the end); numpy arrays for numpy
        arrays (a fit computes them on the host)."""
        xp = np if isinstance(input_ids, np.ndarray) else jnp
        ids = input_ids.astype(xp.uint32)
        mask = xp.ones(ids.shape, bool) if attention_mask is None else attention_mask > 0

        def ahead(values: Any, j: int) -> Any:  # the value j positions on (past the end: 0)
            return values if j == 0 else xp.pad(values[:, j:], ((0, 0), (0, j)))

        index, valid = [], []
        for size in range(1, self.n + 1):
            h, ok = ids, mask
            for j in range(1, size):  # the n-gram starting at each position
                h = h * xp.uint32(_MULTIPLIER) + ahead(ids, j)
                ok = ok & ahead(mask, j)
            if size > 1:  # longer n-grams: hashed, and apart from the unigrams' ids
                h = h + xp.uint32(size)
                h = (h ^ (h >> xp.uint32(16))) * xp.uint32(_MIX1)
                h = (h ^ (h >> xp.uint32(13))) * xp.uint32(_MIX2)
                h = h ^ (h >> xp.uint32(16))
            index.append((h % xp.uint32(self.buckets)).astype(xp.int32))
            valid.append(ok)
        index_all, valid_all = xp.concatenate(index, 1), xp.concatenate(valid, 1)
        count = xp.maximum(valid_all.sum(axis=1, keepdims=True), 1).astype(xp.float32)
        return index_all, valid_all.astype(xp.float32) / xp.sqrt(count)

    def set_weights(self, weights: Any, bias: Any) -> None:
        """The ``(buckets, outputs)`` weights and ``(outputs,)`` bias, as a fit on
        :meth:`features` found them."""
        self.weights[...] = _host(weights, self.weights.shape)
        self.bias[...] = _host(bias, self.bias.shape)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        index, value = self.features(input_ids, attention_mask)
        return jnp.einsum("bk,bkc->bc", value, self.weights[...][index]) + self.bias[...]


def _host(values: Any, shape: tuple[int, ...]) -> jax.Array:
    """``values`` as a float32 device array of ``shape``, shaped on the host (no compile)."""
    return jnp.asarray(np.asarray(values, np.float32).reshape(shape))


__all__ = ["LinearModel", "NGramModel", "pooled_shape"]
