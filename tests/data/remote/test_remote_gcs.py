"""``gs://`` paths through gcsfs against a Google Cloud Storage emulator on 127.0.0.1
(gcp-storage-emulator: the GCS JSON API, in memory). The endpoint reaches the client only through
``storage_options={"endpoint_url": ..., "token": "anon"}``."""

import os
import socket

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import Dataset, DatasetDict, load_dataset, load_from_disk

# gcsfs >= 2026 defaults to ExtendedGcsFileSystem, which first asks the Storage Control gRPC API
# for each bucket's layout (zonal, hierarchical); emulators do not serve it, and every lookup
# retries for 60 s before falling back. gcsfs reads this switch at import, and the fixture below
# also registers the plain GCSFileSystem in case gcsfs was imported before.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
gcsfs = pytest.importorskip("gcsfs")
emulator = pytest.importorskip("gcp_storage_emulator.server")

N = 4000


@pytest.fixture(scope="module")
def gcs():
    """A GCS emulator with bucket ``bucket`` on a free loopback port; yields (storage_options,
    a gcsfs file system on it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket="bucket")
    server.start()
    before = {name: fsspec.get_filesystem_class(name) for name in ("gs", "gcs")}
    for name in before:
        fsspec.register_implementation(name, gcsfs.core.GCSFileSystem, clobber=True)
    options = {"token": "anon", "endpoint_url": f"http://127.0.0.1:{port}"}
    try:
        yield options, gcsfs.core.GCSFileSystem(**options)
    finally:
        for name, cls in before.items():
            fsspec.register_implementation(name, cls, clobber=True)
        server.stop()


def put_parquet(fs, path, table, **kwargs):
    with fs.open(path, "wb") as f:
        pq.write_table(table, f, **kwargs)
    fs.invalidate_cache()


def test_data_files_on_gcs(gcs, tmp_path):
    options, fs = gcs
    for i in range(2):
        put_parquet(fs, f"bucket/data/train-{i}.parquet", pa.table({"x": [i * 10, i * 10 + 1]}))
    fs.pipe("bucket/data/test.csv", b"x,label\n99,z\n")
    fs.pipe("bucket/data/validation.jsonl", b'{"x": 5, "label": "v"}\n{"x": 6, "label": "w"}\n')
    fs.invalidate_cache()
    cache = str(tmp_path / "cache")
    train = load_dataset(
        "parquet",
        data_files="gs://bucket/data/train-*.parquet",
        split="train",
        storage_options=options,
        cache_dir=cache,
    )
    assert list(train["x"]) == [0, 1, 10, 11]
    test = load_dataset(
        "csv", data_files={"test": "gs://bucket/data/test.csv"}, storage_options=options
    )
    assert test["test"].to_dict() == {"x": [99], "label": ["z"]}
    validation = load_dataset(
        "json",
        data_files="gcs://bucket/data/validation.jsonl",  # gcsfs's other name for gs://
        split="train",
        storage_options=options,
    )
    assert validation.to_dict() == {"x": [5, 6], "label": ["v", "w"]}
    # a bucket folder of mixed formats: splits from the file names, as on the Hub
    folder = load_dataset("gs://bucket/data", storage_options=options, cache_dir=cache)
    assert folder.num_rows == {"train": 4, "test": 1, "validation": 2}
    # the cache is keyed by the object's hash: a same-size rewrite is converted again
    size = fs.size("bucket/data/train-1.parquet")
    put_parquet(fs, "bucket/data/train-1.parquet", pa.table({"x": [20, 21]}))
    assert fs.size("bucket/data/train-1.parquet") == size
    again = load_dataset(
        "parquet",
        data_files="gs://bucket/data/train-*.parquet",
        split="train",
        storage_options=options,
        cache_dir=cache,
    )
    assert list(again["x"]) == [0, 1, 20, 21]
    with pytest.raises(FileNotFoundError, match="nothing matches 'gs://bucket/none-"):
        load_dataset("parquet", data_files="gs://bucket/none-*.parquet", storage_options=options)


def test_the_emulator_from_the_environment(gcs, monkeypatch):
    """gcsfs's other way to an emulator: ``STORAGE_EMULATOR_HOST``, no endpoint in the options."""
    options, fs = gcs
    fs.pipe("bucket/env/train.csv", b"x\n1\n2\n")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", options["endpoint_url"])
    ds = load_dataset(
        "csv",
        data_files="gs://bucket/env/train.csv",
        split="train",
        storage_options={"token": "anon"},
    )
    assert list(ds["x"]) == [1, 2]


