"""The seed article's NNXModel and LinenModel train unmodified, on CIFAR-shaped data and digits."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tests.train.article_models import article_models, cifar_like

from jax_compiles import compile_count
from jaxfeed import DataLoader, Trainer, load_dataset
from jaxfeed.train import scale_images


def digits_preprocess(batch):
    batch = scale_images(batch)
    return {**batch, "image": batch["image"][..., None]}  # (B, 8, 8) -> (B, 8, 8, 1)


@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_article_models_learn_cifar_shaped_data(api):
    NNXModel, LinenModel = article_models(32, 3)
    train = DataLoader(cifar_like(192), 32, shuffle=True, seed=0)
    test = DataLoader(cifar_like(64, seed=1), 64)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    if api == "nnx":
        model = NNXModel(10, rngs=nnx.Rngs(0))
        trainer = Trainer(model, tx, preprocess=scale_images, verbose=0)
    else:
        trainer = Trainer.from_linen(LinenModel(10), tx, preprocess=scale_images, verbose=0)
    history = trainer.fit(train, test, epochs=4)
    assert history[0]["train_loss"] > history[-1]["train_loss"]
    assert history[-1]["train_accuracy"] > 0.6
    assert set(history[-1]) >= {"train_accuracy", "eval_accuracy", "eval_loss"}
    batch = next(iter(test))
    np.testing.assert_array_equal(trainer.predict(batch), trainer.predict(batch))  # eval mode
    if api == "nnx":  # the module's own Rngs drove dropout, and the model holds the trained state
        model.eval()
        np.testing.assert_allclose(
            model(scale_images(batch)["image"]), trainer.predict(batch), rtol=1e-4, atol=1e-4
        )
    else:
        assert set(trainer.variables) == {"params", "batch_stats"}


@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_article_models_learn_digits(api):
    NNXModel, LinenModel = article_models(8, 1)
    digits = load_dataset("digits")
    # batches of 16: enough steps for the BatchNorm running averages (momentum 0.99) to settle
    train = DataLoader(digits["train"], 16, shuffle=True, seed=0)
    test = DataLoader(digits["test"], 120)
    if api == "nnx":
        trainer = Trainer(NNXModel(10, rngs=nnx.Rngs(0)), optax.adamw(3e-3),
                          preprocess=digits_preprocess, verbose=0)  # fmt: skip
    else:
        trainer = Trainer.from_linen(LinenModel(10), optax.adamw(3e-3),
                                     preprocess=digits_preprocess, verbose=0)  # fmt: skip
    history = trainer.fit(train, test, epochs=4)
    assert history[-1]["train_accuracy"] > 0.9
    assert history[-1]["eval_accuracy"] > 0.8
    assert compile_count(trainer.core.train_step) == 1  # the short last batch is padded
    logits = trainer.predict(test)
    assert logits.shape == (360, 10) and logits.dtype == jnp.float32
