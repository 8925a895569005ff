"""Streamed epochs: the read-ahead goes on into the next epoch (within the same bound) while the
previous epoch's last batches are consumed; batches and exact resume are those of a fresh read."""

import json
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import DataLoader, load_dataset


@pytest.fixture
def stream(tmp_path):
    """3 Parquet files of 40 rows in row groups of 10, shuffled in a buffer of 16."""
    paths = []
    for i in range(3):
        x = np.arange(i * 40, (i + 1) * 40)
        path = tmp_path / f"train-{i}.parquet"
        pq.write_table(pa.table({"x": x, "y": x * 2.0}), path, 10)
        paths.append(str(path))
    ids = load_dataset("parquet", data_files=paths, split="train", streaming=True)
    return ids.shuffle(seed=3, buffer_size=16)


def xs(batches):
    return [np.asarray(b["x"]).tolist() for b in batches]


def fresh_epoch(ids, epoch, **kw):
    loader = DataLoader(ids, 8, **kw)
    loader.set_epoch(epoch)
    with loader:
        return xs(loader)


def readers(before: frozenset = frozenset()):
    """Read-ahead threads alive, leaving out ``before`` (those other tests of this process left
    to the garbage collector)."""
    return [t for t in threading.enumerate() if t.name == "jaxfeed-stream" and t not in before]


def test_the_next_epoch_is_read_ahead_and_gives_the_batches_of_a_fresh_read(stream):
    others = frozenset(readers())
    loader = DataLoader(stream, 8)
    first = xs(loader)
    info = loader.debug_info()
    assert info["read_ahead_threads"] == 1 and len(readers(others)) == 1
    end = time.monotonic() + 20
    while loader.debug_info()["read_ahead"] < info["read_ahead_bound"] and time.monotonic() < end:
        time.sleep(0.01)
    # epoch 1 read ahead, no further than the bound
    assert loader.debug_info()["read_ahead"] == info["read_ahead_bound"] == 2
    second = xs(loader)
    assert loader.debug_info()["read_ahead_threads"] == 1  # the same thread went on
    third = xs(loader)
    assert first == fresh_epoch(stream, 0) and second == fresh_epoch(stream, 1)
    assert third == fresh_epoch(stream, 2) and first != second != third
    assert sorted(sum(second, [])) == list(range(120))

    loader.set_epoch(3)  # where the read-ahead already is: kept
    assert xs(loader) == fresh_epoch(stream, 3) and loader.debug_info()["read_ahead_threads"] == 1
    loader.set_epoch(7)  # elsewhere: a new one, and the old one stopped
    assert xs(loader) == fresh_epoch(stream, 7) and loader.debug_info()["read_ahead_threads"] == 2
    assert len(readers(others)) == 1
    del loader  # a loader nobody holds stops its read-ahead at once
    end = time.monotonic() + 20
    while readers(others) and time.monotonic() < end:
        time.sleep(0.01)
    assert readers(others) == []


@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_after_a_read_ahead_epoch_is_exact(stream, prefetch):
    loader = DataLoader(stream, 8, prefetch=prefetch)
    xs(loader)  # epoch 0
    it = iter(loader)
    head = [np.asarray(next(it)["x"]).tolist() for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["epoch"] == 1 and state["batches_consumed"] == 3
    rest = xs(it)
    assert head + rest == fresh_epoch(stream, 1, prefetch=prefetch)
    resumed = DataLoader(stream, 8, prefetch=prefetch)
    resumed.load_state_dict(state)
    assert xs(resumed) == rest
    assert xs(resumed) == fresh_epoch(stream, 2)  # and the next epoch after it
    # an epoch left early gives its read-ahead up: the next iteration resumes where it stopped
    it = iter(loader)
    assert np.asarray(next(it)["x"]).tolist() == fresh_epoch(stream, 2)[0]
    assert xs(loader) == fresh_epoch(stream, 2)[1:]
    loader.close()
    resumed.close()


def test_the_next_epochs_first_units_decode_in_the_pool_during_the_last_ones(stream, monkeypatch):
    from jaxfeed.data import iterable

    expected = [fresh_epoch(stream, e) for e in range(3)]
    read = iterable.Source.read
    calls = []

    def spy(self, unit, skip, *args):
        calls.append(threading.current_thread().name)
        return read(self, unit, skip, *args)

    monkeypatch.setattr(iterable.Source, "read", spy)
    with DataLoader(stream, 8) as loader:
        epochs = [xs(loader) for _ in range(3)]
    assert epochs == expected
    # 12 row-group units an epoch: only the stream's very first unit is read in small tables by
    # the read-ahead thread itself; every later unit (the next epochs' first ones included) was
    # decoded by the pool, handed from one epoch's pass to the next
    assert len(calls) >= 36 and calls.count("jaxfeed-stream") == 1
    assert sum(name.startswith("jaxfeed-read") for name in calls) == len(calls) - 1


def test_a_lookahead_is_adopted_only_by_the_pass_it_was_started_for():
    from jaxfeed.data.iterable import Lookahead, Unit

    units = [Unit(path="a", row_groups=(0,)), Unit(path="a", row_groups=(1,))]
    lookahead = Lookahead()
    started = lookahead.pool().submit(lambda: 1)
    lookahead.hand_over(units, {0: started})
    assert lookahead.adopt(units[::-1], 0) == {}  # another order: dropped
    lookahead.hand_over(units, {0: started})
    assert lookahead.adopt(units, 5) == {}  # a resumed pass: dropped
    lookahead.hand_over(units, {0: started})
    assert lookahead.adopt(units, 0) == {0: started} and lookahead.adopt(units, 0) == {}
    lookahead.close()
    assert started.result() == 1


def test_plain_batches_are_placed_row_by_row_as_put_tree_places_them(stream):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from jaxfeed.runtime.devices import put_tree, row_placer

    device = jax.devices()[1]
    cols = {"x": np.arange(40, dtype=np.float32).reshape(10, 4), "y": np.arange(10, dtype=np.int32)}
    out = row_placer(cols, device)(2, 6)
    ref = put_tree({k: v[2:6] for k, v in cols.items()}, device, batched=True)
    for k in cols:
        assert out[k].devices() == {device} and out[k].dtype == ref[k].dtype
        assert out[k].shape == ref[k].shape and np.array_equal(out[k], cols[k][2:6])
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))
    assert row_placer(cols, NamedSharding(mesh, PartitionSpec("data"))) is None
    assert row_placer({"x": cols["x"][:, ::2]}, device) is None  # not contiguous
    assert row_placer({"x": np.arange(3, dtype=np.float64)}, device) is None  # jax may narrow it
    assert row_placer({"s": ["a", "b"]}, device) is None

    loader = DataLoader(stream, 8, device=device)
    batches = list(loader)
    assert xs(batches) == fresh_epoch(stream, 0)
    assert all(v.devices() == {device} for b in batches for v in b.values())
    assert {str(v.dtype) for b in batches for v in b.values()} == {"int32", "float32"}
    assert [len(b["x"]) for b in batches] == [8] * 15
    loader.close()
