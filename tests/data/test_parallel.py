"""map/filter with num_proc: spawned processes, results identical to num_proc=1."""

import numpy as np
import pytest

from jaxfeed import Dataset, load_from_disk
from jaxfeed.data.ops.parallel import shard_bounds


def batch_stats(batch, indices):
    # depends on the exact batch composition: equal only if batches are cut the same way
    x = np.asarray(batch["x"])
    return {"mean": np.full(len(x), x.mean()), "idx": indices, "big": x > 50}


def keep(row, index):
    return row["x"] % 3 != 0 and index != 10


def test_shard_bounds_cut_at_batch_multiples():
    assert shard_bounds(10, 3, 2) == [(0, 4), (4, 8), (8, 10)]
    assert shard_bounds(3, 4, 1000) == [(0, 3)]
    assert shard_bounds(2500, 2, 1000) == [(0, 2000), (2000, 2500)]


@pytest.mark.slow
def test_num_proc_gives_the_single_process_result(tmp_path):
    ds = Dataset.from_dict({"x": np.arange(103), "s": [f"r{i}" for i in range(103)]})
    ds.save_to_disk(tmp_path / "ds")
    disk = load_from_disk(tmp_path / "ds").with_format("numpy")
    kwargs = dict(batched=True, batch_size=7, with_indices=True, remove_columns=["s"])
    one = disk.map(batch_stats, keep_in_memory=True, **kwargs)
    two = disk.map(batch_stats, num_proc=2, **kwargs)
    assert two.features == one.features and two.num_rows == 103 and two.format["type"] == "numpy"
    for column in one.column_names:
        np.testing.assert_array_equal(two[column], one[column])
    # a file-backed dataset: the shards are written next to it and memory-mapped
    written = sorted(p.name for p in (tmp_path / "ds").glob("cache-map-*.arrow"))
    assert len(written) == 2 and written[1].endswith("_00001_of_00002.arrow")
    batched = dict(batched=True, batch_size=40, with_indices=True)
    keep_batch = lambda b, idx: [keep({"x": x}, i) for x, i in zip(b["x"], idx, strict=True)]  # noqa: E731
    assert list(ds.filter(keep_batch, num_proc=2, **batched)["x"]) == list(
        ds.filter(keep_batch, **batched)["x"]
    )
    with pytest.raises(ValueError, match="num_proc must be a positive int"):
        ds.map(batch_stats, num_proc=0)
