"""The Trainer on the accelerator: the seed article's CNN (NNX and Linen), bfloat16, two runs of
one seed bitwise equal, and a checkpoint's resume bitwise equal to the run it continues."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from accelerator_helpers import on
from flax import nnx
from tests.train.article_models import article_models, cifar_like

from jaxfeed import DataLoader, Trainer
from jaxfeed.models import CNN
from jaxfeed.train import scale_images

TRAIN, TEST = cifar_like(256), cifar_like(64, seed=1)


def leaves(tree) -> dict[str, np.ndarray]:
    return {
        jax.tree_util.keystr(path): np.asarray(x)
        for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_the_article_cnn_learns(api, platform):
    NNXModel, LinenModel = article_models(32, 3)
    train = DataLoader(TRAIN, 32, shuffle=True, seed=0)
    test = DataLoader(TEST, 64)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    if api == "nnx":
        model = NNXModel(10, rngs=nnx.Rngs(0))
        trainer = Trainer(model, tx, preprocess=scale_images, verbose=0)
    else:
        trainer = Trainer.from_linen(LinenModel(10), tx, preprocess=scale_images, verbose=0)
    history = trainer.fit(train, test, epochs=4)
    assert history[0]["train_loss"] > history[-1]["train_loss"]
    assert history[-1]["train_accuracy"] > 0.5
    logits = trainer.predict(next(iter(test)))
    on(platform, logits)
    on(platform, nnx.state(model) if api == "nnx" else trainer.variables)


def cnn_trainer(**options) -> Trainer:
    model = CNN(10, (32, 32, 3), rngs=nnx.Rngs(0))
    return Trainer(model, optax.adamw(1e-3), preprocess=scale_images, verbose=0, **options)


def test_bfloat16_computes_in_bfloat16_and_keeps_float32_parameters(platform):
    trainer = cnn_trainer(precision="bfloat16")
    history = trainer.fit(DataLoader(TRAIN, 32, shuffle=True, seed=0), epochs=2)
    assert history[0]["train_loss"] > history[-1]["train_loss"]
    params = nnx.state(trainer.model, nnx.Param)
    assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {jnp.dtype("float32")}
    on(platform, params)


def test_two_runs_of_one_seed_are_bitwise_equal(platform):
    ends = []
    for _ in range(2):
        trainer = cnn_trainer(seed=3)
        trainer.fit(DataLoader(TRAIN, 32, shuffle=True, seed=3), epochs=2)
        ends.append(leaves(nnx.state(trainer.model)))
    assert sorted(ends[0]) == sorted(ends[1])
    for name, value in ends[0].items():
        np.testing.assert_array_equal(value, ends[1][name], err_msg=name)


def test_a_resumed_checkpoint_ends_bitwise_equal_to_the_straight_run(tmp_path, platform):
    def fit(epochs, checkpoints=None):
        trainer = cnn_trainer()
        trainer.fit(DataLoader(TRAIN, 64, shuffle=True, seed=1), DataLoader(TEST, 64),
                    epochs=epochs, checkpoint_dir=checkpoints, resume=checkpoints is not None)  # fmt: skip
        return trainer, leaves(nnx.state(trainer.model))

    _, straight = fit(2)
    fit(1, tmp_path / "ckpt")  # one epoch, checkpointed
    resumed, ended = fit(2, tmp_path / "ckpt")  # restored, one more epoch
    assert [r["epoch"] for r in resumed.history] == [1, 2]
    assert sorted(straight) == sorted(ended)
    for name, value in straight.items():
        np.testing.assert_array_equal(value, ended[name], err_msg=name)
