"""``https://`` data files through fsspec's HTTP file system (aiohttp), against a TLS server on
127.0.0.1 whose certificate comes from a throwaway CA (trustme). The CA reaches the client only
through ``storage_options={"ssl": context}``: without it, verification must fail."""

import io
import ssl

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import Dataset, load_dataset, load_from_disk
from remote_servers import StaticFiles, closed_port, serve

pytest.importorskip("aiohttp")
trustme = pytest.importorskip("trustme")

N = 4000


def parquet_bytes(table: pa.Table, **kwargs) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **kwargs)
    return out.getvalue()


def big_table() -> pa.Table:
    """4 row groups of 1000 rows: a small ``id`` column and 800 KB of random bytes we never
    ask for (random, so neither dictionary encoding nor compression can shrink it)."""
    rng = np.random.default_rng(0)
    blob = pa.array([rng.bytes(200) for _ in range(N)], pa.binary())
    return pa.table({"id": np.arange(N), "blob": blob})


@pytest.fixture(scope="module")
def https(tmp_path_factory):
    """A read-only HTTPS file server; yields (base URL, storage_options, the server's files)."""
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    ca_file = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    app = StaticFiles(
        {
            "data/train.parquet": parquet_bytes(big_table(), row_group_size=1000),
            "data/small.csv": b"x,label\n1,a\n2,b\n3,c\n",
            "data/small.jsonl": b'{"x": 1, "label": "a"}\n{"x": 2, "label": "b"}\n',
            "data/array.json": b'[{"x": 5}, {"x": 6}]',
            "data/test.parquet": parquet_bytes(pa.table({"x": [7, 8, 9]})),
            "parts/train-0.parquet": parquet_bytes(pa.table({"x": [0, 1]})),
            "parts/train-1.parquet": parquet_bytes(pa.table({"x": [2]})),
            "parts/test-0.parquet": parquet_bytes(pa.table({"x": [3]})),
        },
        listings=True,  # folder URLs get an HTML index, as from `python -m http.server`
    )
    with serve(app, server_tls) as url:
        options = {"ssl": ssl.create_default_context(cafile=str(ca_file))}
        yield url, options, app.store


def test_csv_json_and_parquet_over_https(https, tmp_path):
    url, options, _ = https
    cache = str(tmp_path / "cache")
    dd = load_dataset(
        "csv",
        data_files={"train": f"{url}/data/small.csv"},
        storage_options=options,
        cache_dir=cache,
    )
    assert dd["train"].to_dict() == {"x": [1, 2, 3], "label": ["a", "b", "c"]}
    lines = load_dataset(
        "json", data_files=f"{url}/data/small.jsonl", split="train", storage_options=options
    )
    assert lines.to_dict() == {"x": [1, 2], "label": ["a", "b"]}
    array = load_dataset(
        "json", data_files=f"{url}/data/array.json", split="train", storage_options=options
    )
    assert list(array["x"]) == [5, 6]
    both = load_dataset(
        "parquet",
        data_files={"train": [f"{url}/data/test.parquet"] * 2, "test": f"{url}/data/test.parquet"},
        storage_options=options,
        cache_dir=cache,
    )
    assert both.num_rows == {"train": 6, "test": 3}
    # a file URL as the path, and a query string that is not a glob
    direct = load_dataset(f"{url}/data/small.csv", split="train", storage_options=options)
    assert list(direct["x"]) == [1, 2, 3]
    signed = load_dataset(
        "csv", data_files=f"{url}/data/small.csv?sig=abc", split="train", storage_options=options
    )
    assert list(signed["x"]) == [1, 2, 3]
    # a glob needs a server that lists folders (an HTML index): fsspec reads its links
    globbed = load_dataset(
        "parquet",
        data_files={"train": f"{url}/parts/train-*.parquet", "test": f"{url}/parts/test-*"},
        storage_options=options,
    )
    assert list(globbed["train"]["x"]) == [0, 1, 2] and list(globbed["test"]["x"]) == [3]
    kept = load_dataset(
        "parquet",
        data_files=f"{url}/data/test.parquet",
        split="train",
        storage_options=options,
        keep_in_memory=True,
    )
    assert list(kept["x"]) == [7, 8, 9]


