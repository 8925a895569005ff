"""Reference models: the article's CNN in Flax NNX (`CNN`) and Linen (`LinenCNN`), an `MLP`,
`AudioCNN` over log-mel spectrograms, and transformers for token sequences
(`TransformerClassifier`, `TransformerLM`); pretrained Hub checkpoints through
`from_pretrained`, `preprocessor` and `save_pretrained` (`jaxfeed.models.hub`)."""

from jaxfeed.models.audio import AudioCNN
from jaxfeed.models.conv import im2col_conv
from jaxfeed.models.hub import from_pretrained, preprocessor, save_pretrained
from jaxfeed.models.linen import LinenCNN
from jaxfeed.models.nnx import CNN, MLP
from jaxfeed.models.pool import max_pool_2x2
from jaxfeed.models.transformer import TransformerClassifier, TransformerLM

__all__ = [
    "CNN",
    "MLP",
    "AudioCNN",
    "LinenCNN",
    "TransformerClassifier",
    "TransformerLM",
    "from_pretrained",
    "im2col_conv",
    "max_pool_2x2",
    "preprocessor",
    "save_pretrained",
]
