"""``python benchmarks/cache_open.py [--mb 256]``: what checking a cache entry costs when it is
opened (jaxfeed.data.formats.cache), against mapping the same Arrow file with no check at all.

Rows: the open of an untouched entry (info digest, size, Arrow footer: no pass over the data),
the open after the file's change time moved (a full check: CRC-32 of every byte, Arrow buffer
validation, the features' checks), and a bare ``pa.ipc.open_file(pa.memory_map(...))``.
Medians of 5; the page cache is warm (the file was just written)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxfeed.bench._common import median_seconds
from jaxfeed.data.formats import cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="size of the data (default 256)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="jaxfeed-cache-bench-"))
    try:
        _run(folder, args.mb)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(folder: Path, mb: int) -> None:
    rows = mb * (1 << 20) // 40  # an int64, a float64 and a ~16-character string per row
    rng = np.random.default_rng(0)
    words = pa.array([f"w{n:014d}" for n in rng.integers(0, 10**12, 1000)])
    strings = pa.chunked_array([words.take(pa.array(rng.integers(0, 1000, rows)))])
    table = pa.table({"i": np.arange(rows), "f": rng.standard_normal(rows), "s": strings})
    pq.write_table(table, folder / "src.parquet")
    del table, strings
    ds = cache.load_cached([folder / "src.parquet"], cache_dir=folder / "cache")
    del ds
    entry = next((folder / "cache" / "datasets").iterdir())
    data = entry / cache.DATA_FILE
    size = data.stat().st_size / (1 << 20)

    def untouched() -> None:
        cache._open(entry)

    def changed() -> None:
        os.chmod(data, 0o644)  # moves the change time only: the next open checks in full
        cache._open(entry)

    def bare() -> None:
        pa.ipc.open_file(pa.memory_map(str(data))).read_all()

    results = [("untouched entry (digest, size, footer)", median_seconds(untouched))]
    results.append(("changed entry (CRC-32 + Arrow + features checks)", median_seconds(changed)))
    results.append(("bare memory map, no check", median_seconds(bare)))
    base = results[-1][1]
    print(f"cache entry of {size:.0f} MiB ({rows:,} rows: int64, float64, string)")
    print(f"{'open':52s} {'ms':>9s} {'x bare':>8s}")
    for name, seconds in results:
        print(f"{name:52s} {seconds * 1000:9.1f} {seconds / base:8.1f}")


if __name__ == "__main__":
    main()
