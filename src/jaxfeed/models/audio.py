"""`AudioCNN`: a small Flax NNX classifier of log-mel spectrograms (``jaxfeed.loading.augment.log_mel``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.conv import im2col_conv
from jaxfeed.models.nnx import axes
from jaxfeed.models.pool import max_pool_2x2


class AudioCNN(nnx.Module):
    """A small CNN over ``(batch, frames, n_mels)`` log-mel spectrograms.

    The input is standardised per mel bin by a BatchNorm (log-mel values are far from zero mean
    and unit variance), then ``len(channels)`` blocks of 3x3 convolution, BatchNorm, ReLU and 2x2
    max-pooling treat it as a one-channel image (time x frequency); the features are averaged
    over time and frequency, so any number of frames (at least ``2 ** len(channels)``) works,
    and a dense layer after dropout gives the class logits. ``mask`` (``(batch, frames)``, True on
    real frames, as ``Padding`` makes an ``attention_mask``) makes padded frames count as the
    convolutions' zero padding and leaves them out of the time average: in inference the output is
    that of the unpadded rows (when the real frames are a multiple of ``2 ** len(channels)``; in
    training BatchNorm's batch statistics still see the padded frames). Dropout takes its key at call time (``rngs=``); ``model.eval()`` for inference.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> model = AudioCNN(3, input_shape=(101, 64), rngs=nnx.Rngs(0))
    >>> model.eval()
    >>> logits = nnx.jit(lambda m, x, mask: m(x, mask))(model, jnp.zeros((2, 101, 64)),
    ...                                                 jnp.arange(101)[None] < 90)
    >>> logits.shape
    (2, 3)
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int] = (101, 64),
        channels: Sequence[int] = (16, 32, 64),
        dropout_rate: float = 0.2,
        *,
        rngs: nnx.Rngs,
        momentum: float = 0.9,
    ) -> None:
        if len(input_shape) == 3 and input_shape[-1] == 1:
            input_shape = input_shape[:2]
        if len(input_shape) != 2:
            raise ValueError(
                f"AudioCNN takes (frames, n_mels) spectrograms, got input_shape {tuple(input_shape)}"
            )
        frames, mels = (int(d) for d in input_shape)
        least = 2 ** len(channels)
        if mels < least or frames < least:
            raise ValueError(
                f"AudioCNN with {len(channels)} blocks (2x2 poolings) needs at least {least} frames "
                f"and mel bins, got input_shape {(frames, mels)}"
            )
        self.num_classes = num_classes
        self.input_shape = (frames, mels)
        self.channels = tuple(int(c) for c in channels)
        self.dropout_rate = dropout_rate
        self.momentum = momentum
        conv = {
            "kernel_metadata": axes(None, None, None, "conv"),
            "bias_metadata": axes("conv"),
            "conv_general_dilated": im2col_conv,  # the first layer's few channels: im2col
        }
        norm = {"scale_metadata": axes("conv"), "bias_metadata": axes("conv")}
        self.input_norm = nnx.BatchNorm(mels, momentum=momentum, rngs=rngs)
        widths = (1, *self.channels)
        self.convs = nnx.List(
            [
                nnx.Conv(a, b, kernel_size=(3, 3), rngs=rngs, **conv)
                for a, b in itertools.pairwise(widths)
            ]
        )
        self.norms = nnx.List(
            [nnx.BatchNorm(b, momentum=momentum, rngs=rngs, **norm) for b in self.channels]
        )
        self.dropout = nnx.Dropout(dropout_rate, deterministic=False)
        self.head = nnx.Linear(self.channels[-1], num_classes, rngs=rngs,
                               kernel_metadata=axes("conv", "classes"), bias_metadata=axes("classes"))  # fmt: skip

    def config(self) -> dict:
        """Constructor arguments (without ``rngs``), for export."""
        return {
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "channels": list(self.channels),
            "dropout_rate": self.dropout_rate,
            "momentum": self.momentum,
        }

    def __call__(
        self, x: jax.Array, mask: jax.Array | None = None, *, rngs: nnx.Rngs | None = None
    ) -> jax.Array:
        if x.ndim == 4 and x.shape[-1] == 1:
            x = x[..., 0]
        x = self.input_norm(x)[..., None]
        for conv, norm in zip(self.convs, self.norms, strict=True):
            if mask is not None:  # padded frames are zeros, as the convolution's own padding
                x = jnp.where(mask[:, :, None, None], x, 0.0)
            x = nnx.relu(norm(conv(x)))
            if mask is not None:  # ReLU outputs are >= 0: a zeroed frame never wins the max
                x = jnp.where(mask[:, :, None, None], x, 0.0)
                frames = mask.shape[1] // 2
                mask = mask[:, : frames * 2].reshape(mask.shape[0], frames, 2).any(-1)
            x = max_pool_2x2(x)
        x = x.mean(axis=2)  # over frequency: (batch, frames, channels)
        if mask is None:
            x = x.mean(axis=1)
        else:
            weight = mask[..., None].astype(x.dtype)
            x = (x * weight).sum(axis=1) / jnp.maximum(weight.sum(axis=1), 1.0)
        return self.head(self.dropout(x, rngs=rngs))
