"""Sampling in jaxfeed.text.generate: ``top_k=k`` draws only from the k most likely tokens of each
step (and, at a high temperature, from all of them), and ``top_k=1`` is greedy decoding whatever
the seed; with and without the key/value cache. Torch-free: a tiny built-in TransformerLM."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models import TransformerLM
from jaxfeed.train.generation import generate_ids

# three prompts of 8 tokens: a multiple of the prompt bucket, so no row is padded and the model run
# on a whole sequence gives the logits generate sampled each new token from
PROMPTS = [[3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17, 18], [20, 2, 31, 7, 7, 1, 9, 5]]
NEW = 8


@pytest.fixture(scope="module")
def lm():
    model = TransformerLM(40, dim=32, depth=1, num_heads=2, max_length=32, rngs=nnx.Rngs(3))
    model.eval()
    return model


def ranks(model, new_tokens):
    """The rank of each new token among the logits of its step (0: the most likely), from one
    run of the model on prompt + new tokens; ties within 1e-4 count in the token's favour (the
    compiled loop and this run differ by rounding)."""
    sequences = jnp.asarray([p + row for p, row in zip(PROMPTS, new_tokens, strict=True)])
    logits = np.asarray(model(sequences))  # (rows, 8 + NEW, vocab)
    start = len(PROMPTS[0])
    found = np.zeros((len(PROMPTS), NEW), np.int64)
    for r, row in enumerate(new_tokens):
        for i, token in enumerate(row):
            step = logits[r, start - 1 + i]
            found[r, i] = int((step > step[token] + 1e-4).sum())
    return found


@pytest.mark.parametrize(("k", "use_cache"), [(2, True), (3, True), (3, False)])
def test_top_k_draws_only_and_all_of_the_k_most_likely_tokens(lm, k, use_cache):
    drawn = []
    for seed in range(12):
        out = generate_ids(lm, PROMPTS, NEW, temperature=4.0, top_k=k, seed=seed,
                           use_cache=use_cache)  # fmt: skip
        assert [len(row) for row in out.tokens] == [NEW] * len(PROMPTS)
        drawn.append(ranks(lm, out.tokens))
    drawn = np.stack(drawn)  # (seeds, rows, steps)
    assert drawn.max() < k, np.bincount(drawn.ravel())  # never outside the k most likely
    # a hot temperature draws each of the k (a filter that keeps fewer would miss one)
    assert set(np.unique(drawn).tolist()) == set(range(k)), np.bincount(drawn.ravel())
    # without top_k the same temperature goes beyond them: the check above has teeth
    free = generate_ids(lm, PROMPTS, NEW, temperature=4.0, seed=0, use_cache=use_cache)
    assert ranks(lm, free.tokens).max() >= k


@pytest.mark.parametrize("use_cache", [True, False])
def test_top_k_1_is_greedy_for_every_seed(lm, use_cache):
    greedy = generate_ids(lm, PROMPTS, NEW, temperature=0, use_cache=use_cache).tokens
    assert ranks(lm, greedy).max() == 0
    for seed in range(6):
        sampled = generate_ids(lm, PROMPTS, NEW, temperature=3.0, top_k=1, seed=seed,
                               use_cache=use_cache)  # fmt: skip
        assert sampled.tokens == greedy, seed
    # the same temperature without top_k does not give the greedy tokens
    free = generate_ids(lm, PROMPTS, NEW, temperature=3.0, seed=0, use_cache=use_cache)
    assert free.tokens != greedy
