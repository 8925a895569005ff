import gzip
import io
import json

import jax.numpy as jnp
import numpy as np
import PIL.Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from jaxfeed import (
    Array2D,
    Array3D,
    Audio,
    ClassLabel,
    DatasetDict,
    Features,
    Image,
    IterableDataset,
    Value,
    load_dataset,
)
from jaxfeed.data.load.hub import DatasetNotCachedError


def png(array):
    buffer = io.BytesIO()
    PIL.Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


# ------------------------------------------------------------------------------ files
def test_parquet_csv_json_arrow_files(tmp_path):
    table = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "t.csv").write_text("a,b\n1,x\n2,y\n3,z\n")
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    (tmp_path / "t.json").write_text(json.dumps(table.to_pylist()))
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    for name in ("t.parquet", "t.csv", "t.jsonl", "t.json", "t.arrow"):
        ds = load_dataset(str(tmp_path / name), split="train")
        assert ds["a"] == [1, 2, 3] and ds["b"] == ["x", "y", "z"], name
    dd = load_dataset(
        "csv", data_files={"train": str(tmp_path / "t.csv"), "test": str(tmp_path / "t.csv")}
    )
    assert isinstance(dd, DatasetDict) and dd.num_rows == {"train": 3, "test": 3}
    assert load_dataset("json", data_files=[str(tmp_path / "t.jsonl")])["train"].num_rows == 3
    ds = load_dataset(
        "csv",
        data_files=str(tmp_path / "t.csv"),
        split="train",
        features=Features({"a": Value("float32"), "b": Value("string")}),
    )
    assert ds.features["a"] == Value("float32")


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot find dataset 'no/such/thing/here'"):
        load_dataset("no/such/thing/here")
    with pytest.raises(FileNotFoundError, match="nothing matches"):
        load_dataset("csv", data_files=str(tmp_path / "missing-*.csv"))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"cannot read parquet file .*bad.parquet"):
        load_dataset(str(tmp_path / "bad.parquet"))


def test_data_files_naming_a_folder_or_nothing_is_refused_by_name(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("hi\n")
    for fmt in ("text", "csv"):
        with pytest.raises(FileNotFoundError, match=r"'train': '.*texts' matches only folders"):
            load_dataset(fmt, data_files=str(folder))
        for empty in ("", [""], {"train": " "}):
            with pytest.raises(ValueError, match=r"split 'train': an empty path"):
                load_dataset(fmt, data_files=empty)
        for empty in ([], {"train": []}):
            with pytest.raises(ValueError, match=r"data_files for split 'train' is an empty list"):
                load_dataset(fmt, data_files=empty)
    assert load_dataset("text", data_files=str(folder / "*"), split="train")["text"] == ["hi"]


def test_split_syntax(tmp_path):
    pq.write_table(pa.table({"x": list(range(10))}), tmp_path / "train.parquet")
    pq.write_table(pa.table({"x": list(range(100, 104))}), tmp_path / "test.parquet")
    assert load_dataset(str(tmp_path), split="train[:30%]")["x"] == [0, 1, 2]
    assert load_dataset(str(tmp_path), split="train[-2:]")["x"] == [8, 9]
    assert load_dataset(str(tmp_path), split="train[2:4]+test[:1]")["x"] == [2, 3, 100]
    with pytest.raises(
        ValueError, match=r"unknown split 'validation'; this dataset has \['test', 'train'\]"
    ):
        load_dataset(str(tmp_path), split="validation")


# ------------------------------------------------------------------------------ Hub layout
def hub_folder(tmp_path, datasets):
    """A folder as `huggingface_hub` downloads ylecun/mnist, written by HF `datasets` itself."""
    rng = np.random.default_rng(0)
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(i) for i in range(10)])}
    )
    root = tmp_path / "mnist"
    (root / "mnist").mkdir(parents=True)
    pixels = {}
    for split, n in (("train", 6), ("test", 4)):
        arrays = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        pixels[split] = arrays
        hf = datasets.Dataset.from_dict(
            {"image": [{"bytes": png(a), "path": None} for a in arrays], "label": list(range(n))},
            features=features,
        )
        hf.to_parquet(str(root / "mnist" / f"{split}-00000-of-00001.parquet"))
    return root, pixels


