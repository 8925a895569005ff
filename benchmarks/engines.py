"""``python benchmarks/engines.py [--mb 1024]``: a table prepared on Spark or Ray handed to a
dataset, jaxfeed against the peers, in one run.

Rows/s and the driver's peak memory (the Python process's resident memory sampled every 5 ms
during the call, above what it held just before) of:

- Spark (``local[2]``): ``jaxfeed.Dataset.from_spark`` against ``datasets.Dataset.from_spark``;
- Ray (two CPUs, the table materialized in its object store first): ``jaxfeed.Dataset.from_ray``
  against what Ray's removed ``Dataset.to_huggingface`` did (``datasets.Dataset`` over
  ``pyarrow.concat_tables(ray.get(ds.to_arrow_refs()))``, Ray 2.60 has no ``to_huggingface``),
  and back: ``jaxfeed.Dataset.to_ray`` against ``ray.data.from_huggingface``.

The table (``--mb`` MB of Parquet, in 16 files: an int64, a float64 and a 100-character string
per row) is generated once; each engine runs in a subprocess of its own, the peer first and
jaxfeed second, after a warm-up read of the Parquet files. ``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILES = 16


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(call) -> tuple[float, int, object]:
    """Seconds, peak resident bytes above the start (sampled every 5 ms), and the result."""
    gc.collect()
    base = peak = _rss()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, _rss())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        out = call()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        thread.join()
    return seconds, max(peak, _rss()) - base, out


def make_table(folder: Path, mb: int) -> int:
    rows_per_file = max(1, mb * (1 << 20) // (116 * FILES))
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    for k in range(FILES):
        data = letters[rng.integers(0, len(letters), rows_per_file * 100)].tobytes()
        offsets = np.arange(0, (rows_per_file + 1) * 100, 100, dtype=np.int32)
        text = pa.StringArray.from_buffers(rows_per_file, pa.py_buffer(offsets), pa.py_buffer(data))
        ids = np.arange(k * rows_per_file, (k + 1) * rows_per_file)
        table = pa.table({"id": ids, "x": rng.standard_normal(rows_per_file), "text": text})
        pq.write_table(table, folder / f"part-{k:02d}.parquet", row_group_size=65_536)
    return rows_per_file * FILES


def run_spark(folder: Path, rows: int) -> dict:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import datasets
    from pyspark.sql import SparkSession

    import jaxfeed

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.parquet(str(folder / "data"))
    df.selectExpr("sum(length(text))").collect()  # warm-up: the files in the page cache
    out = {}
    s, mem, ds = measure(lambda: datasets.Dataset.from_spark(df, cache_dir=str(folder / "hf")))
    assert ds.num_rows == rows
    out["datasets.Dataset.from_spark"] = {"seconds": s, "peak_bytes": mem}
    del ds
    s, mem, ds = measure(lambda: jaxfeed.Dataset.from_spark(df, cache_dir=str(folder / "jf")))
    assert ds.num_rows == rows
    out["jaxfeed.Dataset.from_spark"] = {"seconds": s, "peak_bytes": mem}
    spark.stop()
    return out


def run_ray(folder: Path, rows: int) -> dict:
    import datasets
    import ray

    import jaxfeed

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray_ds = ray.data.read_parquet(str(folder / "data")).materialize()
    out = {}

    def to_huggingface():
        return datasets.Dataset(pa.concat_tables(ray.get(ray_ds.to_arrow_refs())))

    s, mem, ds = measure(to_huggingface)
    assert ds.num_rows == rows
    out["Ray to_arrow_refs -> datasets.Dataset"] = {"seconds": s, "peak_bytes": mem}
    del ds
    gc.collect()
    s, mem, ds = measure(lambda: jaxfeed.Dataset.from_ray(ray_ds, cache_dir=str(folder / "jf")))
    assert ds.num_rows == rows
    out["jaxfeed.Dataset.from_ray"] = {"seconds": s, "peak_bytes": mem}
    del ds
    files = sorted(str(p) for p in (folder / "data").iterdir())
    hf = datasets.Dataset.from_parquet(files, cache_dir=str(folder / "hf"))
    jf = jaxfeed.Dataset.from_parquet(files, cache_dir=str(folder / "jf"))
    s, mem, back = measure(lambda: ray.data.from_huggingface(hf).materialize())
    assert back.count() == rows
    out["ray.data.from_huggingface"] = {"seconds": s, "peak_bytes": mem}
    del back
    s, mem, back = measure(lambda: jf.to_ray().materialize())
    assert back.count() == rows
    out["jaxfeed.Dataset.to_ray"] = {"seconds": s, "peak_bytes": mem}
    ray.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the table (default 1024)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--engine", choices=["spark", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:  # a subprocess: one engine
        run = run_spark if args.engine == "spark" else run_ray
        print(json.dumps(run(Path(args.folder), args.rows)))
        return
    folder = Path(tempfile.mkdtemp(prefix="jaxfeed-engines-bench-"))
    try:
        (folder / "data").mkdir()
        rows = make_table(folder / "data", args.mb)
        size = sum(p.stat().st_size for p in (folder / "data").iterdir())
        results = {}
        for engine in ("spark", "ray"):
            command = [sys.executable, __file__, "--engine", engine, "--folder", str(folder)]
            done = subprocess.run(
                [*command, "--rows", str(rows)], capture_output=True, text=True, check=True
            )
            results.update(json.loads(done.stdout.strip().splitlines()[-1]))
            for sub in ("hf", "jf"):
                shutil.rmtree(folder / sub, ignore_errors=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{rows:,} rows, {size / 2**20:.0f} MB of Parquet ({args.mb} MB asked)\n")
    print("| call | seconds | rows/s | driver peak MB |\n|---|---:|---:|---:|")
    for name, r in results.items():
        rate = rows / r["seconds"]
        print(f"| {name} | {r['seconds']:.1f} | {rate:,.0f} | {r['peak_bytes'] / 2**20:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "mb": args.mb, **results}, indent=2))


if __name__ == "__main__":
    main()
