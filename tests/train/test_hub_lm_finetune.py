"""Fine-tuning a Hub causal language model (a tiny random Llama) with the Trainer: next-token loss
on packed rows goes down, ``remat=True`` gives the same steps, bfloat16 compute keeps float32
parameters."""

import numpy as np
import optax
import pytest
from flax import nnx

pytest.importorskip("torch")
pytest.importorskip("transformers")

from jaxfeed import Trainer
from jaxfeed.models import from_pretrained
from models.hub.lm_checkpoints import save_checkpoint

COLUMNS = ("input_ids", "segment_ids", "positions")  # as Packing writes them


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    save_checkpoint("llama", folder)
    return folder


def packed_batch():
    rng = np.random.default_rng(0)
    ids, segments, positions = (np.zeros((4, 16), np.int32) for _ in range(3))
    for row in range(4):
        at = 0
        for s, n in enumerate((7, 5), 1):
            ids[row, at : at + n] = rng.integers(3, 97, n)
            segments[row, at : at + n], positions[row, at : at + n] = s, np.arange(n)
            at += n
    return {"input_ids": ids, "segment_ids": segments, "positions": positions}


def fit(model, steps=3, lr=1e-3, **kwargs):
    trainer = Trainer(model, optax.adamw(lr), loss="next_token", verbose=0,
                      inputs={c: c for c in COLUMNS}, **kwargs)  # fmt: skip
    losses = []
    for _ in range(steps):
        trainer.fit([packed_batch()], epochs=trainer.epoch + 1)
        losses.append(trainer.history[-1]["train_loss"])
    return trainer, losses


def test_next_token_fine_tuning_on_packed_rows(checkpoint):
    plain, remat = from_pretrained(checkpoint), from_pretrained(checkpoint)
    _, a = fit(plain)
    _, b = fit(remat, remat=True)
    assert a[-1] < a[0], a
    assert remat.remat and not plain.remat
    np.testing.assert_allclose(a, b, rtol=1e-5)
    model = from_pretrained(checkpoint)
    trainer, losses = fit(model, dtype="bfloat16")
    assert trainer.precision == "bfloat16"
    assert all(v.get_value().dtype == np.float32
               for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))  # fmt: skip
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
