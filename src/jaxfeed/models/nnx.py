"""Flax NNX models, their parameters annotated with logical axis names for sharding.

Each parameter carries ``out_sharding`` metadata (as ``nnx.with_partitioning`` sets it): the
logical name of each dimension. ``Trainer(..., sharding={...})`` maps the names to mesh axes:

* ``"embed"``: the feature dimension that dense layers read and write (model width);
* ``"mlp"``: the hidden dimension inside a pair of dense layers;
* ``"conv"``: the output channels of a convolution (and its bias and BatchNorm);
* ``"classes"``: the class (output) dimension of the last layer.

``{"mlp": "model", "conv": "model"}`` on a ``("data", "model")`` mesh is Megatron-style tensor
parallelism; unannotated dimensions stay whole. The metadata does not shard anything by itself
(``eager_sharding`` is off), so the models build and run without a mesh.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.conv import im2col_conv
from jaxfeed.models.pool import max_pool_2x2


def axes(*names: str | None) -> dict:
    """Variable metadata naming each dimension's logical axis (``kernel_metadata=axes(...)``).

    >>> from flax import nnx
    >>> layer = nnx.Linear(2, 4, kernel_metadata=axes("embed", "mlp"), rngs=nnx.Rngs(0))
    >>> layer.kernel.get_metadata()["out_sharding"]
    ('embed', 'mlp')
    """
    return {"out_sharding": names, "eager_sharding": False}


def _as_image(x: jax.Array, channels: int) -> jax.Array:
    """Add the channel axis to ``(B, H, W)`` inputs of single-channel models."""
    if x.ndim == 3 and channels == 1:
        x = x[..., None]
    return x


class CNN(nnx.Module):
    """The article's image classifier: two conv + ReLU + BatchNorm + 2x2 max-pool blocks, a
    128-unit dense layer with dropout, and a class layer, for any input size.

    BatchNorm momentum is 0.9 (PyTorch's default 0.1, in Flax's convention), so the PyTorch twin in
    ``benchmarks/`` trains the same way. Dropout takes its key at call time (``rngs=``); call
    ``model.eval()`` for inference and ``model.train()`` to train.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> model = CNN(10, input_shape=(8, 8, 1), rngs=nnx.Rngs(0))
    >>> model.eval()
    >>> model(jnp.zeros((2, 8, 8))).shape
    (2, 10)
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int] = (28, 28, 1),
        dropout_rate: float = 0.5,
        *,
        rngs: nnx.Rngs,
        momentum: float = 0.9,
    ) -> None:
        if len(input_shape) == 2:
            input_shape = (*input_shape, 1)
        h, w, c = (int(d) for d in input_shape)
        if h < 4 or w < 4:
            raise ValueError(
                f"CNN needs inputs of at least 4x4 (two 2x2 poolings), got {input_shape}"
            )
        self.num_classes = num_classes
        self.input_shape = (h, w, c)
        self.dropout_rate = dropout_rate
        self.momentum = momentum
        conv = {
            "kernel_metadata": axes(None, None, None, "conv"),
            "bias_metadata": axes("conv"),
            "conv_general_dilated": im2col_conv,  # the first layer's few channels: im2col
        }
        norm = {"scale_metadata": axes("conv"), "bias_metadata": axes("conv")}
        self.conv1 = nnx.Conv(c, 32, kernel_size=(3, 3), rngs=rngs, **conv)
        self.bn1 = nnx.BatchNorm(
            32, momentum=momentum, use_running_average=False, rngs=rngs, **norm
        )
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs, **conv)
        self.bn2 = nnx.BatchNorm(
            64, momentum=momentum, use_running_average=False, rngs=rngs, **norm
        )
        self.linear1 = nnx.Linear((h // 2 // 2) * (w // 2 // 2) * 64, 128, rngs=rngs,
                                  kernel_metadata=axes("embed", "mlp"), bias_metadata=axes("mlp"))  # fmt: skip
        self.dropout = nnx.Dropout(dropout_rate, deterministic=False)
        self.linear2 = nnx.Linear(128, num_classes, rngs=rngs, kernel_metadata=axes("mlp", "classes"),
                                  bias_metadata=axes("classes"))  # fmt: skip

    def config(self) -> dict:
        """Constructor arguments (without ``rngs``), for export."""
        return {
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "dropout_rate": self.dropout_rate,
            "momentum": self.momentum,
        }

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        x = _as_image(x, self.input_shape[2])
        x = max_pool_2x2(self.bn1(nnx.relu(self.conv1(x))))
        x = max_pool_2x2(self.bn2(nnx.relu(self.conv2(x))))
        x = x.reshape((x.shape[0], -1))
        x = self.dropout(nnx.relu(self.linear1(x)), rngs=rngs)
        return self.linear2(x)


class MLP(nnx.Module):
    """A multi-layer perceptron on flattened inputs: ``hidden`` ReLU layers, then the class layer.

    Layer kernels alternate ``("embed", "mlp")`` and ``("mlp", "embed")`` (column- then
    row-parallel under ``{"mlp": "model"}``); the head is ``(..., "classes")``.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> MLP(10, input_shape=(8, 8), hidden=(32,), rngs=nnx.Rngs(0))(jnp.zeros((3, 8, 8))).shape
    (3, 10)
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        hidden: Sequence[int] = (256, 128),
        dropout_rate: float = 0.0,
        *,
        rngs: nnx.Rngs,
    ) -> None:
        size = 1
        for d in input_shape:
            size *= int(d)
        self.num_classes = num_classes
        self.input_shape = tuple(int(d) for d in input_shape)
        self.hidden = tuple(int(h) for h in hidden)
        self.dropout_rate = dropout_rate
        widths = [size, *hidden]
        names = ["embed" if i % 2 == 0 else "mlp" for i in range(len(widths))]
        self.layers = nnx.List(
            [
                nnx.Linear(
                    a,
                    b,
                    rngs=rngs,
                    kernel_metadata=axes(names[i], names[i + 1]),
                    bias_metadata=axes(names[i + 1]),
                )
                for i, (a, b) in enumerate(itertools.pairwise(widths))
            ]
        )
        self.dropout = nnx.Dropout(dropout_rate, deterministic=False)
        self.head = nnx.Linear(widths[-1], num_classes, rngs=rngs,
                               kernel_metadata=axes(names[-1], "classes"), bias_metadata=axes("classes"))  # fmt: skip

    def config(self) -> dict:
        """Constructor arguments (without ``rngs``), for export."""
        return {
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "hidden": list(self.hidden),
            "dropout_rate": self.dropout_rate,
        }

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        x = jnp.reshape(x, (x.shape[0], -1))
        for layer in self.layers:
            x = self.dropout(nnx.relu(layer(x)), rngs=rngs)
        return self.head(x)
