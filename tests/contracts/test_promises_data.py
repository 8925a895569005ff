"""Core promises of the data side (order, loader state, transforms, dtypes, files, disk, sharding).

Each test names the promise it guards and is written so that the plausible one-line bug listed
in ``tools/mutation/mutations.py`` makes it fail. They go through public APIs
only, so refactors of the internals keep them valid.
"""

import io
import json
import os
import sys

import jax
import numpy as np
import PIL.Image
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jaxfeed import (
    Array2D,
    DataLoader,
    Dataset,
    Features,
    History,
    Image,
    Value,
    load_from_disk,
)
from jaxfeed._base.files import atomic_write
from jaxfeed.data.features import FeatureError


def ids_of(loader):
    return [np.asarray(b["id"]).tolist() for b in loader]


# ------------------------------------------------------------------------------ order
def test_promise_shuffled_epoch_reads_every_row_exactly_once_past_one_order_block():
    """Promise: a shuffled epoch is a permutation of the rows, at any size. The order is computed in
    blocks of 65,536 positions; 70,000 rows with 1,000-row batches read several batches from the
    second block, so a block cache that is not refreshed repeats rows of the first."""
    n = 70_000
    ds = Dataset.from_dict({"id": np.arange(n, dtype=np.int32)})
    loader = DataLoader(ds, batch_size=1000, shuffle=True, seed=3, prefetch=0)
    epochs = []
    for _ in range(2):
        rows = np.concatenate([np.asarray(b["id"]) for b in loader])
        assert len(rows) == n
        np.testing.assert_array_equal(np.sort(rows), np.arange(n))  # every row exactly once
        epochs.append(rows)
    assert not np.array_equal(epochs[0], epochs[1])  # a new order every epoch
    assert not np.array_equal(epochs[0], np.arange(n))


# ------------------------------------------------------------------------------ loader state
def small_ds(n=40, offset=0):
    return Dataset.from_dict(
        {"id": np.arange(n, dtype=np.int32), "x": np.arange(n, dtype=np.float32) + offset}
    )


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"seed": 8}, "seed"),
        ({"shuffle": False}, "shuffle"),
        ({"drop_last": True}, "drop_last"),
        ({"batch_size": 6}, "batch_size"),
        ({"data": small_ds(offset=1)}, "dataset"),  # same features and row count, other values
        ({"data": small_ds(41)}, "num_rows"),
    ],
)
def test_promise_loader_state_is_refused_by_a_loader_that_would_read_other_batches(change, key):
    """Promise: ``load_state_dict`` continues exactly where the saved loader stopped, so a state
    from a loader with another seed, shuffle, drop_last, batch size or dataset is refused with an
    error naming what differs (instead of silently yielding other rows)."""
    base = {"data": small_ds(), "batch_size": 7, "shuffle": True, "seed": 1, "drop_last": False}
    saved = DataLoader(**_loader_kwargs(base))
    it = iter(saved)
    next(it)
    state = json.loads(json.dumps(saved.state_dict()))
    saved.close()
    other = DataLoader(**_loader_kwargs({**base, **change}))
    with pytest.raises(ValueError, match=rf"\b{key}\b"):
        other.load_state_dict(state)
    same = DataLoader(**_loader_kwargs(base))
    same.load_state_dict(state)  # the identical loader accepts it
    assert same.state_dict() == state


def _loader_kwargs(spec):
    spec = dict(spec)
    return {"dataset": spec.pop("data"), **spec}


def test_promise_loader_state_survives_a_reload_of_the_same_data(tmp_path):
    """Promise: the dataset check recognises the same data read again (a resumed job loads it from
    disk in a new process), so exact resume keeps working."""
    ds = small_ds()
    ds.save_to_disk(tmp_path / "ds")
    a = DataLoader(ds, 7, shuffle=True, seed=2, prefetch=0)
    it = iter(a)
    next(it)
    state = a.state_dict()
    b = DataLoader(load_from_disk(tmp_path / "ds"), 7, shuffle=True, seed=2, prefetch=0)
    b.load_state_dict(state)
    rest_a, rest_b = list(it), list(b)
    assert len(rest_b) == len(rest_a) > 0
    for x, y in zip(rest_a, rest_b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)
    a.close()
    b.close()


