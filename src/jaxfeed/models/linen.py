"""Flax Linen models."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn

from jaxfeed.models.conv import im2col_conv
from jaxfeed.models.nnx import HEADS, NORMS
from jaxfeed.models.pool import max_pool_2x2


class LinenCNN(nn.Module):
    """:class:`~jaxfeed.models.nnx.CNN` in Linen (the same ``widths``, ``head`` and ``norm``; the
    article's model by default): ``apply(variables, x, train=...)`` with ``batch_stats``.

    >>> import jax, jax.numpy as jnp
    >>> model = LinenCNN(10)
    >>> variables = model.init(jax.random.key(0), jnp.zeros((1, 8, 8, 1)), train=False)
    >>> sorted(variables)
    ['batch_stats', 'params']
    >>> wide = LinenCNN(2, widths=(32, 64, 128), head="mean", norm="before")
    >>> variables = wide.init(jax.random.key(0), jnp.zeros((1, 24, 24, 3)), train=False)
    >>> variables["params"]["Dense_0"]["kernel"].shape
    (128, 128)
    """

    num_classes: int
    dropout_rate: float = 0.5
    momentum: float = 0.9
    widths: Sequence[int] = (32, 64)
    head: str = "flatten"
    norm: str = "after"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        if self.head not in HEADS or self.norm not in NORMS:
            raise ValueError(
                f"LinenCNN takes head in {HEADS} and norm in {NORMS}; got head={self.head!r}, "
                f"norm={self.norm!r}"
            )
        if x.ndim == 3:
            x = x[..., None]
        for i, width in enumerate(self.widths, start=1):
            x = nn.Conv(int(width), kernel_size=(3, 3), conv_general_dilated=im2col_conv)(x)
            bn = nn.BatchNorm(use_running_average=not train, momentum=self.momentum)
            x = nn.relu(bn(x)) if self.norm == "before" else bn(nn.relu(x))
            if i < len(self.widths) or self.head == "flatten":
                x = max_pool_2x2(x)
        x = jnp.mean(x, axis=(1, 2)) if self.head == "mean" else x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(128)(x))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)