def test_save_to_disk_and_load_from_disk_on_gcs(gcs, tmp_path, monkeypatch):
    options, fs = gcs
    monkeypatch.setenv("JAXFEED_CACHE", str(tmp_path / "cache"))
    ds = Dataset.from_dict({"x": np.arange(5), "s": list("abcde")}).with_format("numpy")
    ds.save_to_disk("gs://bucket/saved/ds", storage_options=options)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls("bucket/saved/ds")) == [
        "data-00000-of-00001.arrow",
        "dataset_info.json",
        "state.json",
    ]
    back = load_from_disk("gs://bucket/saved/ds", storage_options=options)
    assert back.format["type"] == "numpy" and back["x"].tolist() == [0, 1, 2, 3, 4]
    assert list(back.with_format(None)["s"]) == list("abcde")
    dd = DatasetDict(
        {"train": Dataset.from_dict({"y": [1, 2]}), "test": Dataset.from_dict({"y": [3]})}
    )
    dd.save_to_disk("gs://bucket/saved/dd", storage_options=options)
    fs.invalidate_cache()
    loaded = load_from_disk("gs://bucket/saved/dd", storage_options=options)
    assert isinstance(loaded, DatasetDict) and loaded.num_rows == {"train": 2, "test": 1}
    assert list(loaded["test"]["y"]) == [3]
    assert load_dataset("gs://bucket/saved/dd", storage_options=options).num_rows == {
        "train": 2,
        "test": 1,
    }
    # overwrite: the next load sees the new rows (new hashes, new local copy)
    Dataset.from_dict({"x": [42]}).save_to_disk("gs://bucket/saved/ds", storage_options=options)
    fs.invalidate_cache()
    assert list(load_from_disk("gs://bucket/saved/ds", storage_options=options)["x"]) == [42]


def test_streaming_from_gcs_reads_only_the_needed_columns_and_row_groups(gcs, monkeypatch):
    options, fs = gcs
    rng = np.random.default_rng(0)
    blob = pa.array([rng.bytes(200) for _ in range(N)], pa.binary())  # 800 KB never asked for
    put_parquet(
        fs, "bucket/stream/train.parquet", pa.table({"id": np.arange(N), "blob": blob}),
        row_group_size=1000,
    )  # fmt: skip
    assert fs.size("bucket/stream/train.parquet") > 800_000
    fetched = []
    real = gcsfs.core.GCSFile._fetch_range

    def counting(self, start=None, end=None):
        out = real(self, start, end)
        fetched.append(len(out))
        return out

    monkeypatch.setattr(gcsfs.core.GCSFile, "_fetch_range", counting)
    stream = load_dataset(
        "parquet",
        data_files="gs://bucket/stream/train.parquet",
        split="train",
        streaming=True,
        storage_options=options,
    )
    assert stream.num_shards == 4
    fetched.clear()
    assert [r["id"] for r in stream.select_columns(["id"])] == list(range(N))
    assert 0 < sum(fetched) < 100_000, sum(fetched)  # ids (and footers), not the blobs
    fetched.clear()
    assert [r["id"] for r in stream.select_columns("id").shard(4, 1)] == list(range(1000, 2000))
    assert sum(fetched) < 40_000, sum(fetched)
