"""Checkpoints of run folders written before the layer stacks were stored stacked
(``previous_layout/``, written by jaxfeed at 6b9ffc2 with ``previous_layout/write_previous_layout.py``: each layer's
weights and optimizer state apart) restore converted into today's stacked models: the Trainer
resumes them (model and AdamW state) and a LoRA run over int8 weights too, weights-only restores
read them, and the restored models give the logits the old jaxfeed computed. A checkpoint of
other sizes is still refused."""

import shutil
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfeed import Trainer
from jaxfeed.models.stacked import Stack
from jaxfeed.train.checkpoint import CheckpointError, CheckpointManager, restore_weights

HERE = Path(__file__).parent / "previous_layout"
sys.path.insert(0, str(HERE))
import write_previous_layout as make  # noqa: E402  (the models the checkpoints were written with)

BERT_INPUTS = {"input_ids": "input_ids", "attention_mask": "attention_mask"}


@pytest.fixture
def old(tmp_path):
    """A copy of the old run folders (a manager opening them never touches the originals)."""
    shutil.copytree(HERE, tmp_path / "old", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "old"


def _logits(model, **batch):
    model.eval()
    return np.asarray(model(**{k: jnp.asarray(v) for k, v in batch.items()}))


def test_a_bert_run_resumes_converted(old):
    model = make.bert_model()
    assert isinstance(model.encoder.layers, Stack)
    trainer = Trainer(model, optax.adamw(1e-2), inputs=BERT_INPUTS, verbose=0, seed=0)
    with CheckpointManager(old / "bert" / "checkpoints", async_save=False) as manager:
        meta = trainer.restore_checkpoint(manager)
    assert meta["step"] == 2
    x = np.load(HERE / "inputs.npy")
    expected = np.load(HERE / "bert" / "logits.npy")
    np.testing.assert_allclose(_logits(model, input_ids=x, attention_mask=np.ones_like(x)),
                               expected, rtol=1e-5, atol=1e-6)  # fmt: skip
    mu = trainer.core.optimizer.opt_state[0].mu.encoder.layers.layer.attention.query.kernel
    assert mu.get_value().shape == (2, 8, 8) and float(jnp.abs(mu.get_value()).max()) > 0
    model.train()
    batch = {"input_ids": x, "attention_mask": np.ones_like(x), "label": np.arange(4) % 2}
    trainer.fit([batch], epochs=trainer.epoch + 1)  # the resumed state trains on
    assert trainer.step == 3 and np.isfinite(trainer.history[-1]["train_loss"])


def test_a_lora_run_over_int8_weights_resumes_converted(old):
    model = make.llama_model()
    trainer = Trainer(model, optax.adamw(1e-2), inputs={"input_ids": "input_ids"},
                      loss="next_token", trainable="lora", verbose=0, seed=0)  # fmt: skip
    with CheckpointManager(old / "llama-lora" / "checkpoints", async_save=False) as manager:
        trainer.restore_checkpoint(manager)
    assert model.layers.layer.attention.query.kernel.get_value().dtype == jnp.int8
    expected = np.load(HERE / "llama-lora" / "logits.npy")
    x = np.load(HERE / "inputs.npy")
    np.testing.assert_allclose(_logits(model, input_ids=x), expected, rtol=1e-5, atol=1e-5)


def test_weights_only_restore_reads_the_old_layout(old):
    model = make.bert_model()
    restore_weights(old / "bert" / "checkpoints", model)
    x = np.load(HERE / "inputs.npy")
    np.testing.assert_allclose(_logits(model, input_ids=x, attention_mask=np.ones_like(x)),
                               np.load(HERE / "bert" / "logits.npy"), rtol=1e-5, atol=1e-6)  # fmt: skip


def test_a_model_of_other_sizes_is_still_refused(old):
    make.BERT["num_hidden_layers"] = 3
    try:
        model = make.bert_model()
    finally:
        make.BERT["num_hidden_layers"] = 2
    with pytest.raises(CheckpointError, match=r"cannot restore step 2 .*layers"):
        restore_weights(old / "bert" / "checkpoints", model)
