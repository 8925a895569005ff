"""Folder and built-in datasets through the Arrow cache: written batch by batch, keyed by the
files, reused, invalidated, and the same rows as the in-RAM path (``keep_in_memory=True``)."""

import gzip
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pyarrow as pa
import pytest

import jaxfeed.data.load.builtin as builtin
import jaxfeed.data.load.folder as folder_module
from jaxfeed import ClassLabel, Features, Image, Value, load_dataset
from jaxfeed.data.load.folder import IMAGE_EXTENSIONS

BOUND_MB = 16  # measured: 3.3 MB for 16,000 files (19 MB when built in RAM before); 8,000 here


def png(path, value=0, size=(4, 4)):
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(np.full((*size, 3), value, np.uint8)).save(path)


def image_tree(root):
    """Two splits, labels by sub-folder, names whose sort order is tricky, a nested folder and a
    metadata file in train."""
    for i, rel in enumerate(
        [
            "train/cat/1.png",
            "train/cat/10.png",
            "train/cat/2.png",
            "train/cat/a b.png",
            "train/cat/a-b.png",
            "train/cat/a/x.png",  # nested: its folder "a" is its label, as before
            "train/dog/Z.png",
            "train/dog/z.png",
            "test/cat/3.png",
            "test/dog/4.jpg",
        ]
    ):
        png(root / rel, value=10 * i)
    (root / "train/cat/notes.txt").write_text("not an image")
    lines = ["file_name,caption"]
    for rel in ("cat/1.png", "cat/10.png", "cat/2.png", "cat/a b.png", "cat/a-b.png"):
        lines.append(f"{rel},{rel.upper()}")
    lines += ["cat/a/x.png,nested", "dog/Z.png,upper z", "dog/z.png,lower z"]
    (root / "train/metadata.csv").write_text("\n".join(lines) + "\n")


def rglob_order(folder):
    """The paths the in-RAM implementation listed: ``sorted(rglob)`` of the media files."""
    found = folder.rglob("*")
    return [str(p) for p in sorted(found) if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS]


def same_rows(a, b):
    assert a.features == b.features
    assert a.data.combine_chunks().equals(b.data.combine_chunks())


def datasets_in(cache):
    return sorted((cache / "datasets").iterdir()) if (cache / "datasets").is_dir() else []


def test_folder_splits_are_cached_with_the_rows_of_the_in_memory_path(tmp_path, monkeypatch):
    root = tmp_path / "data"
    image_tree(root)
    monkeypatch.setattr(folder_module, "BATCH_ROWS", 3)  # several record batches per split
    cache = tmp_path / "cache"
    dd = load_dataset("imagefolder", data_dir=str(root), cache_dir=str(cache))
    kept = load_dataset(
        "imagefolder", data_dir=str(root), cache_dir=str(cache), keep_in_memory=True
    )
    assert len(datasets_in(cache)) == 2  # one per split; keep_in_memory wrote nothing
    for split in ("train", "test"):
        same_rows(dd[split], kept[split])
        paths = [r["path"] for r in dd[split].cast_column("image", Image(decode=False))["image"]]
        assert paths == rglob_order(root / split)
    train = dd["train"]
    assert train.data.column("image").num_chunks == 3  # 8 rows, 3 at a time
    assert train.features == Features(
        {
            "image": Image(),
            "caption": Value("string"),
            "label": ClassLabel(names=["a", "cat", "dog"]),
        }
    )
    assert train["caption"][:5] == ["CAT/1.PNG", "CAT/10.PNG", "CAT/2.PNG", "nested", "CAT/A B.PNG"]
    labels = [train.features["label"].int2str(i) for i in train["label"]]
    assert labels == ["cat", "cat", "cat", "a", "cat", "cat", "dog", "dog"]
    assert train.with_format("numpy")[6]["image"][0, 0, 0] == 60  # train/dog/Z.png decodes


