"""Issue 54 (cosmetic): a language model's export is called on token ids alone; the
``attention_mask``, ``segment_ids`` and ``positions`` of plain prompts are filled in, as
``jaxfeed predict`` and ``generate`` make them."""

import numpy as np
import pytest
from flax import nnx

from jaxfeed import export, load_exported
from jaxfeed.models import TransformerLM
from jaxfeed.serve.spec import token_batch

IDS = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]], np.int32)
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    lm = TransformerLM(40, dim=16, depth=1, num_heads=2, max_length=8, rngs=nnx.Rngs(0))
    ones = np.ones((1, 4), np.int32)
    example = {"input_ids": ones, "attention_mask": ones, "segment_ids": ones,
               "positions": np.arange(4, dtype=np.int32)[None]}  # fmt: skip
    return load_exported(export(lm, tmp_path_factory.mktemp("exports") / "lm", example))


def test_token_ids_alone_are_a_batch_of_plain_prompts(served):
    ones = np.ones_like(IDS)
    positions = np.broadcast_to(np.arange(IDS.shape[1], dtype=np.int32), IDS.shape)
    full = served.call(input_ids=IDS, attention_mask=ones, segment_ids=ones, positions=positions)
    np.testing.assert_array_equal(served.call(input_ids=IDS), full)
    np.testing.assert_array_equal(served(input_ids=IDS), full)


def test_a_given_mask_sets_the_segments_and_positions_as_token_batch_does(served):
    class Tokens:  # a tokenizer giving IDS's rows, for token_batch's own mask and positions
        padding = truncation = None

        def encode_batch(self, texts, add_special_tokens):
            rows = [r[m == 1].tolist() for r, m in zip(IDS, MASK, strict=True)]
            return [type("E", (), {"ids": r}) for r in rows]

    batch = token_batch(Tokens(), ["a", "b"], 8, 0, cut=False)
    np.testing.assert_array_equal(batch["input_ids"], IDS)
    full = served.call(**batch)
    np.testing.assert_array_equal(served.call(input_ids=IDS, attention_mask=MASK), full)


def test_the_token_ids_are_still_required(served):
    with pytest.raises(TypeError, match=r"keyword input\(s\) \['attention_mask', 'input_ids', "):
        served.call(attention_mask=MASK)
    with pytest.raises(ValueError, match=r"input input_ids of .*lm must have shape \(batch, "
                       r"length\), got \(5,\)"):  # fmt: skip
        served.call(input_ids=IDS[0])
    with pytest.raises(ValueError, match=r"input attention_mask of .*lm has shape \(2, 4\); "
                       r"input input_ids \(2, 5\): they must be the same"):  # fmt: skip
        served.call(input_ids=IDS, attention_mask=MASK[:, :4])
