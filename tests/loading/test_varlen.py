"""Variable-length data into a jitted step: padding, bucketing by length, packing."""

import json
import textwrap

import jax
import numpy as np
import pytest

from jaxfeed import DataLoader, Dataset, Packing, Padding
from jaxfeed.loading.padding import pad_batch


def ragged_dataset(n=60, seed=0, low=1, high=20, extra=True):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high, size=n)
    ids = [list(range(1000 * i + 1, 1000 * i + 1 + int(k))) for i, k in enumerate(lengths)]
    data = {"input_ids": ids}
    if extra:
        data["labels"] = [[v % 7 for v in row] for row in ids]
    return Dataset.from_dict(data), lengths


def rows_of(batch, column="input_ids"):
    """The real values of each padded row (mask from attention_mask)."""
    mask = np.asarray(batch["attention_mask"])
    values = np.asarray(batch[column])
    return [values[i][mask[i]].tolist() for i in range(len(values))]


# ---------------------------------------------------------------------------------- padding
def test_padding_to_buckets_labels_and_mask():
    ds, lengths = ragged_dataset()
    loader = DataLoader(ds, batch_size=8, padding=Padding(lengths=(8, 16, 32)), prefetch=0)
    seen = []
    for batch in loader:
        ids = np.asarray(batch["input_ids"])
        real = rows_of(batch)
        longest = max(len(r) for r in real)
        assert ids.shape[1] == min(v for v in (8, 16, 32) if v >= longest)
        assert ids.dtype == np.int32 and batch["attention_mask"].dtype == np.bool_
        labels = np.asarray(batch["labels"])
        mask = np.asarray(batch["attention_mask"])
        assert (labels[~mask] == -100).all() and (ids[~mask] == 0).all()
        assert rows_of(batch, "labels") == [[v % 7 for v in r] for r in real]
        seen += real
    assert [len(r) for r in seen] == lengths.tolist()
    assert seen[0][0] == 1 and seen[-1][-1] == 1000 * 59 + lengths[-1]


def test_multiple_of_longest_and_companion_mask():
    ds = Dataset.from_dict(
        {
            "input_ids": [[1, 2, 3], [4], [5, 6, 7, 8, 9]],
            "attention_mask": [[1, 1, 1], [1], [1] * 5],
        }
    )
    batch = next(iter(DataLoader(ds, batch_size=3, padding=Padding(multiple_of=4))))
    assert np.asarray(batch["input_ids"]).tolist() == [
        [1, 2, 3, 0, 0, 0, 0, 0],
        [4, 0, 0, 0, 0, 0, 0, 0],
        [5, 6, 7, 8, 9, 0, 0, 0],
    ]
    # the data's own mask is padded with 0 (not replaced by a boolean one)
    assert np.asarray(batch["attention_mask"]).sum(axis=1).tolist() == [3, 1, 5]
    assert batch["attention_mask"].shape == (3, 8)
    longest = next(iter(DataLoader(ds, batch_size=2, padding=Padding())))
    assert longest["input_ids"].shape == (2, 3)


def test_padding_pads_rows_of_one_length_too_and_keeps_other_columns():
    ds = Dataset.from_dict({"input_ids": [[1, 2], [3, 4]], "y": [0, 1], "text": ["a", "b"]})
    batch = next(iter(DataLoader(ds, batch_size=2, padding=Padding(lengths=(4,)))))
    assert batch["input_ids"].shape == (2, 4)
    assert np.asarray(batch["y"]).tolist() == [0, 1] and batch["text"] == ["a", "b"]


def test_columns_of_other_lengths_are_padded_apart_and_tokenizer_pad_id():
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "<pad>": 3}, unk_token="[UNK]"))
    ds = Dataset.from_dict({"input_ids": [[5, 6, 7], [8]], "labels": [[1], [2, 2]]})
    batch = next(iter(DataLoader(ds, batch_size=2, padding=Padding(tokenizer=tok))))
    assert np.asarray(batch["input_ids"]).tolist() == [[5, 6, 7], [8, 3, 3]]
    assert np.asarray(batch["labels"]).tolist() == [[1, -100], [2, 2]]
    assert np.asarray(batch["attention_mask"]).tolist() == [[True] * 3, [True, False, False]]


