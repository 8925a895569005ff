"""Dropout that draws few random bits: ``nnx.Dropout``'s interface, :func:`jaxfeed.runtime.prng.keep_mask`'s
mask.

``nnx.Dropout`` makes a uniform float32 from 32 random bits per element and compares it with the
keep probability; a mask needs 8. :class:`Dropout` compares 8-bit values with a threshold (16 or
32 bits for rates that 8 bits would round by more than 2%), and with a counter-hash key (the
``Trainer``'s on CPU) the bits are an elementwise hash XLA fuses into the masked product, so
neither bits nor mask are written to memory. The rate is rounded to the nearest multiple of
``1/256`` (0.1 becomes 0.1016), and kept values are scaled by that rounded keep probability, so
the expected output equals the input. Same key, same mask.

>>> import jax, jax.numpy as jnp
>>> from flax import nnx
>>> drop = Dropout(0.5, deterministic=False)
>>> key = jax.random.key(0)
>>> y = drop(jnp.ones((4, 256)), rngs=nnx.Rngs(dropout=key))
>>> sorted(set(y.reshape(-1).tolist()))
[0.0, 2.0]
>>> bool((y == drop(jnp.ones((4, 256)), rngs=nnx.Rngs(dropout=key))).all())
True
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.runtime.prng import keep_mask


def dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
    """``x`` with each element zeroed with probability about ``rate`` and the others scaled by
    ``1 / keep`` (:func:`jaxfeed.runtime.prng.keep_mask`).

    >>> import jax
    >>> dropout(jax.numpy.ones(8), 0.25, jax.random.key(1)).shape
    (8,)
    """
    keep, scale = keep_mask(key, rate, tuple(x.shape))
    return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros((), x.dtype))


class Dropout(nnx.Dropout):
    """``nnx.Dropout`` (the same constructor, ``deterministic`` switch, ``model.eval()`` and
    ``rngs=`` at call time) whose mask costs few random bits (see the module docstring);
    ``broadcast_dims`` are not supported."""

    def __init__(self, rate: float, **kwargs: Any) -> None:
        if kwargs.get("broadcast_dims"):
            raise ValueError("jaxfeed's Dropout draws a mask per element: no broadcast_dims")
        rngs = kwargs.get("rngs")
        collection = kwargs.get("rng_collection", "dropout")
        stream = rngs[collection] if isinstance(rngs, nnx.Rngs) else rngs
        if isinstance(stream, nnx.RngStream) and stream.key.ndim:  # one key per stacked layer
            super().__init__(rate, **{**kwargs, "rngs": None})
            self.rngs = stream  # its own: forking splits one key, not a stack of them
            return
        super().__init__(rate, **kwargs)

    def __call__(self, inputs: jax.Array, *, deterministic: bool | None = None,
                 rngs: Any = None) -> jax.Array:  # fmt: skip
        off = self.deterministic if deterministic is None else deterministic
        if off is None:
            raise ValueError("Dropout needs deterministic= (at construction or at the call)")
        if self.rate == 0.0 or off:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        return dropout(inputs, self.rate, self._key(rngs))

    def keep_mask(self, shape: tuple[int, ...], *, rngs: Any = None) -> tuple[jax.Array, float]:
        """The boolean mask of the elements a call on ``shape`` keeps and the factor they are
        scaled by (:func:`jaxfeed.runtime.prng.keep_mask`): what the attention's backward pass
        saves, one byte an element where the scaled multipliers took two.

        >>> import jax
        >>> keep, scale = Dropout(0.5).keep_mask((2, 8), rngs=jax.random.key(0))
        >>> keep.dtype, scale
        (dtype('bool'), 2.0)
        """
        if self.rate == 1.0:
            return jnp.zeros(shape, bool), 0.0
        return keep_mask(self._key(rngs), self.rate, tuple(shape))

    def _key(self, rngs: Any) -> jax.Array:
        key = dropout_key(self, rngs)
        if key is None:
            raise TypeError(
                "Dropout is on (deterministic=False) but has no random key: pass rngs= (an "
                f"nnx.Rngs, RngStream or key), got {type(self.rngs if rngs is None else rngs).__name__}"
            )
        return key


def dropout_key(module: nnx.Dropout, rngs: Any) -> jax.Array | None:
    """The key a dropout ``module`` (``nnx.Dropout`` or jaxfeed's) draws from ``rngs`` (else from
    its own ``rngs``): an ``nnx.Rngs``' stream of its collection, a stream, or a key as given;
    None when there is none.

    >>> dropout_key(nnx.Dropout(0.1), None) is None
    True
    >>> dropout_key(nnx.Dropout(0.1), nnx.Rngs(dropout=0)).dtype
    key<fry>
    """
    rngs = module.rngs if rngs is None else rngs
    if isinstance(rngs, nnx.Rngs):
        return rngs[module.rng_collection]()
    if isinstance(rngs, nnx.RngStream):
        return rngs()
    if isinstance(rngs, jax.Array):
        return rngs
    return None


__all__ = ["Dropout", "dropout", "dropout_key"]
