"""The seed article's two models, verbatim apart from the input size (IMG_CHANNELS and the
flattened size 4096 = 8 x 8 x 64 of a 32 x 32 input)."""

from typing import Any

import flax.linen as nn
import jax
import numpy as np
from flax import nnx
from jax.typing import ArrayLike

from jaxfeed import Array3D, ClassLabel, Dataset, Features


def cifar_like(rows: int = 256, seed: int = 0) -> Dataset:
    """32 x 32 x 3 uint8 images whose class is where a bright 8 x 8 patch sits (4 x 4 grid)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, rows)
    images = rng.integers(0, 96, (rows, 32, 32, 3), dtype=np.uint8)
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 4)
        images[i, 8 * r : 8 * r + 8, 8 * q : 8 * q + 8] = 255
    features = Features(
        {"image": Array3D((32, 32, 3), "uint8"), "label": ClassLabel(num_classes=10)}
    )
    return Dataset.from_dict({"image": images, "label": labels}, features=features)


def article_models(img_size: int = 32, img_channels: int = 3) -> tuple[Any, Any]:
    IMG_CHANNELS = img_channels
    FLAT = (img_size // 4) ** 2 * 64

    class LinenModel(nn.Module):
        num_classes: int
        dropout_rate: float = 0.5

        def setup(self) -> None:
            self.conv1 = nn.Conv(features=32, kernel_size=(3, 3))
            self.bn1 = nn.BatchNorm()
            self.conv2 = nn.Conv(features=64, kernel_size=(3, 3))
            self.bn2 = nn.BatchNorm()
            self.linear1 = nn.Dense(features=128)
            self.dropout = nn.Dropout(rate=self.dropout_rate)
            self.linear2 = nn.Dense(features=self.num_classes)

        def __call__(self, x: ArrayLike, train: bool = True) -> jax.Array:
            x = self.conv1(x)
            x = nn.relu(x)
            x = self.bn1(x, use_running_average=not train)
            x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = self.conv2(x)
            x = nn.relu(x)
            x = self.bn2(x, use_running_average=not train)
            x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = self.linear1(x)
            x = nn.relu(x)
            x = self.dropout(x, deterministic=not train)
            x = self.linear2(x)
            return x

    class NNXModel(nnx.Module):
        num_classes: int
        dropout_rate: float = 0.5

        def __init__(self, num_classes: int, dropout_rate: float = 0.5, *, rngs: nnx.Rngs) -> None:
            super().__init__()
            self.num_classes = num_classes
            self.dropout_rate = dropout_rate
            self.conv1 = nnx.Conv(
                in_features=IMG_CHANNELS, out_features=32, kernel_size=(3, 3), rngs=rngs
            )
            self.bn1 = nnx.BatchNorm(num_features=32, rngs=rngs)
            self.conv2 = nnx.Conv(in_features=32, out_features=64, kernel_size=(3, 3), rngs=rngs)
            self.bn2 = nnx.BatchNorm(num_features=64, rngs=rngs)
            self.linear1 = nnx.Linear(in_features=FLAT, out_features=128, rngs=rngs)
            self.dropout = nnx.Dropout(self.dropout_rate, rngs=rngs)
            self.linear2 = nnx.Linear(in_features=128, out_features=self.num_classes, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            x = self.conv1(x)
            x = nnx.relu(x)
            x = self.bn1(x)
            # max_pool is not in NNX at the time of the article: Linen's stands in.
            x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = self.conv2(x)
            x = nnx.relu(x)
            x = self.bn2(x)
            x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = self.linear1(x)
            x = nnx.relu(x)
            x = self.dropout(x)
            x = self.linear2(x)
            return x

    return NNXModel, LinenModel
