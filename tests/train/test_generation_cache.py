"""The key/value cache of jaxfeed.text.generate on the built-in TransformerLM: the same tokens as
the whole-buffer loop it replaces (learned and rotary positions, left-padded prompts), and the
loop ends when every row has produced an end-of-sequence id."""

import pytest
from flax import nnx

from jaxfeed.models import TransformerLM
from jaxfeed.train.generation import compilations, generate_ids

PROMPTS = [[3, 4, 5], [6, 7, 8, 9, 10, 11, 12, 13, 14], [15]]


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_cache_gives_the_tokens_of_the_whole_buffer_loop(positions):
    lm = TransformerLM(40, dim=32, depth=2, num_heads=4, max_length=32, positions=positions,
                       rngs=nnx.Rngs(1))  # fmt: skip
    lm.eval()
    for settings in ({"temperature": 0}, {"temperature": 1.3, "seed": 4, "top_k": 10}):
        cached = generate_ids(lm, PROMPTS, 12, **settings)
        plain = generate_ids(lm, PROMPTS, 12, use_cache=False, **settings)
        assert cached.tokens == plain.tokens and len(cached.tokens[0]) == 12
    # the third token of every row ends it: three steps, whatever max_new_tokens says
    ends = sorted({row[2] for row in generate_ids(lm, PROMPTS, 12, temperature=0).tokens})
    before = compilations()
    out = generate_ids(lm, PROMPTS, 12, temperature=0, eos_token_id=ends)
    assert out.steps <= 3 and all(len(row) <= 2 for row in out.tokens)
    assert compilations() == before  # the end ids are values: no new program
