"""jaxfeed.text: tokenizers trained, saved, loaded and applied to datasets."""

import fsspec
import numpy as np
import pytest
from tokenizers import Tokenizer

from jaxfeed import DataLoader, Dataset, DatasetDict, IterableDataset, Padding, load_dataset
from jaxfeed.text import load_tokenizer, special_tokens, tokenize, train_tokenizer

WORDS = [
    "the",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "a",
    "mat",
    "big",
    "small",
    "red",
    "fox",
    "jumps",
    "over",
    "lazy",
    "quick",
    "brown",
]


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(k))) for k in rng.integers(1, 30, size=200)]
    return Dataset.from_dict({"text": texts, "y": np.arange(200)})


@pytest.mark.parametrize(
    ("kind", "first", "last"),
    [("bpe", None, "<eos>"), ("wordpiece", "[CLS]", "[SEP]"), ("unigram", None, "<eos>")],
)
def test_train_save_load_round_trip(corpus, tmp_path, kind, first, last):
    size = 300 if kind == "bpe" else 120
    tok = train_tokenizer(corpus, "text", vocab_size=size, kind=kind)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    texts = corpus["text"][:20]
    want = [e.ids for e in tok.encode_batch(texts)]
    assert [e.ids for e in Tokenizer.from_file(str(path)).encode_batch(texts)] == want
    assert [e.ids for e in load_tokenizer(path).encode_batch(texts)] == want
    assert [e.ids for e in load_tokenizer(tmp_path).encode_batch(texts)] == want  # the folder
    enc = tok.encode(texts[0])
    assert enc.tokens[-1] == last and (first is None or enc.tokens[0] == first)
    assert tok.decode(enc.ids).replace(" ", "") == texts[0].replace(" ", "")
    specials = special_tokens(tok)
    assert specials[last] == tok.token_to_id(last) and min(specials.values()) == 0
    assert 20 < tok.get_vocab_size() <= size


def test_load_from_an_fsspec_url_and_bad_files(corpus, tmp_path):
    tok = train_tokenizer(corpus, "text", vocab_size=80, kind="wordpiece")
    fs = fsspec.filesystem("memory")
    with fs.open("/varlen/tok/tokenizer.json", "w") as f:
        f.write(tok.to_str())
    for url in ("memory://varlen/tok/tokenizer.json", "memory://varlen/tok"):
        assert load_tokenizer(url).encode("the cat").ids == tok.encode("the cat").ids
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(ValueError, match=r"bad\.json is not a tokenizer\.json: it is not JSON"):
        load_tokenizer(bad)
    bad.write_text('{"vocab": {"a": 1}}')
    with pytest.raises(ValueError, match=r"bad\.json is not a tokenizer\.json.*'model'"):
        load_tokenizer(bad)
    bad.write_text('{"model": {"type": "Nonsense"}}')
    with pytest.raises(ValueError, match=r"bad\.json is not a valid tokenizer\.json"):
        load_tokenizer(bad)
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match=r"bad\.json.*not JSON"):
        load_tokenizer(bad)
    with pytest.raises(FileNotFoundError, match="missing"):
        load_tokenizer(tmp_path / "missing.json")


def test_tokenize_adds_ids_and_mask_and_feeds_padding(corpus):
    tok = train_tokenizer(corpus, "text", vocab_size=120, kind="wordpiece")
    out = tokenize(corpus, tok, "text")
    assert out.column_names == ["text", "y", "input_ids", "attention_mask"]
    rows = out[:50]
    assert rows["input_ids"] == [e.ids for e in tok.encode_batch(corpus["text"][:50])]
    assert all(
        m == [1] * len(i) for m, i in zip(rows["attention_mask"], rows["input_ids"], strict=True)
    )
    splits = tokenize(DatasetDict({"a": corpus.select(range(10)), "b": corpus}), tok)
    assert splits["b"]["input_ids"] == out["input_ids"] and splits["a"].num_rows == 10
    short = tokenize(corpus, tok, "text", max_length=5, remove_columns=True)
    assert short.column_names == ["y", "input_ids", "attention_mask"]
    assert max(len(r) for r in short["input_ids"]) == 5
    assert short[0]["input_ids"][0] == tok.token_to_id("[CLS]")
    assert short[0]["input_ids"][-1] == tok.token_to_id("[SEP]")  # special tokens kept
    loader = DataLoader(
        out.remove_columns(["text"]), batch_size=16, padding=Padding(multiple_of=8, tokenizer=tok)
    )
    batch = next(iter(loader))
    ids, mask = np.asarray(batch["input_ids"]), np.asarray(batch["attention_mask"])
    assert ids.shape[1] % 8 == 0 and mask.dtype == np.int8
    assert [ids[i][mask[i] == 1].tolist() for i in range(16)] == rows["input_ids"][:16]
    assert (ids[mask == 0] == tok.token_to_id("[PAD]")).all()