def test_hub_layout_keeps_image_and_classlabel(tmp_path):
    datasets = pytest.importorskip("datasets")
    root, pixels = hub_folder(tmp_path, datasets)
    dd = load_dataset(str(root))
    assert dd.num_rows == {"train": 6, "test": 4}
    assert dd["train"].features == Features(
        {"image": Image(), "label": ClassLabel(names=[str(i) for i in range(10)])}
    )
    ds = dd.with_format("jax")
    row = ds["train"][0]
    assert row["image"].shape == (28, 28) and row["image"].dtype == jnp.uint8
    assert row["label"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(ds["test"][:4]["image"]), pixels["test"])


def test_readme_configs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pq.write_table(pa.table({"x": [1]}), tmp_path / "a" / "one.parquet")
    pq.write_table(pa.table({"x": [2]}), tmp_path / "b" / "two.parquet")
    (tmp_path / "README.md").write_text(
        "---\nconfigs:\n- config_name: first\n  default: true\n  data_files:\n  - split: train\n    path: a/*.parquet\n"
        "- config_name: second\n  data_files: b/*.parquet\n---\n# Card\n"
    )
    assert load_dataset(str(tmp_path), split="train")["x"] == [1]
    assert load_dataset(str(tmp_path), "second", split="train")["x"] == [2]
    with pytest.raises(ValueError, match="unknown config 'third'"):
        load_dataset(str(tmp_path), "third")


def write_cached_repo(cache, repo_id, files):
    folder = cache / f"datasets--{repo_id.replace('/', '--')}"
    snapshot = folder / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(snapshot.name)
    for rel, table in files.items():
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, snapshot / rel)


def test_hub_repo_offline_uses_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    write_cached_repo(
        tmp_path,
        "someone/tiny",
        {
            "data/train-00000-of-00001.parquet": pa.table({"x": [1, 2]}),
            "data/test-00000-of-00001.parquet": pa.table({"x": [3]}),
        },
    )
    dd = load_dataset("someone/tiny", cache_dir=str(tmp_path))
    assert dd.num_rows == {"train": 2, "test": 1}
    with pytest.raises(
        DatasetNotCachedError,
        match=r"dataset 'someone/missing' is not in the local cache .* HF_HUB_OFFLINE=1",
    ):
        load_dataset("someone/missing", cache_dir=str(tmp_path))


# ------------------------------------------------------------------------------ folders
def test_imagefolder_with_splits_labels_and_metadata(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 3), ("test", 2)):
        for label in ("cat", "dog"):
            folder = tmp_path / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                PIL.Image.fromarray(rng.integers(0, 256, (5, 5, 3), dtype=np.uint8)).save(
                    folder / f"{i}.png"
                )
    dd = load_dataset("imagefolder", data_dir=str(tmp_path))
    assert dd.num_rows == {"train": 6, "test": 4}
    assert dd["train"].features == Features(
        {"image": Image(), "label": ClassLabel(names=["cat", "dog"])}
    )
    assert sorted(dd["test"]["label"]) == [0, 0, 1, 1]
    assert dd["train"].with_format("numpy")[:6]["image"].shape == (6, 5, 5, 3)
    flat = tmp_path / "flat"
    flat.mkdir()
    PIL.Image.fromarray(np.zeros((3, 3), np.uint8)).save(flat / "a.jpg")
    (flat / "metadata.csv").write_text("file_name,caption,score\na.jpg,hello,0.5\n")
    ds = load_dataset("imagefolder", data_dir=str(flat), split="train")
    assert ds.column_names == ["image", "caption", "score"]
    assert ds[0]["caption"] == "hello" and ds[0]["score"] == 0.5


def test_audiofolder(tmp_path):
    for label in ("yes", "no"):
        (tmp_path / label).mkdir()
        soundfile.write(tmp_path / label / "a.wav", np.zeros(100, np.float32), 16000)
        soundfile.write(tmp_path / label / "b.flac", np.zeros(50, np.int16), 16000)
    ds = load_dataset("audiofolder", data_dir=str(tmp_path), split="train")
    assert ds.features == Features({"audio": Audio(), "label": ClassLabel(names=["no", "yes"])})
    lengths = sorted(len(r["audio"]["array"]) for r in ds)
    assert lengths == [50, 50, 100, 100]