# ------------------------------------------------------------------------------ transform seeding
def test_promise_transform_rng_is_seeded_by_seed_epoch_and_step():
    """Promise (documented): ``transform(batch, rng)`` gets ``numpy.random.default_rng((seed, epoch,
    step))``: reproducible, and different for every epoch and step (epoch 1 does not replay the
    augmentation of epoch 0)."""
    draws = []

    def augment(batch, rng):
        draws.append(int(rng.integers(0, 2**62)))
        return batch

    loader = DataLoader(small_ds(20), 5, shuffle=True, seed=11, transform=augment, prefetch=0)
    for _ in range(2):
        list(loader)
    expected = [
        int(np.random.default_rng([11, epoch, step]).integers(0, 2**62))
        for epoch in range(2)
        for step in range(4)
    ]
    assert draws == expected
    assert len(set(draws)) == len(draws)  # epochs and steps all differ


def test_promise_row_transform_rng_is_seeded_by_seed_epoch_and_position():
    """Promise (documented): ``row_transform(row, rng)`` gets ``default_rng((seed, epoch, position
    of the row in the epoch))``: results depend on neither the batch size nor the workers, and
    every epoch draws afresh."""

    def jitter(row, rng):
        return {**row, "draw": np.int32(rng.integers(0, 2**31 - 1))}

    for batch_size in (4, 7):
        loader = DataLoader(small_ds(12), batch_size, shuffle=True, seed=5, row_transform=jitter)
        for epoch in range(2):
            draws = np.concatenate([np.asarray(b["draw"]) for b in loader]).tolist()
            expected = [
                int(np.random.default_rng([5, epoch, position]).integers(0, 2**31 - 1))
                for position in range(12)
            ]
            assert draws == expected, (batch_size, epoch)


# ------------------------------------------------------------------------------ dtypes
def test_promise_int64_values_past_int32_raise_through_the_loader():
    """Promise: the jax format never wraps integers around; an int64 column read through the
    DataLoader gets the same overflow check as ``with_format("jax")``, naming column and row."""
    values = np.arange(30, dtype=np.int64)
    values[17] = 2**31 + 5
    ds = Dataset.from_dict({"big": values, "id": np.arange(30, dtype=np.int32)})
    for prefetch in (0, 2):
        loader = DataLoader(ds, 8, shuffle=True, seed=4, prefetch=prefetch)
        with pytest.raises(OverflowError, match=r"column 'big', row 17: value 2147483653"):
            list(loader)
    ok = DataLoader(Dataset.from_dict({"big": np.arange(10, dtype=np.int64) - 5}), 10)
    batch = next(iter(ok))
    assert batch["big"].dtype == np.int32 and np.asarray(batch["big"]).tolist() == list(
        range(-5, 5)
    )


def test_promise_int64_from_a_transform_is_checked_too():
    """Promise: integers a transform returns follow the same rule (no silent wrap-around)."""

    def widen(batch):
        return {**batch, "id": np.asarray(batch["id"], np.int64) + 2**31}

    with pytest.raises(OverflowError, match="column 'id'"):
        list(DataLoader(small_ds(10), 5, transform=widen))


@pytest.mark.parametrize(
    "values",
    [
        np.zeros((4, 2, 3), np.float32),  # one numpy block, every row of the wrong shape
        [np.zeros((2, 3))] * 4,  # equal-shape rows: numpy stacks them into one block
        [[[0, 0, 0], [0, 0, 0]]] * 3,
    ],
)
def test_promise_array_feature_refuses_wrong_shapes_naming_column_and_row(values):
    """Promise: bad input gets a clear exception naming the column and the row, even when every
    row is equally wrong (row 0 is bad; no good row to compare with)."""
    features = Features({"x": Array2D((2, 2), "float32")})
    with pytest.raises(FeatureError, match=r"column 'x', row 0.*shape \(2, 2\)"):
        Dataset.from_dict({"x": values}, features=features)