def test_folder_cache_is_reused_and_invalidated_by_any_file_change(tmp_path, monkeypatch):
    root = tmp_path / "data"
    for label in ("cat", "dog"):
        for i in range(3):
            png(root / label / f"{i}.png", value=i)
    cache = tmp_path / "cache"

    def load(**kwargs):
        return load_dataset(
            "imagefolder", data_dir=str(root), split="train", cache_dir=str(cache), **kwargs
        )

    assert load().num_rows == 6 and len(datasets_in(cache)) == 1

    def no_build(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    with monkeypatch.context() as m:
        m.setattr(folder_module, "_SplitBuilder", no_build)  # nor the metadata read
        allocated = pa.total_allocated_bytes()
        again = load()
        assert pa.total_allocated_bytes() - allocated < 1024  # memory-mapped, not read
    assert again.num_rows == 6 and len(datasets_in(cache)) == 1

    # each change builds a new entry and removes the one of the folder's previous version
    png(root / "dog" / "3.png", value=3)  # a file added
    assert load()["label"] == [0, 0, 0, 1, 1, 1, 1] and len(datasets_in(cache)) == 1
    stamp = os.stat(root / "cat" / "0.png").st_mtime_ns
    os.utime(root / "cat" / "0.png", ns=(stamp, stamp + 1_000_000))  # same size, touched
    assert load().num_rows == 7 and len(datasets_in(cache)) == 1
    (root / "dog" / "3.png").unlink()  # a file removed
    assert load().num_rows == 6 and len(datasets_in(cache)) == 1
    (root / "metadata.csv").write_text(
        "file_name,n\n" + "".join(f"{c}/{i}.png,{i}\n" for c in ("cat", "dog") for i in range(3))
    )
    assert load()["n"] == [0, 1, 2, 0, 1, 2] and len(datasets_in(cache)) == 1
    typed = load(
        features=Features(
            {"image": Image(), "n": Value("float32"), "label": ClassLabel(names=["cat", "dog"])}
        )
    )
    assert typed["n"][:2] == [0.0, 1.0] and len(datasets_in(cache)) == 2
    # paths are stored as given: a relative data_dir keeps relative paths (and its own cache)
    monkeypatch.chdir(tmp_path)
    relative = load_dataset("imagefolder", data_dir="data", split="train", cache_dir=str(cache))
    raw = relative.cast_column("image", Image(decode=False))["image"]
    assert raw[0]["path"] == os.path.join("data", "cat", "0.png") and raw[0]["bytes"] is None
    assert len(datasets_in(cache)) == 3


def test_a_folder_changing_while_it_is_loaded_leaves_no_cache(tmp_path, monkeypatch):
    root = tmp_path / "data"
    png(root / "cat" / "0.png")
    real = folder_module._scan

    def scan_then_add(*args, **kwargs):
        found = real(*args, **kwargs)
        png(root / "cat" / "1.png")
        return found

    monkeypatch.setattr(folder_module, "_scan", scan_then_add)
    with pytest.raises(RuntimeError, match="changed while it was being loaded"):
        load_dataset("imagefolder", data_dir=str(root), cache_dir=str(tmp_path / "cache"))
    assert datasets_in(tmp_path / "cache") == []


def write_idx(path, array):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def test_builtin_datasets_are_converted_block_by_block_and_reused(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    images = {"train": rng.integers(0, 256, (9, 28, 28)), "t10k": rng.integers(0, 256, (4, 28, 28))}
    for prefix, array in images.items():
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", array)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", np.arange(len(array)) % 10)
    monkeypatch.setattr(builtin, "BLOCK_BYTES", 2 * 784)  # two images at a time
    cache = tmp_path / "cache"
    dd = load_dataset("mnist", data_dir=str(tmp_path), cache_dir=str(cache))
    kept = load_dataset("mnist", data_dir=str(tmp_path), keep_in_memory=True)
    assert dd["train"].data.column("image").num_chunks == 5
    for split, prefix in (("train", "train"), ("test", "t10k")):
        same_rows(dd[split], kept[split])
        np.testing.assert_array_equal(dd[split].with_format("numpy")[:]["image"], images[prefix])
    assert len(datasets_in(cache)) == 2

    def no_read(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    with monkeypatch.context() as m:
        m.setattr(builtin.IdxReader, "blocks", no_read)
        assert load_dataset("mnist", data_dir=str(tmp_path), cache_dir=str(cache)).num_rows == {
            "train": 9,
            "test": 4,
        }
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([9, 8, 7, 6]))
    changed = load_dataset("mnist", data_dir=str(tmp_path), split="test", cache_dir=str(cache))
    assert changed["label"] == [9, 8, 7, 6] and len(datasets_in(cache)) == 2  # replaced


def test_cifar10_blocks_name_the_row_of_a_bad_label(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    expected = {}
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        chw = rng.integers(0, 256, (5, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, 5, dtype=np.uint8)
        np.concatenate([labels[:, None], chw.reshape(5, -1)], axis=1).tofile(tmp_path / name)
        expected[name] = (chw.transpose(0, 2, 3, 1), labels)
    monkeypatch.setattr(builtin, "BLOCK_BYTES", 2 * 3073)
    cache = tmp_path / "cache"
    test = load_dataset("cifar10", data_dir=str(tmp_path), split="test", cache_dir=str(cache))
    np.testing.assert_array_equal(
        test.with_format("numpy")[:]["img"], expected["test_batch.bin"][0]
    )
    assert test["label"] == expected["test_batch.bin"][1].tolist()
    raw = bytearray((tmp_path / "test_batch.bin").read_bytes())
    raw[3 * 3073] = 77  # the label of row 3, in the second block
    (tmp_path / "test_batch.bin").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"test_batch\.bin: label 77 at row 3 is outside 0..9"):
        load_dataset("cifar10", data_dir=str(tmp_path), cache_dir=str(cache))


PROBE = textwrap.dedent(
    """
    import json, os, sys, tempfile
    def rss(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    import jaxfeed
    import jaxfeed.data.load.folder
    jaxfeed.data.load.folder.BATCH_ROWS = 1000
    # warm up on a one-file folder, so modules imported lazily are not counted as data
    tiny = tempfile.mkdtemp()
    os.makedirs(tiny + "/d/a")
    open(tiny + "/d/a/x.png", "wb").close()
    jaxfeed.load_dataset("imagefolder", data_dir=tiny + "/d", cache_dir=tiny)
    base = rss("VmRSS:")
    ds = jaxfeed.load_dataset("imagefolder", data_dir=sys.argv[1], split="train",
                              cache_dir=sys.argv[2])
    peak = rss("VmHWM:") - base
    raw = ds.cast_column("image", jaxfeed.Image(decode=False))
    print(json.dumps({"peak_mb": peak, "rows": ds.num_rows, "labels": ds.features["label"].names,
                      "last": raw[-1]["image"], "pixel": int(ds.with_format("numpy")[0]["image"][0, 0, 0])}))
    """
)


def many_files(root, classes, per_class):
    """``classes * per_class`` files of 64 KB each (sparse: no disk), one real PNG first."""
    for c in range(classes):
        folder = root / f"class{c:02d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            fd = os.open(folder / f"img{i:06d}.png", os.O_CREAT | os.O_WRONLY)
            os.ftruncate(fd, 64 << 10)
            os.close(fd)
    png(root / "class00" / "img000000.png", value=7)


@pytest.mark.slow
def test_folder_peak_memory_does_not_grow_with_the_number_of_files(tmp_path):
    """A folder of 8,000 files (500 MB of declared bytes) loads within the bound, and with about
    the peak of one ten times smaller: memory is one batch of rows, not one row per file."""
    small, large = tmp_path / "small", tmp_path / "large"
    many_files(small, 8, 100)
    many_files(large, 8, 1000)
    total = sum(p.stat().st_size for p in large.rglob("*.png"))
    assert total > 10 * BOUND_MB << 20
    out = {}
    for name, root in (("small", small), ("large", large)):
        run = [sys.executable, "-c", PROBE, str(root), str(tmp_path / "cache")]
        done = subprocess.run(run, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        out[name] = json.loads(done.stdout)
    assert out["large"]["rows"] == 8_000 and out["large"]["pixel"] == 7
    assert out["large"]["labels"] == [f"class{c:02d}" for c in range(8)]
    assert out["large"]["last"] == {"bytes": None, "path": str(large / "class07/img000999.png")}
    assert out["large"]["peak_mb"] < BOUND_MB, out
    assert out["large"]["peak_mb"] - out["small"]["peak_mb"] < 4, out


def test_a_text_folder_is_one_text_per_file_labelled_by_its_sub_folder(tmp_path):
    """``load_text_folder`` (the command's folder of texts by class, issue 63's D23): split
    folders, whole files (line breaks kept), sorted classes; texts outside a class folder and a
    file that is not UTF-8 refused naming them."""
    from jaxfeed.data.load.folder import load_text_folder

    for path, text in [("train/pos/a.txt", "good\nfilm\n"), ("train/neg/b.txt", "dull"),
                       ("test/pos/c.txt", "fine"), ("train/neg/skip.png", "")]:  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    splits = load_text_folder(tmp_path)
    assert sorted(splits) == ["test", "train"]
    assert splits["train"]["text"][:] == ["dull", "good\nfilm\n"]
    assert splits["train"]["label"][:] == [0, 1] and splits["test"]["label"][:] == [1]
    assert splits["train"].features["label"].names == ["neg", "pos"]
    (tmp_path / "train" / "neg" / "bad.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ValueError, match=r"cannot read .*bad\.txt: not UTF-8 text"):
        load_text_folder(tmp_path)
    (tmp_path / "train" / "neg" / "bad.txt").unlink()
    (tmp_path / "train" / "loose.txt").write_text("no class")
    with pytest.raises(ValueError, match=r"lie directly in .*one sub-folder per class"):
        load_text_folder(tmp_path)
