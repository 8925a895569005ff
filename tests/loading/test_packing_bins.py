"""Issue 42 item 14: packing's bins are opened as rows need them, so ``num_bins`` far above the
rows present costs nothing, and the plan is the best fit over ``num_bins`` bins as before."""

import tracemalloc

import numpy as np
import pytest

from jaxfeed import DataLoader, Dataset, Packing
from jaxfeed.loading.packing import best_fit


def _reference(lengths, length, num_bins):
    """Best fit over ``num_bins`` bins opened at once, written the plain way: each row into the
    fullest bin that holds it (lowest index on ties), else the fullest bin is closed first."""
    room, bins, packed = [length] * num_bins, [[] for _ in range(num_bins)], []
    for row, size in enumerate(lengths):
        fits = [j for j in range(num_bins) if room[j] >= size]
        if fits:
            j = min(fits, key=lambda j: (room[j], j))
        else:
            j = min(range(num_bins), key=lambda j: (room[j], j))
            packed.append(bins[j])
            bins[j], room[j] = [], length
        bins[j].append(row)
        room[j] -= size
        if room[j] == 0:
            packed.append(bins[j])
            bins[j], room[j] = [], length
    return packed + [b for b in bins if b]


@pytest.mark.parametrize("num_bins", [1, 2, 5, 64])
def test_the_plan_is_the_best_fit_over_num_bins(num_bins):
    rng = np.random.default_rng(num_bins)
    lengths = rng.integers(1, 17, size=300)
    plan = best_fit(lengths, np.arange(300), Packing(length=16), num_bins)
    got = [plan.row[plan.packed == p].tolist() for p in range(plan.num_packed)]
    assert got == _reference(lengths.tolist(), 16, num_bins)


def test_huge_num_bins_costs_memory_by_rows_not_by_bins():
    lengths = np.array([3, 2, 4, 1])
    tracemalloc.start()
    try:
        plan = best_fit(lengths, np.arange(4), Packing(length=5), num_bins=10**6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"planning 4 rows with 10**6 bins took {peak >> 20} MiB"
    assert plan.packed.tolist() == [0, 0, 1, 1]  # [3, 2] and [4, 1], as with 2 bins


@pytest.mark.parametrize("num_bins", [10**7, 10**9])
def test_the_loader_packs_four_rows_with_a_huge_num_bins(num_bins):
    ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]})
    loader = DataLoader(ds, batch_size=2, packing=Packing(length=5, num_bins=num_bins))
    rows = [r for b in loader for r in b["input_ids"].tolist()]
    assert sorted(v for r in rows for v in r if v) == list(range(1, 11))