# ------------------------------------------------------------------------------ files
@pytest.mark.parametrize("failure", ["fsync", "interrupt"])
def test_promise_an_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch, failure):
    """Promise: writes are atomic; a write that fails or is interrupted (disk full, Ctrl-C) leaves
    the previous content, whole, and no temporary file behind."""
    target = tmp_path / "config.json"
    atomic_write(target, '{"old": true}')

    def broken(fd):
        raise KeyboardInterrupt if failure == "interrupt" else OSError(28, "No space left")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(KeyboardInterrupt if failure == "interrupt" else OSError):
        atomic_write(target, '{"new": true, "padding": "' + "x" * 100_000 + '"}')
    assert json.loads(target.read_text()) == {"old": True}
    assert os.listdir(tmp_path) == ["config.json"]


def test_promise_history_files_survive_a_failed_save(tmp_path, monkeypatch):
    """Promise: ``metrics.jsonl`` and ``history.csv`` (what a user watches) are never left empty or
    half-written by a crash during a save."""
    history = History([{"epoch": 1, "train_loss": 0.5}])
    history.save(tmp_path)
    before = {name: (tmp_path / name).read_text() for name in ("metrics.jsonl", "history.csv")}
    history.append({"epoch": 2, "train_loss": 0.25})

    def broken(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError):
        history.save(tmp_path)
    for name, text in before.items():
        assert (tmp_path / name).read_text() == text


# ------------------------------------------------------------------------------ disk
def _file_mappings(path):
    """(start, end) address ranges where ``path`` is memory-mapped into this process."""
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() == real:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append((start, end))
    return out


def _buffers(table):
    for column in table.columns:
        for chunk in column.chunks:
            for buf in chunk.buffers():
                if buf is not None and buf.size:
                    yield buf


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_promise_saved_datasets_are_memory_mapped_not_read_into_memory(tmp_path):
    """Promise: ``load_from_disk`` memory-maps the Arrow files (datasets larger than memory work):
    every column buffer lies inside a file-backed mapping of the data file, none on the heap.
    ``keep_in_memory=True`` is the opposite."""
    n = 20_000
    Dataset.from_dict(
        {"x": np.random.default_rng(0).random((n, 4, 4), dtype=np.float32), "id": np.arange(n)},
        features=Features({"x": Array2D((4, 4), "float32"), "id": Value("int64")}),
    ).save_to_disk(tmp_path / "ds")
    data_file = next((tmp_path / "ds").glob("*.arrow"))
    ds = load_from_disk(tmp_path / "ds")
    ranges = _file_mappings(data_file)
    assert ranges, "the data file is not memory-mapped"
    buffers = list(_buffers(ds.data))
    assert buffers
    for buf in buffers:
        assert any(lo <= buf.address and buf.address + buf.size <= hi for lo, hi in ranges)
    assert ds.with_format("numpy")[n - 1]["id"] == n - 1
    in_memory = load_from_disk(tmp_path / "ds", keep_in_memory=True)
    for buf in _buffers(in_memory.data):
        assert not any(lo <= buf.address < hi for lo, hi in _file_mappings(data_file))