def test_a_changed_file_is_converted_again(https, tmp_path):
    url, options, store = https
    cache = str(tmp_path / "cache")
    store.put("data/v.csv", b"x\n1\n2\n", mtime=1_700_000_000)

    def load():
        ds = load_dataset(
            "csv",
            data_files=f"{url}/data/v.csv",
            split="train",
            storage_options=options,
            cache_dir=cache,
        )
        return list(ds["x"])

    assert load() == [1, 2]
    store.put("data/v.csv", b"x\n3\n4\n", mtime=1_700_000_000)  # same size, new ETag
    assert load() == [3, 4]
    store.reset_counts()
    assert load() == [3, 4]
    assert store.sent["data/v.csv"] == 0  # unchanged: served from the cache, only HEAD asked
    # a server without ETags (python -m http.server): Last-Modified versions the file
    store.etags = False
    try:
        assert load() == [3, 4]
        store.put("data/v.csv", b"x\n5\n6\n", mtime=1_700_000_100)
        assert load() == [5, 6]
    finally:
        store.etags = True


def test_parquet_over_https_reads_only_the_needed_columns_and_row_groups(https):
    url, options, store = https
    size = len(store.files["data/train.parquet"])
    assert size > 800_000
    stream = load_dataset(
        "parquet",
        data_files=f"{url}/data/train.parquet",
        split="train",
        streaming=True,
        storage_options=options,
    )
    assert stream.num_shards == 4
    store.reset_counts()
    assert [r["id"] for r in stream.select_columns(["id"])] == list(range(N))
    assert 0 < store.sent["data/train.parquet"] < 100_000, store.sent  # ids (and footers)
    assert all(asked for _, asked in store.ranges)  # every GET was a range request
    store.reset_counts()
    part = [r["id"] for r in stream.select_columns("id").shard(4, 2)]
    assert part == list(range(2000, 3000))
    assert store.sent["data/train.parquet"] < 40_000, store.sent
    store.reset_counts()
    rows = list(stream.skip(N - 2))
    assert [r["id"] for r in rows] == [N - 2, N - 1] and len(rows[0]["blob"]) == 200


def test_errors_over_https(https, tmp_path):
    url, options, store = https
    # the server's CA was not given: a TLS error, not a "missing file"
    with pytest.raises(ConnectionError, match=r"TLS certificate could not be verified.*ssl"):
        load_dataset("csv", data_files=f"{url}/data/small.csv", split="train")
    with pytest.raises(ConnectionError, match="TLS certificate"):
        load_dataset(f"{url}/data/small.csv", split="train")
    down = f"https://127.0.0.1:{closed_port()}/data/small.csv"
    with pytest.raises(ConnectionError, match=r"cannot read https://.*could not be reached"):
        load_dataset("csv", data_files=down, storage_options=options)
    with pytest.raises(
        FileNotFoundError, match=r"nothing matches 'https://127\.0\.0\.1:\d+/none\.csv'"
    ):
        load_dataset("csv", data_files=f"{url}/none.csv", storage_options=options)
    with pytest.raises(FileNotFoundError, match="no such remote file or folder"):
        load_dataset(f"{url}/none.csv", storage_options=options)
    # read-only: refused before anything is written or sent
    store.reset_counts()
    ds = Dataset.from_dict({"x": [1, 2]})
    with pytest.raises(ValueError, match=r"cannot write to 'https://.*https:// URLs are read-only"):
        ds.save_to_disk(f"{url}/saved/ds", storage_options=options)
    assert store.requests == []
    with pytest.raises(ValueError, match="https:// has no file listing; copy the folder"):
        load_from_disk(f"{url}/saved/ds", storage_options=options)
    assert store.requests == []
