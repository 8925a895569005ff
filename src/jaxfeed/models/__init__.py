"""Reference models: the article's CNN in Flax NNX (`CNN`) and Linen (`LinenCNN`), an `MLP`, and
`AudioCNN` over log-mel spectrograms."""

from jaxfeed.models.audio import AudioCNN
from jaxfeed.models.linen import LinenCNN
from jaxfeed.models.nnx import CNN, MLP
from jaxfeed.models.pool import max_pool_2x2

__all__ = ["CNN", "MLP", "AudioCNN", "LinenCNN", "max_pool_2x2"]
