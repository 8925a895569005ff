"""The conventions of `transformers` (and Grain) that jaxfeed follows, each checked against the
installed peer: bucketing's order and mega-batch size, padding and truncation sides; and the two
places where jaxfeed is right and the peer is not (labels of real tokens equal to the pad id, the
(last pad, first real token) pair under left padding)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxfeed import Dataset, Padding
from jaxfeed.loading.bucketing import LengthGroupedOrder, mega_batch_count
from jaxfeed.loading.order import Permutation
from jaxfeed.loading.padding import pad_batch

tp = pytest.importorskip("transformers.trainer_pt_utils")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


def _tokenizer(padding_side: str | None = None, truncation: tuple[int, str] | None = None):
    vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    if padding_side is not None:
        tok.enable_padding(direction=padding_side, pad_id=1, pad_token="[PAD]")
    if truncation is not None:
        tok.enable_truncation(truncation[0], direction=truncation[1])
    return tok


def _hf(tok):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]")


def _transformers_order(lengths, batch_size, base, mega_batch_mult=None):
    """transformers' get_length_grouped_indices with its random permutation replaced by ``base``."""
    real = torch.randperm
    tp.torch.randperm = lambda n, generator=None: torch.as_tensor(base)
    try:
        return np.array(
            tp.get_length_grouped_indices(lengths.tolist(), batch_size, mega_batch_mult)
        )
    finally:
        tp.torch.randperm = real


# ---------------------------------------------------------------------------------- bucketing
@pytest.mark.parametrize("n, batch_size", [(30, 4), (1000, 8), (5000, 16), (100_000, 32)])
def test_mega_batch_size_is_transformers_default(n, batch_size):
    """Giving transformers our count explicitly changes nothing: it is its own default."""
    rng = np.random.default_rng(n)
    lengths = rng.permutation(n) + 1  # distinct lengths: one sorted order
    base = rng.permutation(n)
    count = mega_batch_count(n, batch_size)
    assert count == max(1, min(n // (4 * batch_size), 50))
    ours = _transformers_order(lengths, batch_size, base, mega_batch_mult=count)
    theirs = _transformers_order(lengths, batch_size, base)
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("n, batch_size", [(37, 4), (1000, 8), (3001, 16)])
def test_bucketing_batches_and_first_batch_as_transformers(n, batch_size):
    """Same permutation in: the same batches as transformers (as sets, their order shuffled),
    the batch holding the longest row first; every epoch gets new batches."""
    lengths = np.random.default_rng(n).permutation(n) + 1
    seed, epoch = 3, 1
    base = Permutation(n, (seed, epoch))(np.arange(n, dtype=np.uint64))
    # the longest row in the first mega-batch, so transformers' swap moves nothing
    mega = mega_batch_count(n, batch_size) * batch_size
    lengths[[base[0], int(np.argmax(lengths))]] = lengths[[int(np.argmax(lengths)), base[0]]]
    assert lengths[base[:mega]].max() == lengths.max()
    order = LengthGroupedOrder(lengths, batch_size, seed, epoch, shuffle=True).rows(0, n)
    theirs = _transformers_order(lengths, batch_size, base)
    full = n // batch_size * batch_size

    def batches(o):
        return sorted(tuple(sorted(o[i : i + batch_size])) for i in range(0, full, batch_size))

    assert sorted(order.tolist()) == list(range(n))
    assert batches(order) == batches(theirs)
    assert set(order[:batch_size]) == set(theirs[:batch_size])
    assert lengths[order[:batch_size]].max() == lengths.max()
    other = LengthGroupedOrder(lengths, batch_size, seed, epoch + 1, shuffle=True).rows(0, n)
    assert batches(other) != batches(order)  # not one sorted epoch reordered
    assert lengths[other[:batch_size]].max() == lengths.max()


def test_loader_first_batch_holds_the_longest_row_every_epoch():
    from jaxfeed import DataLoader

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, size=300)
    lengths[217] = 64
    ds = Dataset.from_dict({"input_ids": [np.arange(k, dtype=np.int32) for k in lengths]})
    loader = DataLoader(ds, batch_size=8, shuffle=True, seed=1, bucket_by_length=True, prefetch=0)
    for _ in range(3):
        first = next(iter(loader))
        assert np.asarray(first["input_ids"]).shape[1] == 64


def test_stream_bucketing_puts_the_longest_batch_first():
    import pyarrow as pa

    from jaxfeed.loading.bucketing import bucket_table

    rng = np.random.default_rng(1)
    rows = [list(range(int(k))) for k in rng.integers(1, 30, size=97)]
    rows[50] = list(range(80))
    out = bucket_table(pa.table({"ids": rows}), "ids", 8, seed=0, epoch=0)
    assert max(len(r) for r in out["ids"].to_pylist()[:8]) == 80


# ---------------------------------------------------------------------------------- padding
@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_follows_the_tokenizer_side_as_transformers(side):
    tok = _tokenizer(padding_side=side)
    rows = [[2, 3, 4], [5], [6, 7]]
    theirs = _hf(tok).pad({"input_ids": rows}, return_tensors="np")
    padding = Padding(tokenizer=tok)
    assert padding.padding_side == side
    ours = pad_batch({"input_ids": [np.array(r, np.int32) for r in rows]}, padding)
    assert ours["input_ids"].tolist() == theirs["input_ids"].tolist()
    assert ours["attention_mask"].astype(int).tolist() == theirs["attention_mask"].tolist()
    # an explicit side wins over the tokenizer's, as transformers' padding_side does
    other = "right" if side == "left" else "left"
    hf = _hf(tok)
    hf.padding_side = other
    theirs = hf.pad({"input_ids": rows}, return_tensors="np")
    explicit = Padding(tokenizer=tok, side=other)
    assert explicit.padding_side == other
    flipped = pad_batch({"input_ids": [np.array(r, np.int32) for r in rows]}, explicit)
    assert flipped["input_ids"].tolist() == theirs["input_ids"].tolist()
    assert flipped["input_ids"].tolist() != ours["input_ids"].tolist()
    assert flipped["attention_mask"].astype(int).tolist() == theirs["attention_mask"].tolist()


def test_left_padding_with_labels_and_lengths():
    batch = {
        "input_ids": [np.array([5, 6, 7]), np.array([8])],
        "labels": [np.array([1, 2, 3]), np.array([4])],
    }
    out = pad_batch(batch, Padding(lengths=(4,), side="left"))
    assert out["input_ids"].tolist() == [[0, 5, 6, 7], [0, 0, 0, 8]]
    assert out["labels"].tolist() == [[-100, 1, 2, 3], [-100, -100, -100, 4]]
    assert out["attention_mask"].tolist() == [
        [False, True, True, True],
        [False, False, False, True],
    ]
    with pytest.raises(ValueError, match="side"):
        Padding(side="center")


def test_left_padding_in_the_loader():
    from jaxfeed import DataLoader

    ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4], [5, 6]]})
    batch = next(iter(DataLoader(ds, batch_size=3, padding=Padding(side="left"), prefetch=0)))
    assert np.asarray(batch["input_ids"]).tolist() == [[1, 2, 3], [0, 0, 4], [0, 5, 6]]


