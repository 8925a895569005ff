"""Stop strings end the decoding loop early: a row whose decoded text holds one is finished, and
decoding stops once every row is (counted in steps, with and without the key/value cache)."""

import jax
import pytest
from flax import nnx

from jax_compiles import compile_count
from jaxfeed import Dataset
from jaxfeed.models import TransformerLM
from jaxfeed.text import train_tokenizer
from jaxfeed.train import generation
from jaxfeed.train.generation import STOP_CHUNK, compilations, generate, generate_ids

NEW = 40


@pytest.fixture(scope="module")
def lm_and_tokenizer():
    tok = train_tokenizer(Dataset.from_dict({"text": ["abc abd"] * 8}), "text", vocab_size=270)
    lm = TransformerLM(tok.get_vocab_size(), dim=16, depth=1, num_heads=2, max_length=64,
                       rngs=nnx.Rngs(0))  # fmt: skip
    return lm, tok


def steps_of(monkeypatch, call):
    """The steps :func:`generation._run` ran for ``call()``, and what ``call`` returned."""
    seen = []
    real = generation._run

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out.steps)
        return out

    monkeypatch.setattr(generation, "_run", spy)
    result = call()
    monkeypatch.setattr(generation, "_run", real)
    return seen[-1], result


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_stop_string_ends_the_loop_early(lm_and_tokenizer, monkeypatch, use_cache):
    lm, tok = lm_and_tokenizer
    prompts = ["abc", "ab"]
    full = generate(lm, tok, prompts, NEW, temperature=0, eos_token_id=[], use_cache=use_cache)
    steps, _ = steps_of(monkeypatch, lambda: generate(lm, tok, prompts, NEW, temperature=0,
                                                      eos_token_id=[], use_cache=use_cache))  # fmt: skip
    assert steps == NEW  # without stop strings: every step
    # a stop string each row's text holds after its first tokens: the loop ends after a chunk
    stops = [full[0][:2], full[1][:2]]
    assert all(stops) and stops[1] not in full[0]
    steps, cut = steps_of(monkeypatch, lambda: generate(lm, tok, prompts, NEW, temperature=0,
                                                        eos_token_id=[], stop=stops,
                                                        use_cache=use_cache))  # fmt: skip
    assert steps == STOP_CHUNK < NEW
    assert cut == [t[: min(t.index(s) for s in stops if s in t)] for t in full]
    # a stop string only row 1 holds: row 0 keeps the loop running to the end
    steps, cut = steps_of(monkeypatch, lambda: generate(lm, tok, prompts, NEW, temperature=0,
                                                        eos_token_id=[], stop=stops[1],
                                                        use_cache=use_cache))  # fmt: skip
    assert steps == NEW and cut == [full[0], ""]


def test_finished_rows_stop_without_a_new_program(lm_and_tokenizer):
    lm, _ = lm_and_tokenizer
    generate_ids(lm, [[3, 4], [5]], NEW, temperature=0)
    before = compilations()
    calls = []

    def finished(rows):
        calls.append([len(r) for r in rows])
        return [len(r) >= 2 * STOP_CHUNK for r in rows]

    out = generate_ids(lm, [[3, 4], [5]], NEW, temperature=0, finished=finished)
    assert out.steps == 2 * STOP_CHUNK
    assert calls == [[STOP_CHUNK] * 2, [2 * STOP_CHUNK] * 2]
    assert compilations() == before  # the chunks run the program of the one-call loop


def test_the_chunks_compile_nothing_more_for_weights_placed_on_a_device(lm_and_tokenizer):
    """A model whose weights were put on a device (as ``from_pretrained`` places them): the
    carry made on the host and the one a chunk gives back look alike to ``jax.jit``, so the
    chunks after the first run the first chunk's program (they compiled it a second time)."""
    lm, _ = lm_and_tokenizer
    placed = nnx.clone(lm)
    nnx.update(placed, jax.device_put(nnx.state(placed), jax.devices()[0]))
    before = compile_count(generation._cached_jit)
    out = generate_ids(placed, [[3, 4], [5], [6]], NEW, temperature=0,
                       finished=lambda rows: [False] * len(rows))  # fmt: skip
    assert out.steps == NEW  # five chunks
    assert compile_count(generation._cached_jit) == before + 1


def test_each_row_stops_at_its_own_stop_string(lm_and_tokenizer, monkeypatch):
    """Row 0's stop string shows in the first chunk, row 1's only in the second: row 1 keeps
    decoding after row 0 is finished, and the loop ends once row 1 holds its own."""
    lm, tok = lm_and_tokenizer
    prompts = ["a", "ab"]
    encoded = [tok.encode(p, add_special_tokens=False).ids for p in prompts]
    rows = generate_ids(lm, encoded, NEW, temperature=0, eos_token_id=[]).tokens
    texts = [[tok.decode(r[:n], skip_special_tokens=True) for n in range(NEW + 1)] for r in rows]
    # a row's text after its first n tokens: a stop string it holds from step n on, not before
    stops = [texts[0][3], texts[1][STOP_CHUNK + 4]]
    assert stops[0] not in texts[0][2] and stops[1] not in texts[1][STOP_CHUNK + 3]
    assert stops[0] not in texts[1][STOP_CHUNK] and stops[1] not in texts[0][STOP_CHUNK]
    steps, cut = steps_of(monkeypatch, lambda: generate(lm, tok, prompts, NEW, temperature=0,
                                                        eos_token_id=[], stop=stops))  # fmt: skip
    assert steps == 2 * STOP_CHUNK < NEW
    assert cut == ["", ""]  # each stop string is its row's first text: cut before it
