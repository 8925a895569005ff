"""Flax Linen models."""

from __future__ import annotations

import jax
from flax import linen as nn

from jaxfeed.models.conv import im2col_conv
from jaxfeed.models.pool import max_pool_2x2


class LinenCNN(nn.Module):
    """The article's CNN in Linen: ``apply(variables, x, train=...)`` with ``batch_stats``.

    >>> import jax, jax.numpy as jnp
    >>> model = LinenCNN(10)
    >>> variables = model.init(jax.random.key(0), jnp.zeros((1, 8, 8, 1)), train=False)
    >>> sorted(variables)
    ['batch_stats', 'params']
    """

    num_classes: int
    dropout_rate: float = 0.5
    momentum: float = 0.9

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        if x.ndim == 3:
            x = x[..., None]
        x = nn.relu(nn.Conv(32, kernel_size=(3, 3), conv_general_dilated=im2col_conv)(x))
        x = max_pool_2x2(nn.BatchNorm(use_running_average=not train, momentum=self.momentum)(x))
        x = nn.relu(nn.Conv(64, kernel_size=(3, 3), conv_general_dilated=im2col_conv)(x))
        x = max_pool_2x2(nn.BatchNorm(use_running_average=not train, momentum=self.momentum)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(128)(x))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)
