"""Object storage against a real S3-compatible server (moto's server mode) on 127.0.0.1."""

import socket

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import Dataset, DatasetDict, load_dataset, load_from_disk

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free loopback port; yields (storage_options, s3fs file system)."""
    mp = pytest.MonkeyPatch()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",  # never ask a metadata service for credentials
        "AWS_CONFIG_FILE": str(tmp_path_factory.mktemp("aws") / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path_factory.mktemp("aws") / "credentials"),
    }.items():
        mp.setenv(key, value)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
    }
    import boto3

    boto3.client(
        "s3",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        **options["client_kwargs"],
    ).create_bucket(Bucket="bucket")
    fs = s3fs.S3FileSystem(**options)
    try:
        yield options, fs
    finally:
        server.stop()
        mp.undo()


def put_parquet(fs, path, table, **kwargs):
    with fs.open(path, "wb") as f:
        pq.write_table(table, f, **kwargs)
    fs.invalidate_cache()


def test_data_files_on_s3_load_through_the_cache(s3, tmp_path):
    options, fs = s3
    for i in range(2):
        put_parquet(fs, f"bucket/data/train-{i}.parquet", pa.table({"x": [i * 10, i * 10 + 1]}))
    put_parquet(fs, "bucket/data/test-0.parquet", pa.table({"x": [99]}))
    dd = load_dataset(
        "parquet",
        data_files={"train": "s3://bucket/data/train-*.parquet", "test": "s3://bucket/data/test-0.parquet"},
        storage_options=options,
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    assert list(dd["train"]["x"]) == [0, 1, 10, 11] and list(dd["test"]["x"]) == [99]
    # a remote folder: splits from the file names, as on the Hub
    folder = load_dataset(
        "s3://bucket/data", storage_options=options, cache_dir=str(tmp_path / "c")
    )
    assert folder.num_rows == {"train": 4, "test": 1}
    # the cache is keyed by the ETag: a changed object is converted again
    put_parquet(fs, "bucket/data/test-0.parquet", pa.table({"x": [7, 8]}))
    again = load_dataset(
        "parquet",
        data_files="s3://bucket/data/test-0.parquet",
        split="train",
        storage_options=options,
        cache_dir=str(tmp_path / "cache"),
    )
    assert list(again["x"]) == [7, 8]
    kept = load_dataset(
        "parquet",
        data_files="s3://bucket/data/test-0.parquet",
        split="train",
        storage_options=options,
        keep_in_memory=True,
    )
    assert list(kept["x"]) == [7, 8]
    with pytest.raises(FileNotFoundError, match="nothing matches 's3://bucket/none-"):
        load_dataset("parquet", data_files="s3://bucket/none-*.parquet", storage_options=options)


def test_save_to_disk_and_load_from_disk_round_trip(s3, tmp_path, monkeypatch):
    options, fs = s3
    monkeypatch.setenv("JAXFEED_CACHE", str(tmp_path / "cache"))
    ds = Dataset.from_dict({"x": np.arange(5), "s": list("abcde")}).with_format("numpy")
    ds.save_to_disk("s3://bucket/saved/ds", storage_options=options)
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls("bucket/saved/ds")) == [
        "data-00000-of-00001.arrow",
        "dataset_info.json",
        "state.json",
    ]
    back = load_from_disk("s3://bucket/saved/ds", storage_options=options)
    assert back.format["type"] == "numpy" and back["x"].tolist() == [0, 1, 2, 3, 4]
    assert list(back.with_format(None)["s"]) == list("abcde")
    dd = DatasetDict(
        {"train": Dataset.from_dict({"y": [1, 2]}), "test": Dataset.from_dict({"y": [3]})}
    )
    dd.save_to_disk("s3://bucket/saved/dd", storage_options=options)
    fs.invalidate_cache()
    loaded = load_from_disk("s3://bucket/saved/dd", storage_options=options)
    assert isinstance(loaded, DatasetDict) and loaded.num_rows == {"train": 2, "test": 1}
    assert load_dataset("s3://bucket/saved/dd", storage_options=options).num_rows == loaded.num_rows
    # overwrite: the next load sees the new rows (new ETags, new local copy)
    Dataset.from_dict({"x": [42]}).save_to_disk("s3://bucket/saved/ds", storage_options=options)
    fs.invalidate_cache()
    assert list(load_from_disk("s3://bucket/saved/ds", storage_options=options)["x"]) == [42]


def test_streaming_from_s3_reads_only_the_needed_columns_and_row_groups(s3, monkeypatch):
    options, fs = s3
    n = 4000
    rng = np.random.default_rng(0)  # random: dictionary encoding cannot shrink it
    blob = pa.array([rng.bytes(200) for _ in range(n)], pa.binary())  # 800 KB we never ask for
    table = pa.table({"id": np.arange(n), "blob": blob})
    put_parquet(fs, "bucket/stream/train.parquet", table, row_group_size=1000, compression="none")
    assert fs.size("bucket/stream/train.parquet") > 800_000
    fetched = []
    real = s3fs.core.S3File._fetch_range

    def counting(self, start, end):
        fetched.append(end - start)
        return real(self, start, end)

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counting)
    ids = load_dataset(
        "parquet",
        data_files="s3://bucket/stream/train.parquet",
        split="train",
        streaming=True,
        storage_options=options,
    )
    assert ids.num_shards == 4
    fetched.clear()
    ids_only = [r["id"] for r in ids.select_columns(["id"])]
    assert ids_only == list(range(n))
    assert sum(fetched) < 100_000, sum(fetched)  # ids (32 KB) and footers, not the 800 KB blob
    fetched.clear()
    part = [r["id"] for r in ids.select_columns("id").shard(4, 2)]
    assert part == list(range(2000, 3000)) and sum(fetched) < 40_000
    with pytest.raises(ImportError, match=r"jaxfeed\[gcs\]"):
        import jaxfeed._base.remote

        monkeypatch.setattr(
            jaxfeed._base.remote.fsspec.core,
            "url_to_fs",
            lambda *a, **k: (_ for _ in ()).throw(ImportError("gcsfs")),
        )
        jaxfeed._base.remote.filesystem("gs://bucket/x.parquet")
