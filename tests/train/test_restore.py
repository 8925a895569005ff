"""Weights-only restore: a checkpoint into a fresh model, without its optimizer."""

import jax
import numpy as np
import optax
from flax import nnx

from jaxfeed import DataLoader, Trainer, load_dataset
from jaxfeed.models import CNN
from jaxfeed.train import scale_images
from jaxfeed.train.checkpoint import CheckpointManager


def test_restore_weights_into_a_fresh_model_without_optimizer(tmp_path):
    digits = load_dataset("digits")
    model = CNN(10, (8, 8, 1), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adamw(1e-3), preprocess=scale_images, verbose=0)
    trainer.fit(DataLoader(digits["train"], 128), epochs=1, checkpoint_dir=tmp_path)
    fresh = CNN(10, (8, 8, 1), rngs=nnx.Rngs(5))
    with CheckpointManager(tmp_path) as ckpt:
        restored = ckpt.restore("latest", model=fresh)
    assert set(restored["state"]) == {"model"} and restored["meta"]["epoch"] == 1
    for a, b in zip(
        jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(fresh)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # fine-tuning from the restored weights with a new optimizer works
    tuned = Trainer(fresh, optax.sgd(1e-3), preprocess=scale_images, verbose=0)
    assert (
        tuned.evaluate(DataLoader(digits["test"], 120))["accuracy"]
        == trainer.evaluate(DataLoader(digits["test"], 120))["accuracy"]
    )
