"""``data_wait`` counts the time blocked on the loader only while the device had no step left to
run: a loader that is slow while the device is still busy with dispatched steps costs nothing."""

import time

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.train import fitting


def _slow_batches(n=4, pause=0.05):
    for i in range(n):
        if i:  # the first batch comes at once; the later ones after a pause each
            time.sleep(pause)
        yield {"image": np.ones((4, 3), np.float32), "label": np.zeros(4, np.int32)}


class Slow:
    def __iter__(self):
        return _slow_batches()

    def __len__(self):
        return 4


def _waited(monkeypatch, busy: bool) -> float:
    """Seconds the epoch counted as waiting for batches."""
    monkeypatch.setattr(fitting, "device_busy", lambda sums: busy and sums is not None)
    trainer = Trainer(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optax.sgd(0.1), verbose=0)
    trainer.fit(Slow(), epochs=1)
    logs = trainer.history[-1]
    return logs["data_wait"] * logs["seconds"]


def test_waits_while_the_device_is_busy_do_not_count(monkeypatch):
    assert _waited(monkeypatch, busy=False) >= 0.14  # three pauses of 0.05 s, device idle
    assert _waited(monkeypatch, busy=True) < 0.05  # the same pauses, the device still busy


def test_device_busy_reads_the_last_steps_sums():
    assert not fitting.device_busy(None)
    assert not fitting.device_busy({"loss": jnp.zeros(()).block_until_ready()})
