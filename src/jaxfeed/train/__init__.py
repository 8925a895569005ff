"""Training Flax models on jaxfeed loaders: `Trainer`, callbacks, history and plots."""

from jaxfeed.train.callbacks import Callback, EarlyStopping
from jaxfeed.train.history import History, plot_history
from jaxfeed.train.loggers import Logger, TensorBoardLogger
from jaxfeed.train.losses import cross_entropy
from jaxfeed.train.preemption import Preempted
from jaxfeed.train.schedule import Schedule
from jaxfeed.train.sharding import ShardingError
from jaxfeed.train.trainer import NonFiniteLossError, Trainer, scale_images

__all__ = [
    "Callback",
    "EarlyStopping",
    "History",
    "Logger",
    "NonFiniteLossError",
    "Preempted",
    "Schedule",
    "ShardingError",
    "TensorBoardLogger",
    "Trainer",
    "cross_entropy",
    "plot_history",
    "scale_images",
]
