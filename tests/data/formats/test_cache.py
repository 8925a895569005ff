"""Out-of-core loading: bounded peak memory, cache reuse, invalidation, atomic writes."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import Features, Value, load_dataset
from jaxfeed.data.formats.cache import cache_root, load_cached

ROW_BYTES = 1000
BOUND_MB = 70


def write_big_parquet(path, rows, rows_per_group=10_000):
    """``rows`` rows of (int64 id, 1 KB random bytes), written a row group at a time."""
    schema = pa.schema([("id", pa.int64()), ("blob", pa.binary())])
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for lo in range(0, rows, rows_per_group):
            n = min(rows_per_group, rows - lo)
            offsets = np.arange(0, (n + 1) * ROW_BYTES, ROW_BYTES, dtype=np.int32)
            data = rng.bytes(n * ROW_BYTES)
            blob = pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            )
            writer.write_table(pa.table({"id": np.arange(lo, lo + n), "blob": blob}, schema))


PROBE = textwrap.dedent(
    """
    import json, sys, time
    def rss(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    import tempfile
    import jaxfeed
    import pyarrow as pa, pyarrow.parquet as pq
    # warm up: load a one-row file first, so modules imported lazily are not counted as data
    tiny = tempfile.mkdtemp()
    pq.write_table(pa.table({"id": [0], "blob": [b"x"]}), tiny + "/t.parquet")
    jaxfeed.load_dataset("parquet", data_files=tiny + "/t.parquet", split="train", cache_dir=tiny)
    base = rss("VmRSS:")
    start = time.perf_counter()
    ds = jaxfeed.load_dataset("parquet", data_files=sys.argv[1], split="train", cache_dir=sys.argv[2])
    seconds = time.perf_counter() - start
    peak = rss("VmHWM:") - base
    ids = ds.with_format("numpy")["id"]
    print(json.dumps({"peak_mb": peak, "seconds": seconds, "rows": ds.num_rows,
                      "id_sum": int(ids.sum()), "blob_7": ds[7]["blob"].hex(),
                      "chunks": ds.data.column("blob").num_chunks}))
    """
)


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_file(tmp_path):
    rows = 300_000  # ~300 MB: more than 4x the bound
    path = tmp_path / "big.parquet"
    write_big_parquet(path, rows)
    assert os.path.getsize(path) > 4 * BOUND_MB << 20
    run = [sys.executable, "-c", PROBE, str(path), str(tmp_path / "cache")]
    first = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    assert first["rows"] == rows and first["id_sum"] == rows * (rows - 1) // 2
    expected = pq.ParquetFile(path).read_row_group(0, columns=["blob"]).column(0)[7].as_py()
    assert first["blob_7"] == expected.hex()
    assert first["peak_mb"] < BOUND_MB, first


def test_cache_is_reused_and_invalidated_when_the_source_changes(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    cache = tmp_path / "cache"
    ds = load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
    assert ds["x"] == [1, 2, 3]
    folders = list((cache / "datasets").iterdir())
    assert len(folders) == 1 and (folders[0] / "data.arrow").is_file()
    import jaxfeed.data.formats.cache as cache_module

    def no_conversion(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    with monkeypatch.context() as m:
        m.setattr(cache_module, "_convert", no_conversion)
        again = load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
    assert again["x"] == [1, 2, 3]
    # the cached table is memory-mapped from the cache file, not read into memory
    assert again.data.column("x").chunk(0).buffers()[1].address != 0
    pq.write_table(pa.table({"x": [4, 5, 6, 7]}), path)  # size and mtime change
    changed = load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
    # the entry of the source's previous version is removed (a dataset mapping it still reads)
    assert changed["x"] == [4, 5, 6, 7] and len(list((cache / "datasets").iterdir())) == 1
    assert ds["x"] == [1, 2, 3]
    # options are part of the key: other features, another cache file
    typed = load_dataset(
        "parquet",
        data_files=str(path),
        split="train",
        cache_dir=str(cache),
        features=Features({"x": Value("float32")}),
    )
    assert typed.features["x"] == Value("float32") and typed["x"] == [4.0, 5.0, 6.0, 7.0]
    assert len(list((cache / "datasets").iterdir())) == 2
    # keep_in_memory: no cache file at all
    other = tmp_path / "other-cache"
    kept = load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(other), keep_in_memory=True
    )
    assert kept["x"] == [4, 5, 6, 7] and not other.exists()


def test_default_cache_folder_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXFEED_CACHE", str(tmp_path / "env-cache"))
    assert cache_root() == tmp_path / "env-cache"
    monkeypatch.delenv("JAXFEED_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == tmp_path / ".cache" / "jaxfeed"
    assert cache_root(tmp_path / "given") == tmp_path / "given"


def test_a_crash_mid_conversion_leaves_no_cache(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(100))}), path)
    import jaxfeed.data.formats.cache as cache_module

    real = cache_module._write

    def failing(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module, "_write", failing)
    with pytest.raises(KeyboardInterrupt):
        load_cached([str(path)], cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "datasets").iterdir()) == []
    monkeypatch.setattr(cache_module, "_write", real)
    assert load_cached([str(path)], cache_dir=tmp_path / "cache").table["x"][-1].as_py() == 99


def test_csv_and_json_convert_batch_by_batch_with_late_type_changes(tmp_path, monkeypatch):
    import jaxfeed.data.formats.cache as cache_module

    monkeypatch.setattr(cache_module, "CONVERT_BATCH_BYTES", 64)  # many tiny blocks
    lines = [f"{i},name{i}" for i in range(200)] + ["1.5,late float"]
    (tmp_path / "t.csv").write_text("a,b\n" + "\n".join(lines) + "\n")
    ds = load_dataset("csv", data_files=str(tmp_path / "t.csv"), split="train")
    assert ds.num_rows == 201 and ds["a"][-1] == 1.5 and ds["b"][3] == "name3"
    rows = [{"a": i, "b": [i, i + 1]} for i in range(300)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_dataset("json", data_files=str(tmp_path / "t.jsonl"), split="train")
    assert ds.num_rows == 300 and ds[299] == {"a": 299, "b": [299, 300]}
    assert ds.data.column("a").num_chunks > 1  # written in several record batches
    with pytest.raises(ValueError, match=r"has columns \['z'\] but .* has \['a', 'b'\]"):
        (tmp_path / "u.jsonl").write_text('{"z": 1}\n')
        load_dataset("json", data_files=[str(tmp_path / "t.jsonl"), str(tmp_path / "u.jsonl")])


def test_one_cache_entry_however_the_path_is_spelled(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "t.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "link").symlink_to(folder)
    cache = tmp_path / "cache"
    monkeypatch.chdir(tmp_path)
    spellings = [str(folder / "t.csv"), "data/t.csv", "./data/../data/t.csv", "link/t.csv"]
    for spelling in spellings:
        ds = load_dataset("csv", data_files=spelling, split="train", cache_dir=str(cache))
        assert ds.num_rows == 2
    assert len(list((cache / "datasets").iterdir())) == 1
