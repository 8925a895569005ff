"""``restore_weights``: a checkpoint's model alone (parameters and other variables), whatever
optimizer, schedule or metrics wrote it; into an NNX module, an abstract one, a pure state dict,
Linen variables (either Linen layout) or a user's tree."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.models import MLP, LinenCNN
from jaxfeed.train.checkpoint import (
    CheckpointError,
    CheckpointManager,
    nnx_pure_state,
    restore_weights,
)


def batches(shape, n=4, rows=8, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {"image": rng.normal(size=(rows, *shape)).astype(np.float32),
         "label": rng.integers(0, 3, rows).astype(np.int32)}
        for _ in range(n)
    ]  # fmt: skip


def warmup_adamw(steps):
    """A warmup schedule, as ``jaxfeed train`` builds for fine-tuning: a step count in the
    optimizer state that a constant learning rate does not have."""
    lr = optax.join_schedules([optax.linear_schedule(0.0, 1e-2, 1), optax.constant_schedule(1e-2)],
                              [1])  # fmt: skip
    return optax.inject_hyperparams(optax.adamw)(learning_rate=lr)


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def nnx_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nnx")
    model = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0))
    trainer = Trainer(model, warmup_adamw(4), verbose=0)
    trainer.fit(batches((4,)), epochs=1, checkpoint_dir=folder)
    trainer.core.write_back()
    return folder, model


def test_weights_restore_whatever_schedule_wrote_them(nnx_run):
    folder, trained = nnx_run
    # the whole state needs the optimizer's layout: a constant learning rate has no step count
    other = Trainer(MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)),
                    optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2), verbose=0)  # fmt: skip
    with CheckpointManager(folder) as ckpt, pytest.raises(CheckpointError, match="count"):
        other.restore_checkpoint(ckpt, "latest")
    fresh = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1))
    restored = restore_weights(folder, fresh)
    assert restored["meta"]["step"] == 4 and restored["meta"]["epoch"] == 1
    assert set(restored["weights"]) == set(nnx_pure_state(fresh)["model"])
    assert_same(nnx.state(trained), nnx.state(fresh))


def test_into_an_abstract_model_or_tree(nnx_run):
    folder, trained = nnx_run
    abstract = nnx.eval_shape(lambda: MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)))
    restore_weights(folder, abstract, "latest")
    leaves = jax.tree.leaves(nnx.state(abstract))
    assert all(isinstance(x, jax.Array) for x in leaves)  # on a device, not numpy
    assert_same(nnx.state(trained), nnx.state(abstract))
    shapes = jax.eval_shape(lambda: nnx_pure_state(MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(2))))
    with CheckpointManager(folder) as ckpt:  # an open manager, as a run ranks its steps
        weights = restore_weights(ckpt, shapes["model"], 4)["weights"]
    assert_same(nnx_pure_state(trained)["model"], weights)
    one = jax.sharding.SingleDeviceSharding(jax.devices()[3])
    placed = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one),
                          shapes["model"])  # fmt: skip
    weights = restore_weights(folder, placed)["weights"]
    assert {d for x in jax.tree.leaves(weights) for d in x.devices()} == {jax.devices()[3]}


def test_refusals(nnx_run, tmp_path):
    folder, _ = nnx_run
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        restore_weights(tmp_path / "missing", MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)))
    with pytest.raises(CheckpointError, match="has shape"):
        restore_weights(folder, MLP(3, (4,), hidden=(5,), rngs=nnx.Rngs(1)))
    with pytest.raises(CheckpointError, match="no step 7"):
        restore_weights(folder, MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)), 7)
    with CheckpointManager(tmp_path / "tree", async_save=False) as ckpt:
        ckpt.save(1, {"w": jnp.ones(2), "opt": jnp.zeros(3)})
    with pytest.raises(CheckpointError, match="holds no NNX model"):
        restore_weights(tmp_path / "tree", MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)))
    # a user's own tree: the entries named, not the rest
    weights = restore_weights(tmp_path / "tree", {"w": jnp.zeros(2)})["weights"]
    assert set(weights) == {"w"} and weights["w"].tolist() == [1.0, 1.0]


def test_linen_variables_from_either_layout(tmp_path):
    module, example = LinenCNN(3), np.zeros((1, 8, 8, 1), np.float32)
    trainer = Trainer.from_linen(module, warmup_adamw(4), example, verbose=0)
    trainer.fit(batches((8, 8, 1)), epochs=1, checkpoint_dir=tmp_path / "run")
    fresh = module.init(jax.random.key(5), example, train=False)
    assert set(fresh) == {"params", "batch_stats"}
    restored = restore_weights(tmp_path / "run", fresh)
    assert set(restored["weights"]) == {"params", "batch_stats"}
    assert_same(trainer.variables, restored["weights"])
    # layout 1: batch_stats at the top, beside params and opt_state
    state = trainer.core.state
    old = {"params": state["params"], "batch_stats": state["collections"]["batch_stats"],
           "opt_state": state["opt_state"]}  # fmt: skip
    with CheckpointManager(tmp_path / "old", async_save=False) as ckpt:
        ckpt.save(4, old)
    assert_same(trainer.variables, restore_weights(tmp_path / "old", fresh)["weights"])


def test_a_trainer_restores_the_weights_alone_for_nnx_and_linen(nnx_run, tmp_path):
    """``Trainer.restore_weights`` (what eval, predict, generate RUN and export use): the model
    of a step whose optimizer state another optimizer cannot take; evaluation then uses it."""
    folder, trained = nnx_run
    constant = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2)
    other = Trainer(MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)), constant, verbose=0)
    with CheckpointManager(folder, async_save=False) as ckpt:
        meta = other.restore_weights(ckpt, "latest")
    assert other.step == meta["step"] == 4 and other.epoch == 1
    assert_same(nnx.state(trained, nnx.Param), nnx.state(other.model, nnx.Param))
    assert other.evaluate(batches((4,))) == pytest.approx(
        Trainer(trained, constant, verbose=0).evaluate(batches((4,)))
    )
    module, example = LinenCNN(3), np.zeros((1, 8, 8, 1), np.float32)
    trainer = Trainer.from_linen(module, warmup_adamw(4), example, verbose=0)
    trainer.fit(batches((8, 8, 1)), epochs=1, checkpoint_dir=tmp_path / "run")
    again = Trainer.from_linen(module, constant, example, seed=3, verbose=0)
    with CheckpointManager(tmp_path / "run", async_save=False) as ckpt:
        again.restore_weights(ckpt, "latest")
    assert_same(trainer.variables, again.variables)
