"""After ``fit`` the devices hold one model and one optimizer state, not two: the user's model
objects share the trainer's arrays (a 1B Llama's 6.6 GB of weights and AdamW state, held twice,
did not fit a 16 GB TPU for a second ``fit``)."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import Trainer


class Wide(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.a = nnx.Linear(16, 512, rngs=rngs)
        self.b = nnx.Linear(512, 512, rngs=rngs)
        self.c = nnx.Linear(512, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c(nnx.relu(self.b(nnx.relu(self.a(x)))))


def live_bytes() -> int:
    gc.collect()
    return sum(x.nbytes for x in jax.live_arrays() if not x.is_deleted())


def test_fit_leaves_one_copy_of_the_state_and_the_model_stays_current() -> None:
    rng = np.random.default_rng(0)
    batches = [{"x": rng.normal(size=(32, 16)).astype(np.float32),
                "y": rng.integers(0, 2, 32).astype(np.int32)} for _ in range(4)]  # fmt: skip
    model = Wide(nnx.Rngs(0))
    params = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    trainer = Trainer(model, optax.adam(1e-3), inputs="x", targets="y", verbose=0)
    trainer.fit(batches, epochs=1)
    after_one = live_bytes()
    trainer.fit(batches, epochs=3)
    after_three = live_bytes()
    # parameters + Adam's two moments = 3x the parameters, once; a second copy would add 3x
    assert after_one < 4.5 * params, (after_one, params)
    assert after_three < 4.5 * params, (after_three, params)

    # the model object is the trained model: its outputs are the trainer's predictions
    x = batches[0]["x"]
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(x))), np.asarray(trainer.predict([{"x": x}])),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    # and a later fit still trains from there (the donated arrays are the trainer's to replace)
    before = np.asarray(model.b.kernel[...]).copy()
    trainer.fit(batches, epochs=4)
    assert not np.array_equal(before, np.asarray(model.b.kernel[...]))


def test_a_fit_that_fails_leaves_the_model_usable_at_the_state_its_steps_reached() -> None:
    """The steps donate the arrays the model objects share: a loader failing mid-epoch must not
    leave them deleted (the state the steps reached is written back before the error rises)."""
    rng = np.random.default_rng(1)
    batches = [{"x": rng.normal(size=(32, 16)).astype(np.float32),
                "y": rng.integers(0, 2, 32).astype(np.int32)} for _ in range(3)]  # fmt: skip

    def failing():
        yield from batches[:2]
        raise OSError("the disk went away")

    model = Wide(nnx.Rngs(1))
    trainer = Trainer(model, optax.adam(1e-3), inputs="x", targets="y", verbose=0)
    trainer.fit(batches, epochs=1)
    with pytest.raises(OSError, match="the disk went away"):
        trainer.fit(failing(), epochs=2)
    x = batches[0]["x"]
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(x))), np.asarray(trainer.predict([{"x": x}])),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
