"""Writes the checkpoints of ``tests/models/hub/previous_layout`` with jaxfeed as it was before the
layer stacks were stored stacked (6b9ffc2: one variable per layer, ``encoder.layers.0.…``):

    git archive 6b9ffc2 src | tar -x -C OLD
    PYTHONPATH=OLD/src python tests/models/hub/previous_layout/write_previous_layout.py tests/models/hub/previous_layout

A tiny BERT trained two steps with AdamW (model and optimizer state), and a tiny Llama with LoRA
adapters over int8 weights trained two steps (``trainable="lora"``); beside each, the logits
of the trained model (evaluation mode) on ``inputs.npy``.
"""

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.models import LoRA
from jaxfeed.models.hub import adapters, bert, decoder
from jaxfeed.models.hub.family import HubConfig
from jaxfeed.train.checkpoint import CheckpointManager

BERT = {"model_type": "bert", "vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16}  # fmt: skip
LLAMA = {"model_type": "llama", "vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 32,
         "max_position_embeddings": 32}  # fmt: skip


def ids() -> np.ndarray:
    return np.random.default_rng(0).integers(1, 30, (4, 6)).astype(np.int32)


def bert_model():
    model = bert.build(BERT, task="sequence-classification", num_labels=2, dtype=None,
                       param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    model.hub_config, model.hub_task = HubConfig(BERT), "sequence-classification"
    return model


def llama_model():
    model = decoder.build_lm(decoder.llama_like_spec(LLAMA), LLAMA, task="causal-lm",
                             num_labels=None, dtype=None, param_dtype=jnp.float32,
                             rngs=nnx.Rngs(0))  # fmt: skip
    model.hub_config = HubConfig(LLAMA)
    # alpha=16: LoRA's default at 6b9ffc2, when the checkpoint was written (issue 61 made it
    # 2 x rank). A checkpoint holds no alpha, so the model it restores into must name it: with
    # today's default (4) the adapters' update is scaled by 2, not 8, and the logits differ.
    lora = LoRA(rank=2, alpha=16, targets=("q_proj", "v_proj"))
    adapters.add_lora(model, lora, quantize="int8")
    return model


def write(folder: Path, model, trainer_kwargs: dict, batch: dict) -> None:
    trainer = Trainer(model, optax.adamw(1e-2), verbose=0, seed=0, **trainer_kwargs)
    trainer.fit([batch, batch], epochs=1)
    with CheckpointManager(folder / "checkpoints", async_save=False) as manager:
        trainer.save_checkpoint(manager)
    model.eval()
    args = {k: jnp.asarray(v) for k, v in batch.items() if k != "label"}
    np.save(folder / "logits.npy", np.asarray(model(**args)))


def main(out: Path) -> None:
    x = ids()
    np.save(out / "inputs.npy", x)
    write(out / "bert", bert_model(),
          {"inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask"}},
          {"input_ids": x, "attention_mask": np.ones_like(x), "label": np.arange(4) % 2})  # fmt: skip
    write(out / "llama-lora", llama_model(),
          {"inputs": {"input_ids": "input_ids"}, "loss": "next_token", "trainable": "lora"},
          {"input_ids": x})  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
