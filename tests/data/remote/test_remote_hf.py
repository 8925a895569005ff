"""``hf://`` paths through ``huggingface_hub.HfFileSystem``, against a fake Hub on 127.0.0.1
(``remote_servers.FakeHub``): a stand-in that implements only the read endpoints the client calls
(repo info, tree listing, paths-info, resolve with byte ranges), not the Hub itself. The endpoint
reaches the client only through ``storage_options={"endpoint": ...}``."""

import io

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import Dataset, DatasetDict, load_dataset, load_from_disk
from remote_servers import FakeHub, closed_port, serve

hub_constants = pytest.importorskip("huggingface_hub.constants")

N = 4000
REPO = "user/repo"


def parquet_bytes(table: pa.Table, **kwargs) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **kwargs)
    return out.getvalue()


def saved_folder(dd: DatasetDict, tmp_path) -> dict[str, bytes]:
    """The files of ``dd.save_to_disk``, by path relative to the folder."""
    dd.save_to_disk(tmp_path / "saved")
    return {
        p.relative_to(tmp_path / "saved").as_posix(): p.read_bytes()
        for p in sorted((tmp_path / "saved").rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A fake Hub serving dataset ``user/repo``; yields (storage_options, the repo's files)."""
    rng = np.random.default_rng(0)
    big = pa.table(
        {"id": np.arange(N), "blob": pa.array([rng.bytes(200) for _ in range(N)], pa.binary())}
    )
    saved = DatasetDict(
        {"train": Dataset.from_dict({"y": [1, 2]}), "test": Dataset.from_dict({"y": [3]})}
    )
    files = {
        "README.md": b"---\nlicense: mit\n---\n# a fake dataset\n",
        "data/train-00000-of-00002.parquet": parquet_bytes(pa.table({"x": [0, 1]})),
        "data/train-00001-of-00002.parquet": parquet_bytes(pa.table({"x": [10, 11]})),
        "data/test-00000-of-00001.parquet": parquet_bytes(pa.table({"x": [99]})),
        "extra/rows.csv": b"x,label\n1,a\n2,b\n",
        "extra/rows.jsonl": b'{"x": 5}\n{"x": 6}\n',
        "big/train.parquet": parquet_bytes(big, row_group_size=1000),
        **{
            f"saved/{k}": v
            for k, v in saved_folder(saved, tmp_path_factory.mktemp("saved")).items()
        },
    }
    private = {"data/train.csv": b"x\n41\n42\n"}
    fake = FakeHub({REPO: files, "user/private": private}, tokens={"user/private": "hf_secret"})
    mp = pytest.MonkeyPatch()
    mp.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    with serve(fake) as url:
        options = {"endpoint": url, "token": False}
        yield options, fake.repos[REPO]
    mp.undo()


def hf_fs(options):
    """The cached HfFileSystem jaxfeed is using (to drop its listing cache)."""
    return fsspec.filesystem("hf", **options)


def test_data_files_on_the_hub(hub, tmp_path):
    options, _ = hub
    cache = str(tmp_path / "cache")
    one = load_dataset(
        "parquet",
        data_files="hf://datasets/user/repo/data/train-00000-of-00002.parquet",
        split="train",
        storage_options=options,
        cache_dir=cache,
    )
    assert list(one["x"]) == [0, 1]
    dd = load_dataset(
        "parquet",
        data_files={
            "train": "hf://datasets/user/repo/data/train-*.parquet",
            "test": "hf://datasets/user/repo@main/data/test-*.parquet",
        },
        storage_options=options,
        cache_dir=cache,
    )
    assert list(dd["train"]["x"]) == [0, 1, 10, 11] and list(dd["test"]["x"]) == [99]
    every = load_dataset(
        "parquet",
        data_files="hf://datasets/user/repo/data/*.parquet",
        split="train",
        storage_options=options,
    )
    assert sorted(every["x"]) == [0, 1, 10, 11, 99]
    rows = load_dataset(
        "csv", data_files="hf://datasets/user/repo/extra/rows.csv", storage_options=options
    )
    assert rows["train"].to_dict() == {"x": [1, 2], "label": ["a", "b"]}
    lines = load_dataset(
        "json",
        data_files="hf://datasets/user/repo/extra/*.jsonl",
        split="train",
        storage_options=options,
    )
    assert list(lines["x"]) == [5, 6]


def test_a_repo_folder_as_the_path(hub, tmp_path):
    options, _ = hub
    dd = load_dataset(
        "hf://datasets/user/repo/data", storage_options=options, cache_dir=str(tmp_path)
    )
    assert dd.num_rows == {"train": 4, "test": 1}  # splits from the file names, as on the Hub
    assert sorted(dd["train"]["x"]) == [0, 1, 10, 11]
    saved = load_from_disk("hf://datasets/user/repo/saved", storage_options=options)
    assert isinstance(saved, DatasetDict) and saved.num_rows == {"train": 2, "test": 1}
    assert list(saved["train"]["y"]) == [1, 2]
    # load_dataset of a saved folder on the Hub loads it as saved
    again = load_dataset("hf://datasets/user/repo/saved", storage_options=options)
    assert again.num_rows == {"train": 2, "test": 1}


def test_a_changed_file_is_converted_again(hub, tmp_path):
    options, files = hub
    cache = str(tmp_path / "cache")
    files.put("changing/v.parquet", parquet_bytes(pa.table({"x": [1, 2]})))
    hf_fs(options).invalidate_cache()

    def load():
        ds = load_dataset(
            "parquet",
            data_files="hf://datasets/user/repo/changing/v.parquet",
            split="train",
            storage_options=options,
            cache_dir=cache,
        )
        return list(ds["x"])

    assert load() == [1, 2]
    before = len(files.files["changing/v.parquet"])
    files.put("changing/v.parquet", parquet_bytes(pa.table({"x": [3, 4]})))
    assert len(files.files["changing/v.parquet"]) == before  # same size: only blob_id differs
    hf_fs(options).invalidate_cache()  # as a new process would see it
    assert load() == [3, 4]
    files.reset_counts()
    assert load() == [3, 4]
    assert files.sent["changing/v.parquet"] == 0  # unchanged: the cache, no download


def test_parquet_on_the_hub_reads_only_the_needed_columns_and_row_groups(hub):
    options, files = hub
    assert len(files.files["big/train.parquet"]) > 800_000
    stream = load_dataset(
        "parquet",
        data_files="hf://datasets/user/repo/big/train.parquet",
        split="train",
        streaming=True,
        storage_options=options,
    )
    assert stream.num_shards == 4
    files.reset_counts()
    assert [r["id"] for r in stream.select_columns(["id"])] == list(range(N))
    assert 0 < files.sent["big/train.parquet"] < 100_000, files.sent  # ids (and footers)
    assert all(asked for _, asked in files.ranges)  # range requests only
    files.reset_counts()
    assert [r["id"] for r in stream.select_columns("id").shard(4, 3)] == list(range(3000, N))
    assert files.sent["big/train.parquet"] < 40_000, files.sent


def test_missing_repos_and_files(hub):
    options, _ = hub
    with pytest.raises(FileNotFoundError, match="repository not found"):
        load_dataset(
            "parquet", data_files="hf://datasets/user/nope/data/*.parquet", storage_options=options
        )
    with pytest.raises(
        FileNotFoundError, match=r"nothing matches 'hf://datasets/user/repo/no\.csv"
    ):
        load_dataset("csv", data_files="hf://datasets/user/repo/no.csv", storage_options=options)
    with pytest.raises(FileNotFoundError, match="no such remote file or folder"):
        load_dataset("hf://datasets/user/repo/nothing", storage_options=options)


def test_a_private_repo_needs_the_token(hub):
    options, _ = hub
    url = "hf://datasets/user/private/data/train.csv"
    anonymous = {"endpoint": options["endpoint"], "token": False}
    with pytest.raises(PermissionError, match=r"HTTP 401 \(check the credentials"):
        load_dataset("csv", data_files=url, storage_options=anonymous)
    # load_dataset(token=) reaches hf:// URLs (and only them), as in `datasets`
    ds = load_dataset(
        "csv", data_files=url, split="train", storage_options=anonymous, token="hf_secret"
    )
    assert list(ds["x"]) == [41, 42]
    # per-protocol storage_options, as `datasets` accepts them
    nested = {"hf": {"endpoint": options["endpoint"], "token": "hf_secret"}, "s3": {"anon": True}}
    ds = load_dataset("csv", data_files=url, split="train", storage_options=nested)
    assert list(ds["x"]) == [41, 42]


def test_an_unreachable_hub_is_a_connection_error():
    options = {"endpoint": f"http://127.0.0.1:{closed_port()}", "token": False}
    for pattern in ("hf://datasets/user/repo/a.csv", "hf://datasets/user/repo/*.csv"):
        with pytest.raises(ConnectionError, match=r"cannot read hf://.*could not be reached"):
            load_dataset("csv", data_files=pattern, storage_options=options)
