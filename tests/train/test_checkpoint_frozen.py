"""Issue 63 D13: a Trainer that trains part of a model over frozen pretrained weights
(``trainable="lora"``, ``"head"``, a regular expression) checkpoints that part, the other
variables that training changes (BatchNorm statistics, dropout keys) and the optimizer state,
never the frozen weights; a restore takes them from the model it is given, which must be the one
the checkpoint was trained from (the checkpoint records a fingerprint of them, and the model's
Hub source when it has one)."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.models.lora import LoRA, LoRALinear
from jaxfeed.train.checkpoint import (
    CheckpointError,
    CheckpointManager,
    nnx_pure_state,
    restore_weights,
)

WIDTH = 256  # the frozen kernel: 256 KiB, the adapters 8 KiB


class Net(nnx.Module):
    def __init__(self, seed=0):
        base = nnx.Linear(WIDTH, WIDTH, rngs=nnx.Rngs(seed))
        self.body = LoRALinear(base, LoRA(rank=4, dropout=0.1), key=jax.random.key(seed + 1))
        self.norm = nnx.BatchNorm(WIDTH, rngs=nnx.Rngs(seed))
        self.head = nnx.Linear(WIDTH, 3, rngs=nnx.Rngs(seed + 2))

    def __call__(self, x, train=False):
        return self.head(self.norm(nnx.relu(self.body(x)), use_running_average=not train))


def batches(n=3, rows=8):
    rng = np.random.default_rng(0)
    return [
        {"x": rng.normal(size=(rows, WIDTH)).astype(np.float32),
         "label": rng.integers(0, 3, rows).astype(np.int32)}
        for _ in range(n)
    ]  # fmt: skip


def trainer(model, trainable="lora"):
    return Trainer(model, optax.adam(1e-2), inputs="x", trainable=trainable, verbose=0)


def saved_bytes(folder):
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def params(model):
    return {jax.tree_util.keystr(k): np.asarray(v)
            for k, v in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model)))[0]
            if not jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)}  # fmt: skip


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora")
    model = Net()
    trained = trainer(model)
    trained.fit(batches(), epochs=2, checkpoint_dir=folder / "ckpt")
    trained.core.write_back()
    return folder / "ckpt", model


def test_a_lora_checkpoint_holds_the_adapters_and_their_optimizer_state_alone(lora_run):
    folder, _ = lora_run
    with CheckpointManager(folder) as ckpt:
        meta = ckpt.meta(ckpt.latest_step)
    saved = set(meta["shapes"])
    assert not any("['kernel']" in p for p in saved if "['body']" in p or "['head']" in p), saved
    assert "['model']['body']['lora_a']" in saved and "['model']['norm']['mean']" in saved
    assert (
        meta["frozen"]["parameters"] == 6
    )  # kernels and biases of body and head, norm's scale and bias
    assert meta["frozen"]["bytes"] >= WIDTH * WIDTH * 4
    step = folder / str(meta["step"])
    assert saved_bytes(step) < WIDTH * WIDTH * 4 / 2  # the frozen kernel alone is 256 KiB


def test_a_resumed_lora_trainer_takes_the_frozen_weights_from_its_model(lora_run):
    folder, trained = lora_run
    fresh = Net()  # the same base (seed), adapters and head drawn afresh
    resumed = trainer(fresh)
    with CheckpointManager(folder) as ckpt:
        meta = resumed.restore_checkpoint(ckpt, "latest")
    resumed.core.write_back()
    assert meta["epoch"] == 2
    mine, theirs = params(fresh), params(trained)
    for path in theirs:
        np.testing.assert_array_equal(mine[path], theirs[path], err_msg=path)
    weights_only = Net()
    assert restore_weights(folder, weights_only)["meta"]["epoch"] == 2  # eval, export, predict
    np.testing.assert_array_equal(weights_only.body.lora_b[...], trained.body.lora_b[...])
    np.testing.assert_array_equal(weights_only.norm.mean[...], trained.norm.mean[...])


def test_a_lora_checkpoint_is_refused_on_another_base(lora_run):
    folder, _ = lora_run
    other = Net(seed=5)  # another pretrained model of the same shapes
    with (
        CheckpointManager(folder) as ckpt,
        pytest.raises(CheckpointError, match=r"frozen weights .* differ from this model's"),
    ):
        trainer(other).restore_checkpoint(ckpt, "latest")
    with pytest.raises(CheckpointError, match=r"restore it into the model it was trained from"):
        restore_weights(folder, Net(seed=5))


def test_a_head_trained_over_a_frozen_body_and_a_whole_lora_checkpoint_still_restore(tmp_path):
    """trainable="head" (a regular expression would do as well): the body is not saved. A LoRA
    checkpoint that holds the whole model (saved before this change) still restores, its frozen
    weights with it."""
    model = Net()
    part = trainer(model, trainable="head")
    part.fit(batches(), epochs=1, checkpoint_dir=tmp_path / "head")
    with CheckpointManager(tmp_path / "head") as ckpt:
        saved = set(ckpt.meta(ckpt.latest_step)["shapes"])
    assert "['model']['head']['kernel']" in saved and "['model']['body']['kernel']" not in saved
    old = trainer(Net())
    with CheckpointManager(tmp_path / "whole", async_save=False) as ckpt:
        ckpt.save(1, nnx_pure_state(old.model, old.core.optimizer), meta={"epoch": 1})
    into = Net(seed=7)
    with CheckpointManager(tmp_path / "whole") as ckpt:
        trainer(into).restore_checkpoint(ckpt, "latest")
    np.testing.assert_array_equal(into.body.kernel[...], old.model.body.kernel[...])
