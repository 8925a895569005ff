"""Issue 54, item 4: a text classifier's default length, batch and bucket count follow the
data's cost: a few long texts no longer set a 512-token bucket of 64-row batches (whose
attention took most of the run's 26 minutes and 4 GB), and the budget line says why."""

from __future__ import annotations

import numpy as np

from jaxfeed import Dataset
from jaxfeed.recipes.budget import auto_batch, resolve
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.text import TextKind


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
    assert len(prep.text["lengths"]) == 2  # 34 batches an epoch: 2 lengths, not 4
    limit = kind.max_batch(prep)
    assert limit is not None and limit[0] * cap <= 4096 and limit[0] >= 8
    sized = auto_batch(RunConfig(), train.num_rows, 1, limit)
    assert sized.batch_size == limit[0] < 64
    _, budget = resolve(sized, True, train.num_rows, -(-train.num_rows // sized.batch_size),
                        True, limit)  # fmt: skip
    assert f"batch {limit[0]} (at most 4,096 tokens of {cap})" in budget.describe("eval_loss")