def test_two_dimensional_rows_are_padded_on_the_first_axis():
    frames = [np.full((k, 3), k, dtype=np.float32) for k in (2, 5, 1)]
    ds = Dataset.from_dict({"audio": [f.tolist() for f in frames], "label": [0, 1, 2]})
    batch = next(iter(DataLoader(ds, batch_size=3, padding=Padding(multiple_of=4))))
    audio = np.asarray(batch["audio"])
    assert audio.shape == (3, 8, 3) and audio.dtype == np.float32
    for i, f in enumerate(frames):
        np.testing.assert_array_equal(audio[i, : len(f)], f)
        assert (audio[i, len(f) :] == 0).all()
    assert np.asarray(batch["attention_mask"]).sum(axis=1).tolist() == [2, 5, 1]


def test_too_long_rows_error_or_truncate():
    ds = Dataset.from_dict({"input_ids": [[1, 2], list(range(1, 11)), [3]]})
    with pytest.raises(ValueError, match=r"row 1: column 'input_ids' has 10 values.*truncate=True"):
        list(DataLoader(ds, batch_size=3, padding=Padding(lengths=(4, 8))))
    batch = next(iter(DataLoader(ds, batch_size=3, padding=Padding(lengths=(4, 8), truncate=True))))
    assert np.asarray(batch["input_ids"])[1].tolist() == list(range(1, 9))
    assert np.asarray(batch["attention_mask"]).sum(axis=1).tolist() == [2, 8, 1]


def test_padding_bad_input():
    with pytest.raises(ValueError, match=r"lengths=\[\]"):
        Padding(lengths=[])
    with pytest.raises(ValueError, match="strictly increasing"):
        Padding(lengths=[64, 32])
    with pytest.raises(ValueError, match="multiple_of"):
        Padding(multiple_of=0)
    with pytest.raises(ValueError, match=r"column 'x'.*number"):
        Padding(pad_values={"x": "a"})
    # a pad value the column's dtype cannot hold
    with pytest.raises(ValueError, match=r"pad value -100 of column 'labels'.*uint8"):
        pad_batch({"labels": [np.array([1], np.uint8), np.array([1, 2], np.uint8)]}, Padding())
    with pytest.raises(ValueError, match=r"pad value 300 of column 'x'.*int8"):
        pad_batch(
            {"x": [np.array([1], np.int8), np.ones(2, np.int8)]}, Padding(pad_values={"x": 300})
        )
    ds = Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5]], "attention_mask": [[1, 1], [1, 1]]})
    with pytest.raises(
        ValueError, match=r"row 1: column 'attention_mask' has 2 values but 'input_ids' has 3"
    ):
        list(DataLoader(ds, batch_size=2, padding=Padding()))
    from tokenizers import Tokenizer, models

    no_pad = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="the tokenizer has no pad token"):
        Padding(tokenizer=no_pad)
    with pytest.raises(TypeError, match=r"jaxfeed\.Padding"):
        DataLoader(ds, batch_size=2, padding={"lengths": [4]})


def test_generic_items_are_padded_even_when_a_batch_shares_one_length():
    class Items:
        def __init__(self):
            self.rows = [np.arange(1, k + 1) for k in (3, 3, 1, 5)]

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"input_ids": self.rows[i], "y": i}

    shapes = [
        b["input_ids"].shape
        for b in DataLoader(Items(), batch_size=2, padding=Padding(lengths=(4, 8)))
    ]
    assert shapes == [(2, 4), (2, 8)]
    packed = DataLoader(Items(), batch_size=2, columns=["input_ids"], packing=Packing(length=6))
    rows = [r for b in packed for r in np.asarray(b["input_ids"]).tolist()]
    assert rows == [[1, 2, 3, 1, 2, 3], [1, 1, 2, 3, 4, 5]]


def test_map_batched_ragged_output_feeds_padding():
    ds = Dataset.from_dict({"text": ["a bb ccc", "dddd", "e f g h i j"]})

    def tok(batch):
        ids = [[len(w) for w in t.split()] for t in batch["text"]]
        return {"input_ids": ids, "labels": ids}

    out = ds.map(tok, batched=True, remove_columns=["text"])
    batch = next(iter(DataLoader(out, batch_size=3, padding=Padding(multiple_of=4))))
    assert np.asarray(batch["input_ids"]).tolist() == [
        [1, 2, 3, 0, 0, 0, 0, 0],
        [4] + [0] * 7,
        [1] * 6 + [0, 0],
    ]
    assert np.asarray(batch["labels"])[1].tolist() == [4] + [-100] * 7


