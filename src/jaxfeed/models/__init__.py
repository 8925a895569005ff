"""Reference models: the article's CNN in Flax NNX (`CNN`) and Linen (`LinenCNN`), and an `MLP`."""

from jaxfeed.models.linen import LinenCNN
from jaxfeed.models.nnx import CNN, MLP
from jaxfeed.models.pool import max_pool_2x2

__all__ = ["CNN", "MLP", "LinenCNN", "max_pool_2x2"]
