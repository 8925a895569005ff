"""Streaming: IterableDataset steps, exact resume, node splits, and the DataLoader on streams."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import (
    DataLoader,
    Dataset,
    IterableDataset,
    load_dataset,
    split_dataset_by_node,
)
from jaxfeed.loading.stream_loader import StreamingDataLoader


@pytest.fixture
def files(tmp_path):
    """3 Parquet files of 40 rows, row groups of 10 rows: 12 units; x = 0..119."""
    paths = []
    for i in range(3):
        x = np.arange(i * 40, (i + 1) * 40)
        path = tmp_path / f"train-{i}.parquet"
        pq.write_table(pa.table({"x": x, "y": x * 2.0, "s": [f"r{v}" for v in x]}), path, 10)
        paths.append(str(path))
    return paths


def rows(ids):
    return [r["x"] for r in ids]


def test_steps_match_their_definitions(files):
    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    assert isinstance(ids, IterableDataset) and ids.num_shards == 12
    assert rows(ids) == list(range(120))
    assert rows(ids.skip(5).take(3)) == [5, 6, 7]
    assert rows(ids.take(3)) == [0, 1, 2]
    assert rows(ids.filter(lambda r: r["x"] % 7 == 0)) == list(range(0, 120, 7))
    assert rows(ids.filter(lambda b: [v % 7 == 0 for v in b["x"]], batched=True, batch_size=9)) == (
        list(range(0, 120, 7))
    )
    mapped = ids.with_format("numpy").map(
        lambda b, idx: {"z": b["x"] * 10, "i": np.asarray(idx)},
        batched=True,
        batch_size=7,
        with_indices=True,
        remove_columns=["s"],
    )
    out = list(mapped.iter(batch_size=50))
    z = np.concatenate([b["z"] for b in out])
    assert z.tolist() == [v * 10 for v in range(120)]
    assert np.concatenate([b["i"] for b in out]).tolist() == list(range(120))
    assert sorted(out[0]) == ["i", "x", "y", "z"]
    # batch sizes seen by a batched map are exact, across file and row-group boundaries
    sizes = []
    list(ids.map(lambda b: sizes.append(len(b["x"])) or {}, batched=True, batch_size=7))
    assert sizes == [7] * 17 + [1]
    renamed = ids.select_columns(["x", "s"]).rename_column("s", "name").remove_columns("x")
    assert renamed.column_names == ["name"] and next(iter(renamed)) == {"name": "r0"}
    batched = list(ids.select_columns("x").batch(50))
    assert [len(b["x"]) for b in batched] == [50, 50, 20] and batched[2]["x"][0] == 100
    assert len(list(ids.batch(50, drop_last_batch=True))) == 2
    first = ids.with_format("jax").iter(batch_size=32)
    assert next(first)["y"].dtype == np.float32


def test_shuffle_is_seeded_complete_and_depends_on_epoch(files):
    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    a = rows(ids.shuffle(seed=1, buffer_size=16))
    assert sorted(a) == list(range(120)) and a != list(range(120))
    assert rows(ids.shuffle(seed=1, buffer_size=16)) == a
    assert rows(ids.shuffle(seed=2, buffer_size=16)) != a
    sh = ids.shuffle(seed=1, buffer_size=16)
    sh.set_epoch(1)
    assert rows(sh) != a and sorted(rows(sh)) == list(range(120))


def test_shard_and_split_by_node_read_disjoint_units(files):
    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    parts = [rows(split_dataset_by_node(ids, rank, 3)) for rank in range(3)]
    assert sorted(sum(parts, [])) == list(range(120))
    assert all(len(p) == 40 for p in parts)
    assert [u.path for u in split_dataset_by_node(ids, 0, 4)._source.units] == [
        files[0],
        files[1],
        files[2],
    ]
    contiguous = [rows(ids.shard(4, i)) for i in range(4)]
    assert sum(contiguous, []) == list(range(120))
    # fewer units than nodes: every node reads all and keeps every world_size-th row
    small = load_dataset("parquet", data_files=files[0], split="train", streaming=True)
    one = small.shard(4, 0)  # one row group: 10 rows
    parts = [rows(split_dataset_by_node(one, r, 3)) for r in range(3)]
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert split_dataset_by_node(Dataset.from_dict({"x": [1, 2, 3]}), 0, 2)["x"] == [1, 2]
    with pytest.raises(ValueError, match="rank must be an int in"):
        split_dataset_by_node(ids, 3, 3)


def pipeline(files):
    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    return (
        ids.shuffle(seed=3, buffer_size=25)
        .filter(lambda r: r["x"] % 5 != 0)
        .map(lambda b: {"w": [v + 1 for v in b["x"]]}, batched=True, batch_size=6)
        .skip(3)
        .take(80)
    )


@pytest.mark.parametrize("stop", [0, 1, 13, 57, 79])
def test_dataset_resumes_at_any_row(files, stop):
    full = rows(pipeline(files))
    assert len(full) == 80
    ids = pipeline(files)
    it = iter(ids)
    head = [next(it)["x"] for _ in range(stop)]
    state = json.loads(json.dumps(ids.state_dict()))  # JSON round trip
    again = pipeline(files)
    again.load_state_dict(state)
    assert head + rows(again) == full


@pytest.mark.parametrize("stop", [1, 4, 9])
def test_loader_resumes_exactly_with_the_shuffle_buffer(files, stop):
    def loader():
        ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
        return DataLoader(ids.map(lambda r: {"x2": r["x"] * 2}), 8, shuffle=True, seed=5)

    full = [b["x"].tolist() for b in loader()]
    assert sorted(sum(full, [])) == list(range(120)) and len(full) == 15
    first = loader()
    assert isinstance(first, StreamingDataLoader)
    it = iter(first)
    head = [next(it)["x"].tolist() for _ in range(stop)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["batches_consumed"] == stop and state["stream"]["pending"] is not None
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [b["x"].tolist() for b in resumed] == full
    # the next iteration is the next epoch: another order of the same rows
    epoch1 = [b["x"].tolist() for b in resumed]
    assert epoch1 != full and sorted(sum(epoch1, [])) == list(range(120))
    with pytest.raises(ValueError, match="batch_size is 8 in the state but 16 here"):
        DataLoader(load_dataset("parquet", data_files=files, streaming=True)["train"], 16, seed=5, shuffle=True).load_state_dict(state)  # fmt: skip


def test_loader_on_stream_places_batches_and_transforms(files):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    mesh = jax.make_mesh((8,), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    loader = DataLoader(
        ids,
        16,
        columns=["x", "y"],
        drop_last=True,
        sharding=sharding,
        transform=lambda b, rng: {**b, "noise": rng.normal(size=len(b["x"])).astype(np.float32)},
    )
    batches = list(loader)
    assert len(batches) == 7 and batches[0]["x"].sharding == sharding
    assert batches[0]["x"].dtype == np.int32 and batches[0]["y"].dtype == np.float32
    assert sorted(batches[0]) == ["noise", "x", "y"]
    assert not hasattr(loader, "__len__")
    again = [b["noise"].tolist() for b in loader]  # epoch 1: other augmentation draws
    assert again != [b["noise"].tolist() for b in batches]
    no_prefetch = DataLoader(ids, 50, prefetch=0)
    assert [len(b["x"]) for b in no_prefetch] == [50, 50, 20]


def test_stream_errors_name_the_problem(files, tmp_path):
    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in the dataset"):
        ids.select_columns(["nope"])
    with pytest.raises(ValueError, match="buffer_size must be a positive int"):
        ids.shuffle(buffer_size=0)
    with pytest.raises(ValueError, match="num_workers is not supported for streams"):
        DataLoader(ids, 4, num_workers=2)
    with pytest.raises(ValueError, match="not a streaming DataLoader state"):
        DataLoader(ids, 4).load_state_dict({"version": 1})
    (tmp_path / "bad.parquet").write_bytes(b"nope")
    with pytest.raises(ValueError, match=r"bad.parquet"):
        list(IterableDataset.from_files([str(tmp_path / "bad.parquet")], split_row_groups=False))


def test_parquet_units_decode_ahead_in_threads_within_the_byte_bound(files, monkeypatch):
    import threading

    from jaxfeed.data.iterable import sources  # where Source and READ_AHEAD_BYTES live

    readers: list[str] = []
    read = sources.Source.read

    def spy(self, unit, skip, *args):
        readers.append(threading.current_thread().name)
        return read(self, unit, skip, *args)

    monkeypatch.setattr(sources.Source, "read", spy)
    ids = load_dataset("parquet", data_files=files, split="train", streaming=True)
    assert rows(ids) == list(range(120))  # 12 row-group units, in order
    assert len(readers) == 12 and sum(n.startswith("jaxfeed-read") for n in readers) == 11
    readers.clear()
    before = set(threading.enumerate())  # other tests' loaders may still read ahead until gc

    def mine():
        return [
            t
            for t in threading.enumerate()
            if t.name.startswith("jaxfeed-read") and t not in before
        ]

    it = iter(ids)
    assert [next(it)["x"] for _ in range(15)] == list(range(15))
    del it  # abandoned mid-stream: the read-ahead threads end
    for _ in range(100):
        if not mine():
            break
        threading.Event().wait(0.01)
    assert not mine()
    readers.clear()
    monkeypatch.setattr(sources, "READ_AHEAD_BYTES", 1)  # every unit is "too large"
    assert rows(ids) == list(range(120))
    assert readers == [threading.current_thread().name] * 12


def test_a_broken_unit_read_ahead_fails_in_its_turn(files, tmp_path):
    bad = tmp_path / "zz-bad.parquet"
    pq.write_table(pa.table({"x": np.arange(5), "y": np.zeros(5), "s": ["a"] * 5}), bad)
    data = bytearray(bad.read_bytes())
    data[8:40] = b"\xff" * 32  # corrupt the first column chunk, keep the footer
    bad.write_bytes(bytes(data))
    ids = load_dataset("parquet", data_files=[*files, str(bad)], split="train", streaming=True)
    seen = []
    with pytest.raises((OSError, ValueError), match=r"zz-bad\.parquet"):
        for row in ids:
            seen.append(row["x"])
    assert seen == list(range(120))  # every row before the broken file, in order
