"""Dropout keys of the Trainer's step come from ``(seed, step)`` (counter-hash keys on a CPU, ``rbg``
on accelerators): two runs with the same seed train bitwise the same parameters, another seed
trains others."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.models.hub import bert
from jaxfeed.runtime.prng import COUNTER_HASH, dropout_impl
from jaxfeed.train.cores import dropout_key

CONFIG = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 32, "max_position_embeddings": 16, "hidden_dropout_prob": 0.3,
          "attention_probs_dropout_prob": 0.3}  # fmt: skip
INPUTS = {"input_ids": "input_ids", "attention_mask": "attention_mask"}


def _batches():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 40, (4, 6)).astype(np.int32)
    mask = np.ones((4, 6), np.int32)
    return [{"input_ids": ids, "attention_mask": mask, "label": np.arange(4) % 2}] * 3


def _train(seed: int) -> list[np.ndarray]:
    model = bert.build(CONFIG, task="sequence-classification", num_labels=2, dtype=None,
                       param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    trainer = Trainer(model, optax.sgd(0.5), inputs=INPUTS, seed=seed, verbose=0)
    trainer.fit(_batches(), epochs=1)
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(model, nnx.Param))]


def test_same_seed_same_run_other_seed_other_run():
    a, b, c = _train(1), _train(1), _train(2)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c, strict=True))


def test_dropout_key_is_the_backends_cheap_kind_and_depends_on_seed_and_step():
    assert dropout_impl() is COUNTER_HASH and dropout_impl("tpu") == "rbg"  # tests run on CPU
    assert str(jax.random.key_impl(dropout_key(0, 0))) == "ch"
    data = [np.asarray(jax.random.key_data(dropout_key(s, t))) for s, t in ((0, 0), (0, 1), (1, 0))]
    assert not np.array_equal(data[0], data[1]) and not np.array_equal(data[0], data[2])


def test_no_seed_replays_another_seeds_keys_at_another_step():
    """Every (seed, step) has its own key: with ``key(seed + step)`` seed 1 would replay seed
    0's masks one step later, and a seed sweep's runs would be correlated."""
    keys = {
        (seed, step): tuple(np.asarray(jax.random.key_data(dropout_key(seed, step))).tolist())
        for seed in range(4)
        for step in range(8)
    }
    assert len(set(keys.values())) == len(keys)
    masks = [np.asarray(jax.random.bernoulli(dropout_key(s, t), 0.5, (4096,)))
             for s, t in ((1, 0), (0, 1))]  # fmt: skip
    assert 0.45 < float(np.mean(masks[0] == masks[1])) < 0.55  # independent: half agree
