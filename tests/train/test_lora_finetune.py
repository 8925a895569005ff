"""Training LoRA adapters with ``Trainer(trainable="lora")`` on a tiny random Llama: only the
adapters change and hold optimizer state (far fewer bytes than full fine-tuning), int8 frozen
weights train in bfloat16, and full fine-tuning of int8 weights is refused."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

pytest.importorskip("torch")
pytest.importorskip("transformers")

from jaxfeed import Trainer
from jaxfeed.models import LoRA, from_pretrained
from models.hub.lm_checkpoints import save_checkpoint
from train.test_hub_lm_finetune import COLUMNS
from train.test_hub_lm_finetune import fit as fit_at


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    save_checkpoint("llama", folder)
    return folder


def fit(model, steps=3, **kwargs):
    return fit_at(model, steps, 1e-2, **kwargs)


def flat(model):
    return {
        ".".join(map(str, k)): np.asarray(v.get_value())
        for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
    }


def optimizer_bytes(trainer) -> int:
    state = nnx.state(trainer.core.optimizer, nnx.OptState)
    return sum(x.nbytes for x in jax.tree.leaves(state) if hasattr(x, "nbytes"))


def test_only_adapters_train_and_hold_optimizer_state(checkpoint):
    model = from_pretrained(checkpoint, lora=LoRA(rank=2, targets=["q_proj", "v_proj"],
                                                  dropout=0.1))  # fmt: skip
    before = flat(model)
    trainer, losses = fit(model, trainable="lora")
    after = flat(model)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and all(k.endswith(("lora_a", "lora_b")) for k in changed), changed
    assert losses[-1] < losses[0], losses
    full_trainer, _ = fit(from_pretrained(checkpoint), steps=1)
    lora_bytes, full_bytes = optimizer_bytes(trainer), optimizer_bytes(full_trainer)
    adapters = sum(v.nbytes for k, v in after.items() if k.endswith(("lora_a", "lora_b")))
    assert lora_bytes <= 2 * adapters + 64 < full_bytes / 10, (lora_bytes, full_bytes)


def test_int8_weights_train_adapters_in_bfloat16_and_refuse_full_training(checkpoint):
    model = from_pretrained(checkpoint, lora=LoRA(rank=2), quantize="int8")
    _trainer, losses = fit(model, trainable="lora", dtype="bfloat16")
    assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
    assert model.layers[0].attention.query.lora_a[...].dtype == np.float32
    with pytest.raises(ValueError, match=r"is int8 .*trainable='lora'"):
        Trainer(from_pretrained(checkpoint, lora=LoRA(rank=2), quantize="int8"), optax.sgd(0.1),
                loss="next_token", inputs={c: c for c in COLUMNS})  # fmt: skip
    with pytest.raises(ValueError, match="has no LoRA adapters"):
        Trainer(from_pretrained(checkpoint), optax.sgd(0.1), loss="next_token",
                inputs={c: c for c in COLUMNS}, trainable="lora")  # fmt: skip