# ---------------------------------------------------------------------------------- truncation
@pytest.mark.parametrize("side", ["left", "right"])
def test_tokenize_truncates_on_the_tokenizer_side_as_transformers(side):
    from jaxfeed.text import tokenize

    tok = _tokenizer(truncation=(64, side))
    texts = ["a b c d e f", "g h", "a c e g b"]
    theirs = _hf(tok)(texts, truncation=True, max_length=3)["input_ids"]
    ours = tokenize(Dataset.from_dict({"text": texts}), tok, "text", max_length=3)
    assert ours["input_ids"] == theirs
    assert ours[0]["input_ids"] == ([5, 6, 7] if side == "left" else [2, 3, 4])
    again = tokenize(
        Dataset.from_dict({"text": texts}), tok, "text", max_length=3, truncation_side="right"
    )
    assert again[0]["input_ids"] == [2, 3, 4]


# ------------------------------------------------------------------- where jaxfeed is right
def test_labels_mask_only_padding_not_real_tokens_equal_to_pad_id():
    """transformers' mlm=False collator sets every label equal to the pad id to -100, real tokens
    too (GPT-2's eos is its pad); jaxfeed masks padding positions only."""
    from transformers import DataCollatorForLanguageModeling

    tok = _tokenizer(padding_side="right")
    rows = [[2, 1, 3], [4]]  # row 0 holds a real token equal to the pad id (1)
    theirs = DataCollatorForLanguageModeling(_hf(tok), mlm=False, return_tensors="np")(
        [{"input_ids": r} for r in rows]
    )
    arrays = [np.array(r, np.int32) for r in rows]
    ours = pad_batch({"input_ids": arrays, "labels": arrays}, Padding(tokenizer=tok))
    assert theirs["labels"].tolist() == [[2, -100, 3], [4, -100, -100]]
    assert ours["labels"].tolist() == [[2, 1, 3], [4, -100, -100]]
    assert ours["input_ids"].tolist() == theirs["input_ids"].tolist()