def test_promise_reads_folders_written_by_datasets(tmp_path):
    """Promise: jaxfeed reads what `datasets` ``save_to_disk`` wrote (several shards, its features,
    its stored format), values and features equal."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "image": datasets.Array2D((3, 2), "uint8"),
            "label": datasets.ClassLabel(names=["cat", "dog"]),
            "tokens": datasets.Sequence(datasets.Value("int32")),
            "text": datasets.Value("string"),
        }
    )
    n = 30
    data = {
        "image": np.arange(n * 6, dtype=np.uint8).reshape(n, 3, 2),
        "label": [i % 2 for i in range(n)],
        "tokens": [list(range(i % 4)) for i in range(n)],
        "text": [f"t{i}" for i in range(n)],
    }
    hf = datasets.Dataset.from_dict(data, features=features)
    hf.save_to_disk(str(tmp_path / "one"), num_shards=3)
    ds = load_from_disk(tmp_path / "one")
    assert ds.num_rows == n and ds.column_names == list(features)
    assert ds.features["image"] == Array2D((3, 2), "uint8")
    assert ds["text"] == data["text"] and ds["tokens"] == data["tokens"]
    np.testing.assert_array_equal(ds.with_format("numpy")["image"], data["image"])
    assert ds.features["label"].names == ["cat", "dog"]
    hf_dict = datasets.DatasetDict({"train": hf, "test": hf.select(range(5))})
    hf_dict.with_format("numpy").save_to_disk(str(tmp_path / "dict"))
    loaded = load_from_disk(tmp_path / "dict")
    assert loaded.num_rows == {"train": n, "test": 5}
    assert loaded["test"].format["type"] == "numpy"
    np.testing.assert_array_equal(loaded["test"]["label"], [0, 1, 0, 1, 0])


# ------------------------------------------------------------------------------ sharding
def test_promise_sharded_batches_hold_the_right_rows_on_each_device():
    """Promise: with ``sharding=`` each device holds its contiguous slice of the batch, and the
    global values are exactly the unsharded loader's (order, rows, columns)."""
    mesh = jax.make_mesh((8,), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    n = 48
    ds = Dataset.from_dict(
        {
            "id": np.arange(n, dtype=np.int32),
            "x": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
            "y": np.arange(n, dtype=np.int32) * 10,
        }
    )
    plain = list(DataLoader(ds, 16, shuffle=True, seed=5))
    sharded = list(DataLoader(ds, 16, shuffle=True, seed=5, sharding=sharding))
    assert len(plain) == len(sharded) == 3
    for a, b in zip(plain, sharded, strict=True):
        for key in ("id", "x", "y"):
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))
            shards = b[key].addressable_shards
            assert len({s.device for s in shards}) == 8
            for s in shards:
                assert s.data.shape[0] == 2  # 16 rows over 8 devices
                np.testing.assert_array_equal(np.asarray(s.data), np.asarray(a[key])[s.index])
        np.testing.assert_array_equal(np.asarray(b["y"]), np.asarray(b["id"]) * 10)


# ------------------------------------------------------------------------------ workers
def _png(value):
    buf = io.BytesIO()
    PIL.Image.fromarray(np.full((4, 4), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_promise_process_workers_are_spawned_not_forked(monkeypatch):
    """Promise: decode workers are spawned (a fork of a process running JAX can deadlock): a
    worker starts from a fresh interpreter, so a change made in this process after start-up (here
    a patched decode) is not seen by process workers, while thread workers do see it."""
    ds = Dataset.from_dict(
        {"image": [{"bytes": _png(v), "path": None} for v in (10, 20, 30, 40)]},
        features=Features({"image": Image()}),
    )
    marker = np.full((4, 4), 255, np.uint8)

    def patched(self, value, row=0):
        return marker

    monkeypatch.setattr(Image, "decode_value", patched)
    threads = next(iter(DataLoader(ds, 4, num_workers=2, worker_mode="thread")))
    assert (np.asarray(threads["image"]) == 255).all()  # the patch works where it is visible
    with DataLoader(ds, 4, num_workers=1, worker_mode="process") as loader:
        list(loader)  # the first batches are built here while the worker starts (seeing the patch)
        batch = next(iter(loader))  # the worker, ready since the end of the first epoch
    assert np.asarray(batch["image"])[:, 0, 0].tolist() == [10, 20, 30, 40]


# ------------------------------------------------------------------------------ multi-process order
def test_promise_every_process_computes_the_same_global_order(monkeypatch):
    """Promise: in multi-process JAX every process derives the same global order from (seed,
    epoch) alone and loads its slice of it, so the processes' rows form the single-process batch.
    Here: the batches are the same whatever ``jax.process_index()`` says (the slicing itself is
    checked by the slow two-process test, tests/e2e/test_loader_multiprocess.py)."""
    ds = small_ds(50)
    reference = ids_of(DataLoader(ds, 8, shuffle=True, seed=6))
    monkeypatch.setattr(jax, "process_index", lambda *args, **kwargs: 1)
    loader = DataLoader(ds, 8, shuffle=True, seed=6)
    assert ids_of(loader) == reference
    second = ids_of(loader)
    assert second != reference and sorted(sum(second, [])) == list(range(50))
