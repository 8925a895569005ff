"""Fine-tuning a model from ``from_pretrained`` with the Trainer: the loss goes down with
``optax.adamw(2e-5)``; ``trainable=`` freezes the rest (no change, no optimizer state);
``remat=True`` gives the same step; ``dtype=bfloat16`` computes in bfloat16 on float32
parameters."""

import itertools

import jax
import numpy as np
import optax
import pytest
from flax import nnx

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hub_checkpoints import inputs, save_checkpoint
from jaxfeed import Trainer
from jaxfeed.models import LoRA, from_pretrained
from jaxfeed.train.freeze import layer_paths

INPUTS = {"input_ids": "input_ids", "attention_mask": "attention_mask"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    save_checkpoint(folder, "bert", "sequence-classification", hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)  # fmt: skip
    return folder


def batches(n=4):
    batch = inputs("bert", batch=8, length=7)
    batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
    batch["label"] = np.arange(8) % 3
    return [batch] * n


def params(model):
    """Each parameter by path, a layer stack's one per layer (``encoder.layers.1.…``)."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    values = {".".join(map(str, k)): np.asarray(v.get_value()) for k, v in flat}
    out = {}
    for path, names in layer_paths(model).items():
        for i, name in enumerate(names):
            out[name] = values[path] if len(names) == 1 else values[path][i]
    return out


def fit(model, steps=4, lr=2e-5, **kwargs):
    trainer = Trainer(model, optax.adamw(lr), inputs=INPUTS, verbose=0, **kwargs)
    losses = []
    for batch in batches(steps):
        trainer.fit([batch], epochs=trainer.epoch + 1)
        losses.append(trainer.history[-1]["train_loss"])
    return trainer, losses


def test_loss_decreases_with_adamw_2e5(checkpoint):
    model = from_pretrained(checkpoint)
    _, losses = fit(model)
    assert all(b < a for a, b in itertools.pairwise(losses)), losses


def test_trainable_head_freezes_the_encoder(checkpoint):
    model = from_pretrained(checkpoint)
    before = params(model)
    trainer, losses = fit(model, steps=2, lr=1e-2, trainable="head")
    after = params(model)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed == {k for k in before if k.startswith(("pooler.", "classifier."))}
    state = nnx.state(trainer.core.optimizer.opt_state)
    sizes = {x.size for x in jax.tree.leaves(state) if hasattr(x, "size") and x.size > 1}
    assert (
        max(sizes) == 16 * 16
    )  # moments for the pooler and classifier only, not 50 x 16 embeddings
    assert losses[1] < losses[0]


def test_trainable_regex(checkpoint):
    model = from_pretrained(checkpoint)
    before = params(model)
    fit(model, steps=1, lr=1e-2, trainable=r"layers\.1\..*\.bias$")
    after = params(model)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and all(
        k.startswith("encoder.layers.1.") and k.endswith("bias") for k in changed
    )
    with pytest.raises(ValueError, match=r"selects no parameter of EncoderModel"):
        Trainer(from_pretrained(checkpoint), optax.adamw(1e-3), inputs=INPUTS,
                trainable=r"nothing\.here")  # fmt: skip


def test_remat_gives_the_same_step(checkpoint):
    plain, remat = from_pretrained(checkpoint), from_pretrained(checkpoint)
    _, a = fit(plain, steps=2, lr=1e-3)
    _, b = fit(remat, steps=2, lr=1e-3, remat=True)
    assert remat.encoder.remat and not plain.encoder.remat
    np.testing.assert_allclose(a, b, rtol=1e-5)
    for k, v in params(plain).items():
        np.testing.assert_allclose(params(remat)[k], v, atol=1e-6, err_msg=k)
    with pytest.raises(ValueError, match="has no module that supports gradient checkpointing"):
        Trainer(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), optax.adamw(1e-3), remat=True)


def test_bfloat16_compute_float32_master_weights(checkpoint):
    model = from_pretrained(checkpoint)
    trainer, losses = fit(model, steps=3, lr=1e-3, dtype="bfloat16")
    assert trainer.precision == "bfloat16"
    assert all(v.dtype == np.float32 for v in params(model).values())
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_trainable_lora_trains_a_new_head_with_the_adapters(tmp_path):
    """A masked-LM checkpoint fine-tuned for classification through adapters: the newly
    initialised head (pooler, classifier) trains with them, or the classifier would keep its
    random head (near-chance predictions) and still save it; the encoder stays as loaded."""
    save_checkpoint(tmp_path, "bert", "masked-lm", tokenizer=False, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)  # fmt: skip
    with pytest.warns(UserWarning, match="newly initialised"):
        model = from_pretrained(tmp_path, task="sequence-classification", num_labels=3,
                                lora=LoRA(rank=2))  # fmt: skip
    before = params(model)
    _, losses = fit(model, steps=2, lr=1e-2, trainable="lora")
    after = params(model)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert {"classifier.kernel", "classifier.bias"} <= changed, sorted(changed)
    assert any(k.endswith("lora_b") for k in changed), sorted(changed)
    assert all(k.startswith(("classifier.", "pooler.")) or k.endswith(("lora_a", "lora_b"))
               for k in changed), sorted(changed)  # fmt: skip
    assert losses[1] < losses[0], losses
