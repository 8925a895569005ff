"""The command on a corpus: a character-level language model of a generated corpus (each
paragraph counts up the alphabet from a random letter, a line ending after each z, as prose is
wrapped), trained once per module on the corpus concatenated and cut into windows; its
perplexity against the corpus's unigram perplexity, eval, generate across line ends, the export
and resume."""

import json
import math
import random
import shutil
import string
from collections import Counter

import numpy as np
import pytest

from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported
from jaxfeed.text import load_tokenizer

SMALL = ["--model", "transformer", "--model.init_args.dim", "64", "--model.init_args.depth", "1",
         "--model.init_args.num_heads", "4"]  # fmt: skip
PERPLEXITY_BOUND = 3.0  # the unigram perplexity of the corpus's tokens is about 26


def alphabet_lines(count=500, seed=0):
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    lines = []
    for _ in range(count):
        start, n = rng.randrange(26), rng.randint(20, 40)
        lines.append("".join(letters[(start + k) % 26] for k in range(n)))
    return lines


def wrapped_corpus(count=260, seed=0):
    """Paragraphs of 40-80 letters counting up the alphabet, a line break after each ``z`` (as
    prose is wrapped), a blank line between them: the alphabet continues across each line end."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    paragraphs = []
    for _ in range(count):
        start, n = rng.randrange(26), rng.randint(40, 80)
        run = "".join(letters[(start + k) % 26] for k in range(n))
        paragraphs.append(run.replace("z", "z\n").rstrip("\n"))
    return "\n\n".join(paragraphs) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(wrapped_corpus())
    return path


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "lm"
    result = jaxfeed(
        "train", "--task", "lm", "--data", str(corpus), "--seq-len", "64", "--vocab-size", "261",
        "--epochs", "4", "--lr", "0.003", "--batch-size", "16", "--out", str(out), *SMALL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def unigram_perplexity(tokenizer, text):
    """The perplexity of each token of the concatenated corpus predicted from its frequency
    alone (line breaks included)."""
    counts = Counter(tokenizer.encode(text, add_special_tokens=False).ids)
    total = sum(counts.values())
    entropy = -sum(c / total * math.log(c / total) for c in counts.values())
    return math.exp(entropy)


def test_a_character_model_learns_the_corpus_far_below_unigram(corpus, lm_run):
    out, stdout = lm_run
    assert f"data {corpus}: detected text file" in stdout
    assert "text: column 'text' is free text" not in stdout  # a corpus is text by definition
    assert "text: column 'text', concatenated (--sample-by line|paragraph|document" in stdout
    assert "texts put end to end (line breaks kept) and cut into windows of 64 tokens" in stdout
    assert "inputs: packed rows of 64 token ids, target: the next token" in stdout
    assert "751 train / 86 validation texts; " in stdout  # texts; the epochs count packed rows
    assert "(86 rows, in 10 blocks of consecutive rows, the order kept, seed 0)" in stdout
    assert "windows (the packed rows an epoch counts)" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["task"] == "lm" and saved["preprocess"]["kind"] == "lm"
    tokenizer = load_tokenizer(out / "tokenizer.json")
    assert tokenizer.get_vocab_size() == 261  # bytes, 4 special tokens and one merge
    unigram = unigram_perplexity(tokenizer, wrapped_corpus())
    assert 20 < unigram < 30
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    best = min(r["eval_perplexity"] for r in rows)
    assert best < PERPLEXITY_BOUND < unigram / 5, (best, unigram)
    assert "validation perplexity" in stdout
    # curves.png: the loss, token accuracy and perplexity (no empty accuracy panel): 3 panels
    from PIL import Image

    with Image.open(out / "curves.png") as curves:
        assert curves.size[0] > 1700, curves.size  # 5.5 inches a panel at 110 dpi


def test_eval_reports_perplexity_over_real_tokens(lm_run, capsys):
    out, _ = lm_run
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    report = json.loads(shown)
    assert report["task"] == "lm" and report["split"] == "validation" and report["rows"] == 86
    assert report["windows"] == math.ceil(report["tokens"] / 64)
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    best = next(r for r in rows if r.get("epoch") == report["checkpoint"]["epoch"])
    assert report["perplexity"] == pytest.approx(best["eval_perplexity"], rel=1e-4)
    assert report["perplexity"] == pytest.approx(math.exp(report["loss"]), rel=1e-4)
    status, shown, _ = run_main(capsys, "eval", str(out))
    assert status == 0 and f"perplexity {report['perplexity']:.4f}" in shown


def test_generate_greedy_continues_the_alphabet_and_the_export_agrees(lm_run, capsys):
    out, _ = lm_run
    # 40 new tokens for two prompts of up to 8 tokens: the decoding the next test compiles
    args = ["generate", str(out), "defgh", "qrstu", "--max-new-tokens", "40", "--json"]
    status, shown, err = run_main(capsys, *args, "--temperature", "0")
    assert status == 0, err
    greedy = json.loads(shown)
    assert [g["prompt"] for g in greedy] == ["defgh", "qrstu"]
    assert greedy[0]["text"].startswith("ijk") and greedy[1]["text"].startswith("vwx"), greedy
    assert json.loads(run_main(capsys, *args, "--temperature", "0")[1]) == greedy
    sampled = [json.loads(run_main(capsys, *args, "--seed", "3", "--top-k", "5")[1]) for _ in "ab"]
    assert sampled[0] == sampled[1]
    # the export takes token ids: its greedy next token is generate's first
    tokenizer = load_tokenizer(out / "tokenizer.json")
    ids = np.array([tokenizer.encode("defgh", add_special_tokens=False).ids], np.int32)
    served = load_exported(out / "model")
    logits = np.asarray(served(input_ids=ids, attention_mask=np.ones_like(ids),
                               segment_ids=np.ones_like(ids),
                               positions=np.arange(ids.shape[1], dtype=np.int32)[None]))  # fmt: skip
    assert tokenizer.decode([int(logits[0, -1].argmax())]) == greedy[0]["text"][0]
    # a plain prompt needs its ids alone: the mask, segments and positions are its own
    np.testing.assert_allclose(served(input_ids=ids), logits, atol=1e-6)
    # ... or strings: its tokenizer.json travels in model/ and makes the same ids
    assert (out / "model" / "tokenizer.json").is_file()
    np.testing.assert_allclose(served("defgh"), logits, atol=1e-6)
    np.testing.assert_allclose(served({"text": ["defgh"]}), logits, atol=1e-6)


def test_generate_crosses_line_ends_unless_told_to_stop(lm_run, capsys):
    """A line-wrapped corpus gives continuations across its line ends (the README's lines), and
    --stop "\\n" ends them at the first."""
    out, _ = lm_run
    # two prompts: the decoding the test above compiled (a batch of 2, 40 new tokens)
    args = ["generate", str(out), "cdefghij", "qrs", "--max-new-tokens", "40", "--temperature", "0"]
    status, shown, err = run_main(capsys, *args, "--json")
    assert status == 0, err
    texts = [row["text"] for row in json.loads(shown)]
    text = texts[0]
    assert "\n" in text.strip("\n"), text  # a line end inside the continuation
    letters = "".join(text.split("\n")[:2])  # the alphabet goes on across the line end
    expected = "".join(string.ascii_lowercase[(10 + k) % 26] for k in range(len(letters)))
    assert letters == expected, text
    status, shown, err = run_main(capsys, *args, "--stop", "\\n", "--json")
    assert status == 0, err
    assert [row["text"] for row in json.loads(shown)] == [t.split("\n")[0] for t in texts]


def test_sample_by_paragraph_reads_one_text_per_paragraph(corpus):
    from jaxfeed.recipes.config import RunConfig
    from jaxfeed.recipes.kinds.registry import kind_for
    from jaxfeed.recipes.run_data import load_run_data

    for sample_by, rows in (("paragraph", 260), ("document", 1), (None, None)):
        data = load_run_data(
            RunConfig(data=str(corpus), task="lm", sample_by=sample_by, val_split=0), None, kind_for
        )
        texts = data.splits.train["text"][:]
        if rows is not None:
            assert len(texts) == rows
        else:  # concatenated: the rows end to end are the file as written
            assert "".join(texts) == corpus.read_text()


def test_sample_by_paragraph_on_the_command_line_is_said_and_recorded(corpus, tmp_path):
    out = tmp_path / "para"
    result = jaxfeed(
        "train", "--task", "lm", "--data", str(corpus), "--sample-by", "paragraph", "--seq-len",
        "64", "--vocab-size", "261", "--epochs", "1", "--batch-size", "16", "--out", str(out),
        *SMALL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "text: column 'text', one text per paragraph (--sample-by)" in result.stdout
    assert "234 train / 26 validation texts" in result.stdout
    assert "each text is its own segment" in result.stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["sample_by"] == "paragraph"
    assert saved["preprocess"]["text"]["sample_by"] == "paragraph"


def test_prompts_too_long_and_other_runs_are_refused(lm_run, capsys):
    out, _ = lm_run
    status, _, err = run_main(capsys, "generate", str(out), "abc" * 30, "--max-new-tokens", "50")
    assert status == 2
    assert "prompt 0 ('abcabcabcabcabcabcabcabcabcabcabcabcabca') is 90 tokens" in err
    assert "the model's context of 64 tokens" in err
    status, _, err = run_main(capsys, "predict", str(out), "abc")
    assert status == 2 and "is a language model" in err and "jaxfeed generate" in err


def test_resume_continues_and_refuses_a_different_seq_len(lm_run, tmp_path, capsys):
    out = tmp_path / "lm"
    shutil.copytree(lm_run[0], out)
    status, _, err = run_main(capsys, "train", "--out", str(out), "--resume", "--seq-len", "32")
    assert status == 2 and "--seq-len 32 contradicts the run's saved seq_len 64" in err
    result = jaxfeed("train", "--out", str(out), "--resume", "--epochs", "5")
    assert result.returncode == 0, result.stderr
    assert "epoch 5/5" in result.stdout and "epoch 4/5" not in result.stdout


def test_bad_corpora_are_refused_before_anything_is_written(tmp_path, capsys):
    binary = tmp_path / "latin1.txt"
    binary.write_bytes("caf\u00e9 au lait\n".encode() + "na\u00efve\n".encode("latin-1"))
    table = tmp_path / "docs.jsonl"
    table.write_text("".join(json.dumps({"id": i, "body": ""}) + "\n" for i in range(10)))
    cases = [
        (["--data", str(binary)], "not UTF-8 text: byte 0xef at line 2, column 3 (offset 16)"),
        (["--data", str(table), "--text-column", "body"],
         "the text column 'body' is empty in 10 of 10 rows"),
        (["--data", str(table)], "--task lm needs a text column: none of ['id', 'body'] is free text"),
        (["--data", str(binary), "--label-column", "x"], "--task lm learns the text itself"),
    ]  # fmt: skip
    for i, (args, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        status, _, err = run_main(capsys, "train", "--task", "lm", *args, "--out", str(out))
        assert status == 2 and message in err, (args, err)
        assert not out.exists()


def test_a_corpus_of_one_line_says_to_give_val_split_0(tmp_path, capsys):
    """issue 63, D22: refused for its validation split without saying how to train on it."""
    corpus = tmp_path / "one-line.txt"
    corpus.write_text(" ".join(alphabet_lines(200)) + "\n")
    out = tmp_path / "out"
    status, _, err = run_main(capsys, "train", "--task", "lm", "--data", str(corpus), "--out",
                              str(out))  # fmt: skip
    assert status == 2 and not out.exists(), err
    assert err.strip().splitlines() == [
        "jaxfeed train: error: --val-split 0.1: the train split has 1 row (a line of the corpus), "
        "too few to carve a validation split from: give --val-split 0 (no validation split: the "
        "last epoch is kept) or put the corpus on more lines (the validation split takes whole "
        "lines)"
    ]


def test_a_jsonl_column_is_a_corpus_too(tmp_path):
    from jaxfeed.recipes.config import RunConfig
    from jaxfeed.recipes.kinds.registry import kind_for
    from jaxfeed.recipes.run_data import load_run_data

    path = tmp_path / "docs.jsonl"
    lines = alphabet_lines(40)
    path.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(lines)))
    for text_column in ("body", None):
        config = RunConfig(data=str(path), task="lm", text_column=text_column)
        if text_column is None:  # one word per line is not free text: the column must be named
            with pytest.raises(ValueError, match="--task lm needs a text column"):
                load_run_data(config, None, kind_for)
            continue
        run_data = load_run_data(config, None, kind_for)
        assert run_data.task == "lm" and run_data.columns.inputs == ["body"]
        assert run_data.columns.kind == "lm" and run_data.labels == []
        assert run_data.splits.train.num_rows == 36 and run_data.splits.eval.num_rows == 4
