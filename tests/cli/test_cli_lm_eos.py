"""A tokenizer without an end-of-sequence token (issue 37, bad input): plain generation runs to
``--max-new-tokens``, as ``transformers`` does without an ``eos_token_id``; where the end of a
text must be found it is one line, exit 2, naming the checkpoint or tokenizer and what to give,
before anything is written: ``generate --chat`` (nothing would end the reply, unless ``--stop``)
and ``train --task lm`` on texts put end to end (nothing would separate them, unless they end
with line breaks or ``--sample-by`` makes each its own segment). Tokenizers are built here with
``tokenizers``; the checkpoint is a tiny random Llama saved by ``transformers`` (no download)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from cli_helpers import run_main

VOCAB = 97
# a run these tests' data can take (8 fake devices): without the checks, the tables would train
SMALL = ["--seq-len", "16", "--batch-size", "8", "--max-steps", "1"]
TEMPLATE = "{{ messages[0]['content'] }} t3{% if add_generation_prompt %} t4{% endif %}"


def no_eos_tokenizer():
    """Word-level: ``tN`` is id N, id 0 ``<unk>``; no ``<eos>``, ``</s>``, ``<|endoftext|>``... and
    no special tokens at all, so every generated id decodes to one word."""
    import tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "<x>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return tok


def texts(n: int = 40, seed: int = 0) -> list[str]:
    """Runs of consecutive tokens (``t17 t18 ... t24``), no line breaks."""
    rng = random.Random(seed)
    firsts = [rng.randrange(5, 80) for _ in range(n)]
    return [" ".join(f"t{first + k}" for k in range(8)) for first in firsts]


def write_table(path: Path) -> Path:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["text"]] + [[t] for t in texts(400)])
    return path


@pytest.fixture(scope="module")
def no_eos_ckpt(tmp_path_factory):
    """A tiny random Llama whose config.json and generation_config.json set no eos_token_id,
    with the tokenizer above and a chat template."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hub") / "no-eos-llama"
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    saved = {k: v for k, v in saved.items() if k not in ("eos_token_id", "bos_token_id")}
    (folder / "config.json").write_text(json.dumps(saved))
    (folder / "generation_config.json").unlink(missing_ok=True)
    no_eos_tokenizer().save(str(folder / "tokenizer.json"))
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder


def test_plain_generation_without_eos_runs_to_max_new_tokens(no_eos_ckpt, capsys):
    from jaxfeed.models import from_pretrained, preprocessor
    from jaxfeed.train.generation import end_ids, generate_ids

    model, tok = from_pretrained(no_eos_ckpt, task="causal-lm"), preprocessor(no_eos_ckpt)
    assert end_ids(model, tok) == []
    assert generate_ids(model, [[5, 6, 7]], 6, temperature=0).steps == 6
    status, out, err = run_main(capsys, "generate", str(no_eos_ckpt), "t5 t6 t7", "--temperature",
                                "0", "--max-new-tokens", "6", "--json")  # fmt: skip
    assert status == 0, err
    [row] = json.loads(out)
    assert len(row["text"].split()) == 6, row


def test_chat_without_eos_is_refused_unless_stop_is_given(no_eos_ckpt, capsys):
    status, out, err = run_main(capsys, "generate", str(no_eos_ckpt), "t5 t6", "--chat",
                                "--max-new-tokens", "4")  # fmt: skip
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"--chat: {no_eos_ckpt} has no end-of-sequence token" in err
    assert "Give --stop TEXT" in err and "Traceback" not in err
    status, out, err = run_main(capsys, "generate", str(no_eos_ckpt), "t5 t6", "--chat",
                                "--max-new-tokens", "4", "--temperature", "0", "--stop", "t50")  # fmt: skip
    assert status == 0, err
    assert len(out.strip().split()) <= 4


def test_fine_tuning_texts_put_end_to_end_needs_an_eos(no_eos_ckpt, tmp_path, capsys):
    table = write_table(tmp_path / "table.csv")
    out = tmp_path / "run"
    status, _, err = run_main(capsys, "train", "--task", "lm", "--data", str(table), "--model",
                              str(no_eos_ckpt), *SMALL, "--out", str(out))  # fmt: skip
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--model {no_eos_ckpt}: its tokenizer.json has no end-of-sequence token" in err
    assert "config.json sets no eos_token_id" in err and "--sample-by" in err
    assert not out.exists()


@pytest.mark.slow  # one short fine-tuning run: about 20 s of CPU
def test_a_corpus_with_line_breaks_fine_tunes_and_its_run_refuses_chat(no_eos_ckpt, tmp_path,
                                                                        capsys):  # fmt: skip
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts(240)) + "\n")
    out = tmp_path / "run"
    status, stdout, err = run_main(capsys, "train", "--task", "lm", "--data", str(corpus),
                                   "--model", str(no_eos_ckpt), *SMALL, "--out", str(out))  # fmt: skip
    assert status == 0, err
    assert "line breaks kept" in stdout
    status, _, err = run_main(capsys, "generate", str(out), "t5 t6", "--chat")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--chat: {no_eos_ckpt} has no end-of-sequence token" in err
    status, text, err = run_main(capsys, "generate", str(out), "t5 t6", "--max-new-tokens", "3",
                                 "--temperature", "0", "--json")  # fmt: skip
    assert status == 0, err
    [row] = json.loads(text)
    assert len(row["text"].split()) == 3, row  # no end: all three new tokens


def test_a_given_tokenizer_without_eos_is_refused_for_texts_put_end_to_end(tmp_path, capsys):
    table = write_table(tmp_path / "table.csv")
    tokenizer = tmp_path / "tokenizer.json"
    no_eos_tokenizer().save(str(tokenizer))
    out = tmp_path / "run"
    status, _, err = run_main(capsys, "train", "--task", "lm", "--data", str(table), "--tokenizer",
                              str(tokenizer), *SMALL, "--out", str(out))  # fmt: skip
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--tokenizer {tokenizer} has no end-of-sequence token" in err
    assert "--sample-by line|paragraph|document" in err
    assert not out.exists()


def test_the_checkpoints_eos_token_id_separates_texts_when_the_tokenizer_has_none():
    from jaxfeed.recipes.sources.hub_checkpoint import _token_id

    def eos(config):
        return _token_id(config.get("eos_token_id"))

    assert eos({"eos_token_id": 2}) == 2
    assert eos({"eos_token_id": [128001, 128009]}) == 128001  # Llama 3 lists several
    assert eos({}) is None and eos({"eos_token_id": None}) is None
    assert eos({"eos_token_id": True}) is None and eos({"eos_token_id": []}) is None
