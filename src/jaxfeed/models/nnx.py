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


HEADS = ("flatten", "mean")  # CNN's ``head``: the last feature map flattened, or averaged
NORMS = ("after", "before")  # CNN's ``norm``: BatchNorm after the ReLU, or between conv and ReLU


class CNN(nnx.Module):
    """An image classifier: conv + BatchNorm + ReLU blocks of ``widths`` channels, each but the
    last followed by 2x2 max pooling, a 128-unit dense layer with dropout, and a class layer, for
    any input size. The defaults are the article's model: two blocks (32, 64), each pooled, the
    last map flattened (``head="flatten"``) and BatchNorm after the ReLU (``norm="after"``).
    ``jaxfeed train``'s built-in ``cnn`` of an image folder is ``widths=(32, 64, 128),
    head="mean", norm="before"`` (:data:`jaxfeed.recipes.kinds.image.IMAGE_CNN`): the last map
    averaged over its positions (global average pooling: a feature counts wherever it is in the
    image) and BatchNorm before the ReLU, so that each unit fires on about half of the positions
    whatever the image's colours.

    BatchNorm momentum is 0.9 (PyTorch's default 0.1, in Flax's convention), so the PyTorch twin in
    ``benchmarks/`` trains the same way. Dropout takes its key at call time (``rngs=``); call
    ``model.eval()`` for inference and ``model.train()`` to train.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> model = CNN(10, input_shape=(8, 8, 1), rngs=nnx.Rngs(0))
    >>> model.eval()
    >>> model(jnp.zeros((2, 8, 8))).shape
    (2, 10)
    >>> wide = CNN(2, (24, 24, 3), widths=(32, 64, 128), head="mean", norm="before", rngs=nnx.Rngs(0))
    >>> wide.linear1.in_features, wide.conv3.out_features
    (128, 128)
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int] = (28, 28, 1),
        dropout_rate: float = 0.5,
        *,
        rngs: nnx.Rngs,
        momentum: float = 0.9,
        widths: Sequence[int] = (32, 64),
        head: str = "flatten",
        norm: str = "after",
    ) -> None:
        if len(input_shape) == 2:
            input_shape = (*input_shape, 1)
        h, w, c = (int(d) for d in input_shape)
        widths = tuple(int(width) for width in widths)
        if head not in HEADS or norm not in NORMS or not widths or min(widths) < 1:
            raise ValueError(
                f"CNN takes head in {HEADS}, norm in {NORMS} and at least one width >= 1; got "
                f"head={head!r}, norm={norm!r}, widths={list(widths)}"
            )
        pools = len(widths) - (head == "mean")  # the mean head replaces the last pooling
        if h < 2**pools or w < 2**pools:
            raise ValueError(
                f"CNN needs inputs of at least {2**pools}x{2**pools} ({pools} 2x2 poolings), got "
                f"{input_shape}"
            )
        self.num_classes = num_classes
        self.input_shape = (h, w, c)
        self.dropout_rate = dropout_rate
        self.momentum = momentum
        self.widths, self.head, self.norm = widths, head, norm
        conv = {
            "kernel_metadata": axes(None, None, None, "conv"),
            "bias_metadata": axes("conv"),
            "conv_general_dilated": im2col_conv,  # the first layer's few channels: im2col
        }
        norms = {"scale_metadata": axes("conv"), "bias_metadata": axes("conv")}
        for i, (depth, width) in enumerate(zip((c, *widths), widths, strict=False), start=1):
            setattr(self, f"conv{i}", nnx.Conv(depth, width, kernel_size=(3, 3), rngs=rngs, **conv))
            setattr(self, f"bn{i}", nnx.BatchNorm(
                width, momentum=momentum, use_running_average=False, rngs=rngs, **norms
            ))  # fmt: skip
        features = widths[-1] if head == "mean" else (h >> pools) * (w >> pools) * widths[-1]
        self.linear1 = nnx.Linear(features, 128, rngs=rngs,
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
            "widths": list(self.widths),
            "head": self.head,
            "norm": self.norm,
        }

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        x = _as_image(x, self.input_shape[2])
        for i in range(1, len(self.widths) + 1):
            conv, bn = getattr(self, f"conv{i}"), getattr(self, f"bn{i}")
            x = nnx.relu(bn(conv(x))) if self.norm == "before" else bn(nnx.relu(conv(x)))
            if i < len(self.widths) or self.head == "flatten":
                x = max_pool_2x2(x)
        x = jnp.mean(x, axis=(1, 2)) if self.head == "mean" else x.reshape((x.shape[0], -1))
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