# ------------------------------------------------------------------------------ built-in
def test_digits():
    dd = load_dataset("digits")
    assert dd.num_rows == {"train": 1437, "test": 360}
    assert dd["train"].features == Features(
        {"image": Array2D((8, 8), "uint8"), "label": ClassLabel(names=[str(i) for i in range(10)])}
    )
    train = dd["train"].with_format("numpy")[:]
    assert train["image"].max() == 255 and train["image"].dtype == np.uint8
    counts = np.bincount(dd["test"].with_format("numpy")["label"], minlength=10)
    assert counts.min() >= 35  # stratified
    assert dd["test"]["label"] == load_dataset("digits", split="test")["label"]  # fixed split
    images = load_dataset("digits", "image", split="test").with_format("numpy")
    np.testing.assert_array_equal(images[:5]["image"], dd["test"].with_format("numpy")[:5]["image"])


def write_idx(path, array, gz):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files(tmp_path, gz):
    rng = np.random.default_rng(0)
    images = {"train": rng.integers(0, 256, (7, 28, 28)), "t10k": rng.integers(0, 256, (3, 28, 28))}
    for prefix, arr in images.items():
        suffix = ".gz" if gz else ""
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte{suffix}", arr, gz)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte{suffix}", np.arange(len(arr)) % 10, gz)
    dd = load_dataset("mnist", data_dir=str(tmp_path))
    assert dd.num_rows == {"train": 7, "test": 3}
    np.testing.assert_array_equal(dd["test"].with_format("numpy")[:]["image"], images["t10k"])
    assert dd["train"]["label"] == [0, 1, 2, 3, 4, 5, 6]
    fashion = load_dataset("fashion_mnist", data_dir=str(tmp_path))
    assert fashion["train"].features["label"].names[0] == "T - shirt / top"


def test_mnist_missing_files_say_what_is_expected(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"mnist: missing train-images-idx3-ubyte.*download them from"
    ):
        load_dataset("mnist", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="needs data_dir="):
        load_dataset("cifar10")


def test_cifar10_binary(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    expected = {}
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        chw = rng.integers(0, 256, (2, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, 2, dtype=np.uint8)
        records = np.concatenate([labels[:, None], chw.reshape(2, -1)], axis=1)
        records.tofile(folder / name)
        expected[name] = (chw.transpose(0, 2, 3, 1), labels)
    dd = load_dataset("cifar10", data_dir=str(tmp_path))
    assert dd.num_rows == {"train": 10, "test": 2}
    assert dd["train"].features["img"] == Array3D((32, 32, 3), "uint8")
    test = dd["test"].with_format("numpy")[:]
    np.testing.assert_array_equal(test["img"], expected["test_batch.bin"][0])
    np.testing.assert_array_equal(test["label"], expected["test_batch.bin"][1])
    assert dd["train"].features["label"].names[:2] == ["airplane", "automobile"]


# ------------------------------------------------------------------------------ streaming
def test_streaming(tmp_path):
    pq.write_table(pa.table({"x": list(range(25))}), tmp_path / "train.parquet", row_group_size=10)
    ids = load_dataset(str(tmp_path), split="train", streaming=True)
    assert isinstance(ids, IterableDataset)
    assert [r["x"] for r in ids.take(3)] == [0, 1, 2]
    batches = [b["x"].tolist() for b in ids.with_format("numpy").iter(batch_size=7)]
    assert [len(b) for b in batches] == [7, 7, 7, 4] and [x for b in batches for x in b] == list(
        range(25)
    )
    assert sorted(r["x"] for r in ids.shuffle(seed=0, buffer_size=5)) == list(range(25))
    assert [r["y"] for r in ids.skip(23).map(lambda r: {"y": r["x"] * 2})] == [46, 48]
    dd = load_dataset("digits", streaming=True)
    assert next(iter(dd["train"].with_format("jax").iter(batch_size=4)))["image"].shape == (4, 8, 8)
