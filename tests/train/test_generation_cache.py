"""The key/value cache of jaxfeed.text.generate on the built-in TransformerLM: the same tokens as
the whole-buffer loop it replaces (learned and rotary positions, left-padded prompts), and the
loop ends when every row has produced an end-of-sequence id."""

import jax
import jax.numpy as jnp
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
    greedy = generate_ids(lm, PROMPTS, 12, temperature=0).tokens
    last = max(min(row.index(e) for e in ends if e in row) + 1 for row in greedy)
    assert out.steps == last <= 3 and all(len(row) <= 2 for row in out.tokens)
    assert compilations() == before  # the end ids are values: no new program


class Successor(nnx.Module):
    """A stub language model (with and without a cache) whose next token is always the last
    token plus one: the step at which each row reaches an end id is known in advance."""

    def __init__(self, vocab_size: int = 32) -> None:
        self.vocab_size = vocab_size

    def _next(self, ids: jax.Array) -> jax.Array:
        return 10.0 * jax.nn.one_hot((ids + 1) % self.vocab_size, self.vocab_size)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        return self._next(input_ids)

    def init_cache(self, batch: int, length: int) -> jax.Array:
        return jnp.zeros((batch, length), jnp.int32)

    def decode(self, input_ids: jax.Array, positions: jax.Array, key_mask: jax.Array,
               cache: jax.Array, index: jax.Array) -> tuple[jax.Array, jax.Array]:  # fmt: skip
        return self._next(input_ids[:, -1]), cache


@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_stops_at_the_step_the_last_row_ends(use_cache):
    # rows end (produce 20) at steps 1, 9 and 6: the first row first, the last row not last,
    # so a loop that watched one row, or any row, or none, runs a different number of steps
    out = generate_ids(Successor(), [[19], [5, 11], [14]], 16, temperature=0, eos_token_id=20,
                       use_cache=use_cache)  # fmt: skip
    assert out.tokens == [[], list(range(12, 20)), list(range(15, 20))]
    assert out.steps == 9