# ---------------------------------------------------------------------------------- bucketing
def test_bucketing_every_row_once_shuffled_and_less_padding():
    ds, lengths = ragged_dataset(n=500, seed=1, low=1, high=200, extra=False)
    kw = dict(batch_size=10, shuffle=True, seed=5, padding=Padding(multiple_of=8), prefetch=0)
    bucketed = DataLoader(ds, bucket_by_length=True, **kw)

    def epoch(loader):
        firsts, pad = [], 0
        for b in loader:
            firsts += [r[0] for r in rows_of(b)]
            mask = np.asarray(b["attention_mask"])
            pad += int((~mask).sum())
        return firsts, pad

    e0, pad_bucketed = epoch(bucketed)
    e1, _ = epoch(bucketed)
    _, pad_plain = epoch(DataLoader(ds, **kw))
    ids = sorted((v - 1) // 1000 for v in e0)
    assert ids == list(range(500)) and sorted((v - 1) // 1000 for v in e1) == ids
    assert e0 != e1  # a new order every epoch
    batch_max = [max(lengths[(np.array(e0[i : i + 10]) - 1) // 1000]) for i in range(0, 500, 10)]
    assert batch_max != sorted(batch_max) and batch_max != sorted(batch_max, reverse=True)
    assert pad_bucketed < pad_plain / 5
    again = DataLoader(ds, bucket_by_length=True, **kw)
    assert epoch(again)[0] == e0  # determined by seed and epoch


# ---------------------------------------------------------------------------------- packing
def test_packing_keeps_every_token_once_with_segments_and_positions():
    ds, lengths = ragged_dataset(n=80, seed=2, low=1, high=30)
    loader = DataLoader(
        ds, batch_size=4, shuffle=True, seed=1, packing=Packing(length=32), prefetch=0
    )
    tokens, shapes, count = [], set(), len(loader)
    for batch in loader:
        ids, seg, pos = (np.asarray(batch[k]) for k in ("input_ids", "segment_ids", "positions"))
        labels = np.asarray(batch["labels"])
        shapes.add(ids.shape)
        assert seg.dtype == np.int32 and pos.dtype == np.int32
        for r in range(len(ids)):
            assert ((seg[r] == 0) == (ids[r] == 0)).all() and (labels[r][seg[r] == 0] == -100).all()
            k = int(seg[r].max())
            assert (seg[r][seg[r] > 0] == np.sort(seg[r][seg[r] > 0])).all()
            for s in range(1, k + 1):
                piece = ids[r][seg[r] == s]
                assert pos[r][seg[r] == s].tolist() == list(range(len(piece)))
                assert piece.tolist() == list(range(piece[0], piece[0] + len(piece)))
                assert labels[r][seg[r] == s].tolist() == [v % 7 for v in piece.tolist()]
                tokens.append(piece.tolist())
    assert shapes == {(4, 32)}
    assert sorted(tokens) == sorted(
        list(range(1000 * i + 1, 1000 * i + 1 + int(k))) for i, k in enumerate(lengths)
    )
    real = sum(len(t) for t in tokens)
    assert real / (count * 4 * 32) > 0.8  # first-fit leaves little padding


def test_packing_long_rows_error_or_split():
    ds = Dataset.from_dict({"input_ids": [list(range(1, 12)), [20, 21]]})
    with pytest.raises(ValueError, match=r"row 0 has 11 values, more than Packing\(length=4\)"):
        list(DataLoader(ds, batch_size=2, packing=Packing(length=4)))
    loader = DataLoader(ds, batch_size=2, packing=Packing(length=4, long_rows="split"))
    batches = list(loader)
    assert [np.asarray(b["input_ids"]).tolist() for b in batches] == [
        [[1, 2, 3, 4], [5, 6, 7, 8]],
        [[9, 10, 11, 0], [20, 21, 0, 0]],
    ]
    assert np.asarray(batches[1]["segment_ids"]).tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]
    assert np.asarray(batches[1]["positions"]).tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]
    # a last batch short of packed rows is completed with empty ones: one shape
    one = Dataset.from_dict({"input_ids": [[1, 2], [3]]})
    (last,) = DataLoader(one, batch_size=3, packing=Packing(length=4))
    assert np.asarray(last["segment_ids"]).tolist() == [[1, 1, 2, 0], [0] * 4, [0] * 4]
    with pytest.raises(ValueError, match="cannot be packed"):
        list(
            DataLoader(
                Dataset.from_dict({"input_ids": [[1], [2]], "y": [0, 1]}),
                batch_size=2,
                packing=Packing(length=4),
            )
        )
    with pytest.raises(ValueError, match="long_rows"):
        Packing(length=4, long_rows="cut")
    with pytest.raises(ValueError, match="not go with"):
        DataLoader(ds, batch_size=2, packing=Packing(length=4), padding=Padding())


# ---------------------------------------------------------------------------------- resume, workers
@pytest.mark.parametrize("kind", ["padding", "bucketing", "packing"])
def test_resume_mid_epoch_identical(kind):
    ds, _ = ragged_dataset(n=70, seed=3, low=1, high=24)
    options = {
        "padding": dict(padding=Padding(lengths=(8, 16, 32))),
        "bucketing": dict(bucket_by_length=True, padding=Padding(multiple_of=4)),
        "packing": dict(packing=Packing(length=32)),
    }[kind]

    def make():
        return DataLoader(ds, batch_size=6, shuffle=True, seed=7, **options)

    def arrays(batch):
        return {k: np.asarray(v).tolist() for k, v in batch.items()}

    full = make()
    list(full)  # epoch 0
    reference = [arrays(b) for b in full]  # epoch 1
    part = make()
    list(part)
    it = iter(part)
    head = [arrays(next(it)) for _ in range(3)]
    state = part.state_dict()
    part.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [arrays(b) for b in resumed] == reference
    if kind != "padding":  # the rows of each batch depend on bucketing / packing
        with pytest.raises(ValueError, match="does not match"):
            DataLoader(ds, batch_size=6, shuffle=True, seed=7).load_state_dict(state)


def test_two_workers_give_the_same_batches_and_resume():
    ds, _ = ragged_dataset(n=50, seed=4, low=1, high=24)

    def arrays(batch):
        return {k: np.asarray(v).tolist() for k, v in batch.items()}

    for options in (
        dict(packing=Packing(length=24)),
        dict(bucket_by_length=True, padding=Padding(lengths=(8, 16, 24))),
    ):
        inline = [arrays(b) for b in DataLoader(ds, batch_size=4, shuffle=True, seed=2, **options)]
        with DataLoader(ds, batch_size=4, shuffle=True, seed=2, num_workers=2, **options) as loader:
            it = iter(loader)
            head = [arrays(next(it)) for _ in range(2)]
            state = loader.state_dict()
            assert head == inline[:2]
            loader.load_state_dict(state)
            assert head + [arrays(b) for b in loader] == inline


# ---------------------------------------------------------------------------------- shapes
def test_compile_counts_over_an_epoch():
    ds, _ = ragged_dataset(n=200, seed=5, low=1, high=60, extra=False)
    traces = []

    @jax.jit
    def step(ids, mask):
        traces.append(ids.shape)
        return (ids * mask).sum()

    lengths = (16, 32, 64)
    for loader, most in (
        (DataLoader(ds, batch_size=16, shuffle=True, padding=Padding(lengths=lengths)), 3 + 1),
        (DataLoader(ds, batch_size=16, shuffle=True, bucket_by_length=True,
                    padding=Padding(lengths=lengths), drop_last=True), 3),
    ):  # fmt: skip
        traces.clear()
        for b in loader:
            step(b["input_ids"], b["attention_mask"])
        assert 1 <= len(traces) <= most and len(set(traces)) == len(traces)
        assert all(s[0] < 16 or s[1] in lengths for s in traces)  # a short last batch aside
    traces.clear()

    @jax.jit
    def packed_step(ids, seg):
        traces.append(ids.shape)
        return (ids * (seg > 0)).sum()

    for b in DataLoader(ds, batch_size=8, shuffle=True, packing=Packing(length=64)):
        packed_step(b["input_ids"], b["segment_ids"])
    assert traces == [(8, 64)]


# ---------------------------------------------------------------------------------- processes
MULTI = textwrap.dedent(
    """
    import json, os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    process_id, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    from jaxfeed import DataLoader, Packing, Padding
    sys.path.insert(0, sys.argv[4])
    from test_varlen import ragged_dataset, LOADERS

    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), PartitionSpec("data"))
    ds, _ = ragged_dataset(n=90, seed=6, low=1, high=40, extra=False)
    result = {}
    for name, options in LOADERS.items():
        loader = DataLoader(ds, batch_size=16, shuffle=True, seed=3, sharding=sharding, **options)
        batches = []
        for batch in loader:
            assert not batch["input_ids"].is_fully_addressable
            batches.append({k: sorted((s.index[0].start, np.asarray(s.data).tolist())
                                      for s in v.addressable_shards) for k, v in batch.items()})
        result[name] = batches
    json.dump(result, open(out, "w"))
    """
)
LOADERS = {
    "padding": dict(padding=Padding(multiple_of=8), drop_last=True),
    "bucketing": dict(bucket_by_length=True, padding=Padding(lengths=(16, 32, 40)), drop_last=True),
    "packing": dict(packing=Packing(length=40)),
}


@pytest.mark.slow
def test_two_processes_split_the_global_order(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    script = tmp_path / "worker.py"
    script.write_text(MULTI)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    here = os.path.dirname(__file__)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), port, str(tmp_path / f"out{i}.json"), here],
            env=env,
        )
        for i in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=240) == 0
    parts = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    ds, _ = ragged_dataset(n=90, seed=6, low=1, high=40, extra=False)
    for name, options in LOADERS.items():
        expected = list(DataLoader(ds, batch_size=16, shuffle=True, seed=3, **options))
        assert len(parts[0][name]) == len(parts[1][name]) == len(expected)
        for k, want in enumerate(expected):
            for column, value in want.items():
                shards = [item for part in parts for item in part[name][k][column]]
                starts = [start for start, _ in shards]
                assert sorted(starts) == list(range(0, 16, 2))  # 8 devices, no overlap
                got = [row for _, block in sorted(shards) for row in block]
                assert got == np.asarray(value).tolist(), (name, k, column)