def test_tokenize_num_proc_and_stream_give_the_same_ids(corpus):
    tok = train_tokenizer(corpus, "text", vocab_size=300, kind="bpe")
    want = tokenize(corpus, tok, "text", batch_size=64)["input_ids"]
    assert tokenize(corpus, tok, "text", num_proc=2, batch_size=64)["input_ids"] == want
    stream = tokenize(IterableDataset.from_dataset(corpus), tok, "text", batch_size=64)
    assert [r["input_ids"] for r in stream] == want


def test_a_text_file_s_blank_lines_are_named_with_the_filter_that_drops_them(corpus, tmp_path):
    """Issue 64, item 10: ``load_dataset("text")`` keeps a blank line as an empty row (as
    ``datasets`` does); ``tokenize`` refuses it naming the row and the ``filter`` that drops such
    rows, which then works as written (on a stream too)."""
    tok = train_tokenizer(corpus, "text", vocab_size=80, kind="wordpiece")
    (tmp_path / "notes.txt").write_text("the cat sat\n\nthe dog ran\n  \na cat\n")
    lines = load_dataset("text", data_files=str(tmp_path / "notes.txt"), split="train")
    assert lines["text"][:] == ["the cat sat", "", "the dog ran", "  ", "a cat"]
    with pytest.raises(ValueError) as refused:
        tokenize(lines, tok)
    fix = "ds = ds.filter(lambda row: row['text'].strip() != '')"
    assert str(refused.value) == (
        "column 'text', row 1: expected a non-empty string, got an empty string "
        f'(load_dataset("text") keeps blank lines as empty rows, as datasets does; drop them first: '
        f"{fix})"
    )
    namespace = {"ds": lines}
    exec(fix, namespace)  # the fix as the message spells it
    assert tokenize(namespace["ds"], tok).num_rows == 3
    stream = load_dataset("text", data_files=str(tmp_path / "notes.txt"), split="train",
                          streaming=True)  # fmt: skip
    namespace = {"ds": stream}
    exec(fix, namespace)
    assert len(list(tokenize(namespace["ds"], tok))) == 3


def test_tokenize_bad_input(corpus):
    tok = train_tokenizer(corpus, "text", vocab_size=80, kind="wordpiece")
    with pytest.raises(
        ValueError, match=r"column 'text', row 2: expected a non-empty string, got None"
    ):
        tokenize(Dataset.from_dict({"text": ["a", "b", None]}), tok)
    with pytest.raises(
        ValueError, match=r"column 'text', row 1: expected a non-empty string, got an empty string"
    ):
        tokenize(Dataset.from_dict({"text": ["a", ""]}), tok)
    with pytest.raises(ValueError, match=r"column 'text', row 1: bytes that are not UTF-8"):
        tokenize(Dataset.from_dict({"text": [b"ok", b"\xff\xfe"]}), tok)
    assert (
        tokenize(Dataset.from_dict({"text": [b"the cat"]}), tok)[0]["input_ids"]
        == tok.encode("the cat").ids
    )
    with pytest.raises(ValueError, match=r"column 'text', row 1: '   ' gives no tokens"):
        tokenize(Dataset.from_dict({"text": ["cat", "   "]}), tok, add_special_tokens=False)
    with pytest.raises(ValueError, match=r"column 'body' is not in the dataset"):
        tokenize(corpus, tok, "body")
    with pytest.raises(ValueError, match="kind must be one of"):
        train_tokenizer(corpus, "text", kind="sentencepiece")
    with pytest.raises(ValueError, match=r"column 'y', row 0: expected a non-empty string, got 0"):
        train_tokenizer(corpus, "y")
    with pytest.raises(TypeError, match=r"tokenizers\.Tokenizer"):
        tokenize(corpus, "bert-base-uncased")
