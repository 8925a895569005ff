"""Data at scale: jaxfeed against Hugging Face `datasets` on the same Parquet files, in one run.

1. **Loading a large Parquet file** (default 1 GB: rows of an int64 id and 1 KB of random bytes):
   extra peak memory (VmHWM minus the RSS after imports) and wall time of ``load_dataset``, first
   (conversion into the Arrow cache) and cached (second load), each in a fresh process. Both
   libraries' modules are imported before the clock starts (jaxfeed imports its I/O modules on
   first use of ``jaxfeed.load_dataset``; `datasets` imports everything at ``import datasets``).
   The libraries alternate, ``--load-repeats`` times (medians), each first load starting from an
   empty cache after ``os.sync()``, so no load pays for the write-back of another's files.
2. **Streaming Parquet -> jax.Array batches** of two shapes: ``vectors`` (64 float32 and an int
   label per row) and ``images`` (MNIST-shaped ``Array2D((28, 28), "uint8")`` and a label, the
   features stored in the file's metadata, as `datasets` writes them):
   `datasets`' ``load_dataset(..., streaming=True).with_format("jax").iter(batch_size)`` against
   ``jaxfeed.DataLoader(load_dataset(..., streaming=True), batch_size)``, rows/s (median).

Files and caches are written under a temporary folder in /tmp and deleted afterwards.

A streaming pass stops after ``--stream-rows`` rows or ``--seconds``, whichever comes first;
each library first streams ``--seconds / 3`` of warm-up passes (a fresh process's first passes
fault in the allocator's memory and ran at a fraction of the later ones' speed).

Run: ``python benchmarks/scale.py [--gb 1.0] [--load-repeats 3] [--stream-rows 200000] [--repeats 3]
[--seconds 15]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxfeed.bench._common import machine, save_json

ROW_BYTES = 1000
BATCH = 256
LIBS = ("hf", "jaxfeed")
FEATURES = 64

LOAD = textwrap.dedent(
    """
    import json, sys, time
    def rss(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    lib, path, cache = sys.argv[1:4]
    if lib == "hf":
        import datasets
        datasets.disable_progress_bars()
        load_dataset = datasets.load_dataset
    else:
        import jaxfeed
        load_dataset = jaxfeed.load_dataset  # imports jaxfeed's I/O modules, as `import datasets` does
    load = lambda: load_dataset("parquet", data_files=path, split="train", cache_dir=cache)
    base = rss("VmRSS:")
    start = time.perf_counter()
    ds = load()
    seconds = time.perf_counter() - start
    assert ds.num_rows > 0
    print(json.dumps({"peak_mb": rss("VmHWM:") - base, "seconds": seconds, "rows": ds.num_rows}))
    """
)

STREAM = textwrap.dedent(
    """
    import json, sys, time
    import jax
    lib, path, batch, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if lib == "hf":
        import datasets
        datasets.disable_progress_bars()
        ids = datasets.load_dataset("parquet", data_files=path, split="train", streaming=True)
        batches = lambda: ids.with_format("jax").iter(batch_size=batch)
    else:
        from jaxfeed import DataLoader, load_dataset
        ids = load_dataset("parquet", data_files=path, split="train", streaming=True)
        loader = DataLoader(ids, batch)  # one loader: its passes are consecutive epochs
        batches = lambda: loader
    seconds = float(sys.argv[6])
    def run(limit):
        n = 0
        start = time.perf_counter()
        for b in batches():
            jax.block_until_ready(b["x"])
            n += b["label"].shape[0]
            if n >= rows or time.perf_counter() - start > limit:
                break
        return n / (time.perf_counter() - start)
    warm = time.perf_counter() + seconds / 3
    while time.perf_counter() < warm:  # warm-up passes: file system caches, the allocator's
        run(seconds / 3)  # memory (a fresh process faults its first passes' pages in), transfers
    print(json.dumps({"rows_per_s": [run(seconds) for _ in range(int(sys.argv[5]))]}))
    """
)


def write_blob_file(path: Path, gigabytes: float) -> int:
    rows = int(gigabytes * (1 << 30) / (ROW_BYTES + 8))
    schema = pa.schema([("id", pa.int64()), ("blob", pa.binary())])
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for lo in range(0, rows, 20_000):
            n = min(20_000, rows - lo)
            offsets = np.arange(0, (n + 1) * ROW_BYTES, ROW_BYTES, dtype=np.int32)
            blob = pa.Array.from_buffers(
                pa.binary(),
                n,
                [None, pa.py_buffer(offsets), pa.py_buffer(rng.bytes(n * ROW_BYTES))],
            )
            writer.write_table(pa.table({"id": np.arange(lo, lo + n), "blob": blob}, schema))
    return rows


def write_feature_file(path: Path, rows: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    values = pa.array(x.reshape(-1))
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(values, FEATURES),
            "label": rng.integers(0, 10, rows),
        }
    )
    pq.write_table(table, path, row_group_size=50_000)


def write_image_file(path: Path, rows: int) -> None:
    from jaxfeed import Array2D, ClassLabel, Dataset, Features  # import cost: jaxfeed's data stack

    rng = np.random.default_rng(2)
    features = Features(
        {"x": Array2D((28, 28), "uint8"), "label": ClassLabel(names=[str(i) for i in range(10)])}
    )
    images = rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8)
    ds = Dataset.from_dict({"x": images, "label": rng.integers(0, 10, rows)}, features=features)
    pq.write_table(ds.data, path, row_group_size=50_000)


def _median(runs: list[dict]) -> dict:
    """Median peak and time of repeated loads, with every run's time."""
    return {
        "peak_mb": statistics.median(r["peak_mb"] for r in runs),
        "seconds": statistics.median(r["seconds"] for r in runs),
        "rows": runs[0]["rows"],
        "all_seconds": [r["seconds"] for r in runs],
    }


def run_json(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="size of the Parquet file to load")
    parser.add_argument(
        "--load-repeats", type=int, default=3, help="first and cached loads per library (median)"
    )
    parser.add_argument("--stream-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--seconds", type=float, default=15.0, help="cap on one streaming pass (slow peers)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jaxfeed-scale-", dir="/tmp"))
    try:
        big = work / "big.parquet"
        rows = write_blob_file(big, args.gb)
        size_mb = big.stat().st_size / (1 << 20)
        runs: dict[str, dict[str, list[dict]]] = {lib: {"first": [], "cached": []} for lib in LIBS}
        for _ in range(args.load_repeats):
            for lib in LIBS:  # alternating: a drift in the machine's load hits both
                cache = work / f"cache-{lib}"
                shutil.rmtree(cache, ignore_errors=True)
                # Write back the file system's dirty pages (the new file, the other library's
                # cache) so that no load pays for what an earlier one left unwritten.
                os.sync()
                for when in ("first", "cached"):
                    runs[lib][when].append(run_json(["-c", LOAD, lib, str(big), str(cache)]))
        load = {lib: {when: _median(r) for when, r in by.items()} for lib, by in runs.items()}
        stream: dict[str, dict[str, float]] = {}
        for case, write in (("vectors", write_feature_file), ("images", write_image_file)):
            path = work / f"{case}.parquet"
            write(path, args.stream_rows)
            stream[case] = {}
            for lib in ("hf", "jaxfeed"):
                command = [STREAM, lib, str(path), str(BATCH), str(args.stream_rows)]
                rates = run_json(["-c", *command, str(args.repeats), str(args.seconds)])
                stream[case][lib] = statistics.median(rates["rows_per_s"])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nData at scale  ({machine()})")
    print(
        f"Loading a {size_mb:,.0f} MB Parquet file ({rows:,} rows), each load in a fresh process "
        f"(median of {args.load_repeats})"
    )
    print(f"{'':<26}{'peak MB':>10}{'seconds':>10}{'HF / jaxfeed: peak':>21}{'time':>8}")
    for when in ("first", "cached"):
        for lib in LIBS:
            r = load[lib][when]
            hf, ours = load["hf"][when], load["jaxfeed"][when]
            peak = hf["peak_mb"] / max(ours["peak_mb"], 1e-9)
            speed = hf["seconds"] / max(ours["seconds"], 1e-9)
            shown = f"{peak:>20.1f}x{speed:>7.2f}x" if lib == "jaxfeed" else ""
            name = "datasets" if lib == "hf" else "jaxfeed"
            print(f"{name + ', ' + when:<26}{r['peak_mb']:>10.0f}{r['seconds']:>10.2f}{shown}")
    print(
        f"\nStreaming Parquet -> jax.Array batches of {BATCH} (passes of up to "
        f"{args.stream_rows:,} rows or {args.seconds:g} s; median of {args.repeats})"
    )
    print(f"{'case':<10}{'implementation':<28}{'rows/s':>12}{'jaxfeed / this':>16}")
    for case, rates in stream.items():
        for lib, name in (("hf", "datasets IterableDataset"), ("jaxfeed", "jaxfeed DataLoader")):
            ratio = rates["jaxfeed"] / rates[lib]
            print(f"{case:<10}{name:<28}{rates[lib]:>12,.0f}{ratio:>15.1f}x")
    save_json(
        "scale",
        {"file_mb": size_mb, "rows": rows, "load": load, "stream_rows_per_s": stream},
    )


if __name__ == "__main__":
    main()