# ---------------------------------------------------------------------------------- streams
@pytest.mark.parametrize("kind", ["padding", "bucketing", "packing"])
def test_stream_options_and_exact_resume(kind):
    from jaxfeed import IterableDataset

    ds, lengths = ragged_dataset(n=300, seed=8, low=1, high=24)
    options = {
        "padding": dict(padding=Padding(lengths=(8, 16, 24))),
        "bucketing": dict(bucket_by_length=True),  # to the longest row
        "packing": dict(packing=Packing(length=24)),
    }[kind]

    def make():
        stream = IterableDataset.from_dataset(ds, rows_per_unit=37)
        return DataLoader(stream, batch_size=4, shuffle=True, seed=1, shuffle_buffer=64, **options)

    def arrays(batch):
        return {k: np.asarray(v).tolist() for k, v in batch.items()}

    reference = [arrays(b) for b in make()]
    tokens = []
    for b in reference:
        if kind == "packing":
            seg, ids = np.array(b["segment_ids"]), np.array(b["input_ids"])
            assert ids.shape == (4, 24)
            tokens += [
                ids[r][seg[r] == s].tolist() for r in range(4) for s in range(1, seg[r].max() + 1)
            ]
        else:
            tokens += rows_of(b)
    assert sorted(tokens) == sorted(
        list(range(1000 * i + 1, 1000 * i + 1 + int(k))) for i, k in enumerate(lengths)
    )
    if kind == "bucketing":  # batches of one length group: little padding
        pad = sum(int((~np.array(b["attention_mask"])).sum()) for b in reference)
        assert pad < 0.05 * sum(len(t) for t in tokens)
    for stop in (3, 30 if kind == "packing" else 60):
        part = make()
        it = iter(part)
        head = [arrays(next(it)) for _ in range(stop)]
        state = part.state_dict()
        part.close()
        resumed = make()
        resumed.load_state_dict(state)
        assert head + [arrays(b) for b in resumed] == reference, stop


def test_hf_dataset_ragged_columns_and_padding_columns():
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4]], "pixel": [[0.5], [0.25, 0.75]]})
    batch = next(iter(DataLoader(hf, batch_size=2, padding=Padding(multiple_of=2))))
    assert np.asarray(batch["input_ids"]).tolist() == [[1, 2, 3, 0], [4, 0, 0, 0]]
    assert np.asarray(batch["pixel"]).tolist() == [[0.5, 0.0], [0.25, 0.75]]  # its own length
    assert np.asarray(batch["attention_mask"]).sum(axis=1).tolist() == [3, 1]  # input_ids' mask
    only = next(iter(DataLoader(hf, batch_size=2, padding=Padding(columns=["pixel"]))))
    assert isinstance(only["input_ids"], list) and only["pixel"].shape == (2, 2)
    with pytest.raises(ValueError, match=r"names \['nope'\]"):
        DataLoader(hf, batch_size=2, padding=Padding(columns=["nope"]))
