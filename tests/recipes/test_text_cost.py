"""Issue 54, item 4: a text classifier's default length, batch and bucket count follow the
data's cost: a few long texts no longer set a 512-token bucket of 64-row batches (whose
attention took most of the run's 26 minutes and 4 GB), and the budget line says why."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed import Dataset
from jaxfeed.models import TransformerClassifier
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.config.budget import auto_batch, resolve
from jaxfeed.recipes.kinds.lm import LMKind
from jaxfeed.recipes.kinds.text import TextKind, forward_flops, transformer_shape
from jaxfeed.recipes.spec import Preprocessing


def test_long_tail_texts_get_a_shorter_cap_smaller_batches_and_fewer_buckets():
    rng = np.random.default_rng(0)
    # 541 paragraphs as the license texts' are: median ~50 tokens, a few of 300-600
    lengths = np.concatenate(
        [rng.integers(6, 120, 530), rng.integers(150, 240, 8), [587, 450, 300]]
    )
    texts = [" ".join(["w"] * int(n)) for n in lengths]
    train = Dataset.from_dict({"text": texts, "label": [i % 8 for i in range(len(texts))]})
    kind, config = TextKind(), RunConfig(vocab_size=300)
    prep, notes = kind.plan_text(train, "text", "label", "classification", config)
    cap = prep.max_length
    assert cap < 300, notes  # not the longest text (587) nor 512: 99% of the texts kept whole
    padding = next(n for n in notes if n.startswith("padding:"))
    assert "longer than" in padding and "are cut (--seq-len to choose)" in padding
    assert len(prep.text["lengths"]) == 2  # 68 batches an epoch: 2 lengths, not 4
    limit = kind.max_batch(prep)
    assert limit is not None and limit[0] * cap <= 2048 and limit[0] >= 8
    sized = auto_batch(RunConfig(), train.num_rows, 1, limit)
    assert sized.batch_size == limit[0] < 64
    _, budget = resolve(sized, True, train.num_rows, -(-train.num_rows // sized.batch_size),
                        True, limit)  # fmt: skip
    assert f"batch {limit[0]} (at most 2,048 tokens of {cap})" in budget.describe("eval_loss")


def test_the_counted_flops_are_what_xla_counts_for_the_model():
    """The budget's count of the built-in transformer's forward pass (for its expected cost)
    agrees with XLA's cost analysis of the model itself, at two lengths."""
    model = TransformerClassifier(300, 4, dim=32, depth=2, num_heads=4, rngs=nnx.Rngs(0))
    model.eval()
    for length in (16, 96):
        ids = jnp.ones((4, length), jnp.int32)
        xla = jax.jit(lambda i, m: model(i, m)).lower(ids, ids).cost_analysis()["flops"]
        counted = forward_flops(np.full(4, length), *transformer_shape({"dim": 32, "depth": 2}))
        assert counted == pytest.approx(xla, rel=0.1), (length, counted, xla)


def test_an_epoch_counts_each_train_row_at_its_bucket_and_the_validation_rows_at_the_longest():
    rows = [" ".join(["w"] * n) for n in [5] * 40 + [60] * 8]
    train = Dataset.from_dict({"text": rows, "label": [i % 2 for i in range(len(rows))]})
    kind = TextKind()
    config = RunConfig(vocab_size=300, batch_size=4, model="transformer")
    prep, _ = kind.plan_text(train, "text", "label", "classification", config)
    prep.text["lengths"] = [8, 64]  # as two buckets would have it
    tokens = kind.prepare(prep, train)
    lengths = np.array([len(r) for r in tokens["input_ids"]])
    held = tokens.select(range(8))  # 2 batches of 4: one length, the longest
    shape = transformer_shape({})
    padded = np.where(lengths <= 8, 8, 64)
    expected = 3 * forward_flops(padded, *shape) + forward_flops(np.full(8, 64), *shape)
    assert kind.epoch_flops(prep, config, tokens, held) == pytest.approx(expected)
    other = RunConfig(vocab_size=300, batch_size=4, model="mlp")
    assert kind.epoch_flops(prep, other, tokens, held) is None  # counted for the transformer only


def test_held_out_rows_are_loaded_as_the_kind_loads_them():
    """A language model's validation rows are packed as its train rows (not padded as a
    classifier's); a classifier's small validation split is padded to its longest length."""
    lm = Preprocessing("lm", ["t"], "", [64], "lm", text={"max_length": 64, "lengths": [64],
                                                          "pad_id": 0})  # fmt: skip
    options = LMKind().held_options(lm, 3)
    assert options == LMKind().loader_options(lm, False) and "packing" in options
    text = Preprocessing("text", ["t"], "y", [256], text={"lengths": [96, 256], "pad_id": 0})
    assert TextKind().held_options(text, 25)["padding"].lengths == (256,)
    assert TextKind().loader_options(text, False)["padding"].lengths == (96, 256)
