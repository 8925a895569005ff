"""Checkpoints that restore anywhere, built on Orbax: the public face of
:mod:`jaxfeed.train.checkpoint` (read it for the layout on disk and the crash-safety rules).

>>> import tempfile
>>> import jax.numpy as jnp
>>> from jaxfeed.checkpoint import CheckpointManager
>>> manager = CheckpointManager(tempfile.mkdtemp())
>>> manager.save(1, {"w": jnp.ones(3)}, meta={"epoch": 1})
>>> manager.wait()  # the files are written in the background
>>> restored = manager.restore(1, state={"w": jnp.zeros(3)})
>>> manager.close()
>>> restored["state"]["w"].tolist(), restored["meta"]["epoch"]
([1.0, 1.0, 1.0], 1)
"""

from jaxfeed.train.checkpoint import CheckpointError as CheckpointError
from jaxfeed.train.checkpoint import CheckpointManager as CheckpointManager
from jaxfeed.train.checkpoint import load_nnx_pure_state as load_nnx_pure_state
from jaxfeed.train.checkpoint import nnx_pure_state as nnx_pure_state
from jaxfeed.train.checkpoint import restore_weights as restore_weights

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "load_nnx_pure_state",
    "nnx_pure_state",
    "restore_weights",
]