def test_causal_loss_skips_the_pad_to_first_token_pair_under_left_padding():
    """With left padding transformers' shifted labels count the pair (last pad -> first real
    token); jaxfeed's next_token loss counts only pairs of two real tokens."""
    from transformers import DataCollatorForLanguageModeling

    from jaxfeed.train.tokens import next_token_pairs

    tok = _tokenizer(padding_side="left")
    rows = [[2, 3, 4], [5]]
    theirs = DataCollatorForLanguageModeling(_hf(tok), mlm=False, return_tensors="np")(
        [{"input_ids": r} for r in rows]
    )
    counted_by_transformers = (theirs["labels"][:, 1:] != -100).sum(axis=1).tolist()
    ours = pad_batch({"input_ids": [np.array(r, np.int32) for r in rows]}, Padding(tokenizer=tok))
    assert ours["input_ids"].tolist() == theirs["input_ids"].tolist()
    _, valid = next_token_pairs({k: np.asarray(v) for k, v in ours.items()}, "input_ids")
    assert counted_by_transformers == [2, 1]  # row 1: pad -> 5 counted
    assert np.asarray(valid).sum(axis=1).tolist() == [2, 0]


# ---------------------------------------------------------------------------------- bfloat16
def _bf16_rows():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    return bf, {
        "input_ids": [np.array([1, 2, 3], np.int32), np.array([4], np.int32)] * 2,
        "w": [np.array([1.5, 2, 3], bf), np.array([-0.25], bf)] * 2,
    }


def test_bfloat16_rows_keep_their_dtype_in_the_dataset():
    from jaxfeed import Features, Value

    bf, data = _bf16_rows()
    ds = Dataset.from_dict(
        {**data, "s": np.array([1.25, 3, 4, 5], bf), "m": [np.ones((2, 3), bf)] * 4}
    )
    assert str(ds.features["w"]) == "List(Value('bfloat16'))"
    assert ds.features["s"] == Value("bfloat16")
    numpy = ds.with_format("numpy")
    assert numpy[0]["w"].dtype == bf and numpy[:]["s"].dtype == bf and numpy[:]["m"].dtype == bf
    assert numpy[0]["w"].tolist() == [1.5, 2.0, 3.0]
    assert ds.with_format("jax")[:]["s"].dtype == bf
    assert ds[1]["w"] == [-0.25]  # python: the exact values
    # a declared bfloat16 column rounds what it stores, as a cast to bfloat16 does
    declared = Dataset.from_dict({"v": [1.1]}, features=Features({"v": Value("bfloat16")}))
    assert declared[0]["v"] == float(np.float32(bf(1.1)))


def test_bfloat16_rows_keep_their_dtype_through_save_and_load(tmp_path):
    from jaxfeed import load_from_disk

    bf, data = _bf16_rows()
    Dataset.from_dict(data).save_to_disk(str(tmp_path / "d"))
    back = load_from_disk(str(tmp_path / "d")).with_format("numpy")
    assert back[1]["w"].dtype == bf


@pytest.mark.parametrize("stream", [False, True])
def test_bfloat16_through_the_loader_padding_and_packing(stream):
    from jaxfeed import DataLoader, Packing

    bf, data = _bf16_rows()
    ds = Dataset.from_dict(data)
    source = ds.to_iterable_dataset() if stream else ds
    padded = next(iter(DataLoader(source, batch_size=2, padding=Padding(), prefetch=0)))
    assert padded["w"].dtype == bf
    assert np.asarray(padded["w"]).astype(np.float32).tolist() == [[1.5, 2, 3], [-0.25, 0, 0]]
    packed = next(iter(DataLoader(source, batch_size=1, packing=Packing(length=8), prefetch=0)))
    assert packed["w"].dtype == bf and packed["input_ids"].dtype != bf


def test_bfloat16_packing_as_grain():
    """Grain's packing keeps bfloat16 rows bfloat16 with the same values; so does jaxfeed's."""
    grain = pytest.importorskip("grain")
    from jaxfeed import DataLoader, Packing

    bf, data = _bf16_rows()
    rows = [
        {"input_ids": i, "w": w} for i, w in zip(data["input_ids"][:2], data["w"][:2], strict=True)
    ]
    theirs = next(
        iter(
            grain.experimental.FirstFitPackIterDataset(
                grain.MapDataset.source(rows).to_iter_dataset(),
                length_struct={"input_ids": 8, "w": 8},
                num_packing_bins=1,
            )
        )
    )
    ours = next(
        iter(
            DataLoader(
                Dataset.from_dict({k: v[:2] for k, v in data.items()}),
                batch_size=1,
                packing=Packing(length=8),
                prefetch=0,
            )
        )
    )
    assert theirs["w"].dtype == bf == ours["w"].dtype
    assert np.asarray(ours["w"])[0].tolist() == theirs["w"].tolist()
    assert np.asarray(ours["segment_ids"])[0].tolist() == theirs["w_segment_ids"].tolist()
