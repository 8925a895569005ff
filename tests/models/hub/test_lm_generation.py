"""Generation with the key/value cache on Hub causal language models: greedy tokens equal to
``transformers``' ``generate(do_sample=False)`` for every family (a batch of prompts of different
lengths, left-padded), end-of-sequence lists, steps, compile counts, sampling, stop strings and
the errors of ``jaxfeed.text.generate``."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from jaxfeed.text import generate  # noqa: E402
from jaxfeed.train import generation  # noqa: E402
from jaxfeed.train.generation import compilations, generate_ids  # noqa: E402
from models.hub.lm_checkpoints import (  # noqa: E402
    CONFIGS,
    left_padded,
    load,
    save_checkpoint,
    word_tokenizer,
)

PROMPTS = [[5, 17, 33], [40, 41, 42, 43, 44, 45, 46, 47, 48], [90, 3, 7, 60, 61, 9]]
NEW = 12


def reference(torch_model, prompts, eos, new=NEW):
    """transformers' greedy continuations (cut before the first of ``eos``) and its step count."""
    ids, mask = left_padded(prompts)
    with torch.no_grad():
        out = torch_model.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                                   do_sample=False, max_new_tokens=new, eos_token_id=eos,
                                   pad_token_id=0)  # fmt: skip
    rows = []
    for row in out[:, ids.shape[1] :].tolist():
        cut = min((row.index(e) for e in eos if e in row), default=len(row))
        rows.append(row[:cut])
    return rows, out.shape[1] - ids.shape[1]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    torch_model = save_checkpoint(request.param, folder)
    return request.param, torch_model, load(folder)


def test_greedy_tokens_equal_transformers_generate(pair):
    kind, torch_model, model = pair
    expected, _ = reference(torch_model, PROMPTS, [2])
    got = generate_ids(model, PROMPTS, NEW, temperature=0, eos_token_id=2)
    assert got.tokens == expected, kind
    # every row ends at a token it produces (each row's 3rd, unless an earlier one is in the set)
    ends = sorted({row[2] for row in expected})
    expected, steps = reference(torch_model, PROMPTS, ends)
    got = generate_ids(model, PROMPTS, NEW, temperature=0, eos_token_id=ends)
    assert got.tokens == expected, kind
    assert got.steps == steps <= 3  # decoding stopped when every row had ended


@pytest.mark.parametrize("pair", ["gpt2", "qwen3"], indirect=True)
def test_one_program_per_batch_size_and_length_bucket(pair):
    _, _, model = pair
    # programs are per process: another test may have compiled these shapes already
    generation._cached_jit.clear_cache()
    generation._decode_jit.clear_cache()
    before = compilations()
    generate_ids(model, PROMPTS, 12, temperature=0)
    generate_ids(model, [[*p, 11] for p in PROMPTS], 10, temperature=0.8, top_k=5, seed=3)
    generate_ids(
        model, [[7] * 10, [8], [9, 9]], 14, temperature=1.0, top_p=0.9, eos_token_id=[4, 5]
    )
    assert compilations() - before == 1  # prompt bucket 16, cache bucket 32 for all three
    generate_ids(model, PROMPTS[:1], 12, temperature=0)
    assert compilations() - before == 2  # another batch size


@pytest.mark.parametrize("pair", ["llama", "mistral"], indirect=True)
def test_sampling_is_reproducible_and_top_k_1_is_greedy(pair):
    _, _, model = pair
    first = generate_ids(model, PROMPTS, NEW, temperature=1.5, seed=7)
    assert first == generate_ids(model, PROMPTS, NEW, temperature=1.5, seed=7)
    assert first != generate_ids(model, PROMPTS, NEW, temperature=1.5, seed=8)
    greedy = generate_ids(model, PROMPTS, NEW, temperature=0)
    assert generate_ids(model, PROMPTS, NEW, temperature=2.0, top_k=1, seed=9) == greedy
    assert generate_ids(model, PROMPTS, NEW, temperature=0.7, top_p=1e-6, seed=9) == greedy


def test_generate_text_with_generation_config_eos_list_and_stop_strings(tmp_path):
    folder = tmp_path / "llama"
    torch_model = save_checkpoint("llama", folder)
    tok = word_tokenizer()
    prompts = ["t5 t17 t33", "t40 t41 t42 t43 t44 t45 t46 t47 t48"]
    ids = [[5, 17, 33], [40, 41, 42, 43, 44, 45, 46, 47, 48]]
    plain, _ = reference(torch_model, ids, [2])
    ends = [2, plain[0][4], plain[1][6]]
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": ends}))
    model = load(folder)
    expected, _ = reference(torch_model, ids, ends)
    texts = generate(model, tok, prompts, NEW, temperature=0)
    assert texts == [" ".join(f"t{i}" for i in row) for row in expected]
    assert len(expected[0]) <= 4 and len(expected[1]) <= 6  # the list from the file was used
    row = max(range(2), key=lambda r: len(expected[r]))
    assert len(expected[row]) >= 2
    stop = f" t{expected[row][1]}"
    cut = generate(model, tok, prompts[row], NEW, temperature=0, stop=[stop, "never"])
    assert cut == texts[row][: texts[row].index(stop)] and len(cut) < len(texts[row])
    # a preprocessor's padding and truncation do not reach the prompts
    tok.enable_padding(pad_id=0, pad_token="<pad>")
    tok.enable_truncation(max_length=4)
    assert generate(model, tok, prompts, NEW, temperature=0) == texts
    assert tok.padding is not None and tok.truncation is not None  # the caller's is unchanged


def test_generate_errors_are_clear(tmp_path):
    folder = tmp_path / "gpt2"
    save_checkpoint("gpt2", folder)  # a context of 128 positions
    model, tok = load(folder), word_tokenizer()
    with pytest.raises(TypeError, match="prompts is None"):
        generate(model, tok, None)
    with pytest.raises(ValueError, match=r"prompt 0 .* has 100 tokens; max_new_tokens=40 is more "
                       r"than the 28 tokens left in the model's context of 128"):  # fmt: skip
        generate(model, tok, " ".join(["t5"] * 100), max_new_tokens=40)
    with pytest.raises(ValueError, match="has 130 tokens; that is longer than the model's context "
                       "of 128 tokens") as err:  # fmt: skip
        generate(model, tok, ["t5", " ".join(["t5"] * 130)], max_new_tokens=4)
    assert "at most 0" not in str(err.value)
    with pytest.raises(ValueError, match="eos_token_id must be a token id or a list"):
        generate(model, tok, "t5", eos_token_id="</s>")
