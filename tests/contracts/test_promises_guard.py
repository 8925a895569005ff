"""Bugs an audit of the promises found the suite missing: each test here failed on one
plausible one-line bug (kept in ``tools/mutation/mutations.py``) and passes without it."""

import itertools
import json
import os
import struct

import numpy as np
import PIL.Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import (
    ClassLabel,
    DataLoader,
    Dataset,
    Features,
    load_dataset,
    load_from_disk,
    split_dataset_by_node,
)
from jaxfeed._base.files import UnsafePathError
from jaxfeed.data.formats import batches as batches_module
from jaxfeed.data.formats.batches import file_batches
from jaxfeed.data.iterable import sources as iterable_sources

SMALL_TABLES = 1024  # bytes per table read from a file: a few hundred rows make several tables


@pytest.fixture
def small_tables(monkeypatch):
    """Files are read in tables of about 1 KiB (the first unit of a stream too)."""
    monkeypatch.setattr(batches_module, "BATCH_BYTES", SMALL_TABLES)
    monkeypatch.setattr(iterable_sources, "FIRST_BYTES", SMALL_TABLES)


def write_units(folder, fmt, sizes):
    """One file per size (a stream unit each), x counting on across files."""
    folder.mkdir(exist_ok=True)
    paths, start = [], 0
    for i, n in enumerate(sizes):
        x = np.arange(start, start + n)
        start += n
        table = pa.table({"x": x, "s": [f"row-{v:05d}" for v in x]})
        path = folder / f"part-{i}.{fmt}"
        if fmt == "csv":
            path.write_text("x,s\n" + "".join(f"{v},row-{v:05d}\n" for v in x))
        elif fmt == "jsonl":
            path.write_text(
                "".join(json.dumps({"x": int(v), "s": f"row-{v:05d}"}) + "\n" for v in x)
            )
        else:
            pq.write_table(table, path)  # one row group: a unit larger than a table
        paths.append(str(path))
    return paths


def xs(stream):
    return [int(r["x"]) for r in stream]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_resume_inside_the_second_unit_read_in_several_tables(tmp_path, small_tables, fmt):
    paths = write_units(tmp_path, fmt, [230, 250, 170])
    assert len(list(file_batches(paths[1]))) >= 3  # the second unit arrives in several tables
    stream = load_dataset(fmt if fmt != "jsonl" else "json", data_files=paths, split="train",
                          streaming=True)  # fmt: skip
    full = xs(stream)
    assert full == list(range(650))
    stop = 230 + 190  # inside the second unit, past several of its tables
    head, it = [], iter(stream)
    for _ in range(stop):
        head.append(int(next(it)["x"]))
    state = json.loads(json.dumps(stream.state_dict()))
    again = load_dataset(fmt if fmt != "jsonl" else "json", data_files=paths, split="train",
                         streaming=True)  # fmt: skip
    again.load_state_dict(state)
    assert head + xs(again) == full


def test_split_by_node_over_units_in_several_tables_is_disjoint_and_complete(
    tmp_path, small_tables
):
    paths = write_units(tmp_path, "csv", [301, 263, 287])  # 3 units, tables of odd sizes
    stream = load_dataset("csv", data_files=paths, split="train", streaming=True)
    for world in (2, 4):  # dealt out by unit (3 is no multiple of 2); by row (3 units < 4)
        parts = [xs(split_dataset_by_node(stream, rank, world)) for rank in range(world)]
        seen = sum(parts, [])
        assert len(seen) == len(set(seen)) == 851, world  # disjoint
        assert sorted(seen) == list(range(851)), world  # every row
        assert all(p == sorted(p) for p in parts)
    # by unit: 0 and 2 to rank 0, 1 to rank 1; by row: every 4th row of the whole stream
    assert xs(split_dataset_by_node(stream, 1, 2)) == list(range(301, 564))
    for rank in range(4):
        assert xs(split_dataset_by_node(stream, rank, 4)) == list(range(rank, 851, 4)), rank


def test_stream_transform_draws_do_not_depend_on_prefetch(tmp_path):
    paths = write_units(tmp_path, "parquet", [40, 40])
    stream = load_dataset("parquet", data_files=paths, split="train", streaming=True)

    def noisy(batch, rng):
        return {"x": batch["x"], "noise": rng.normal(size=len(batch["x"])).astype(np.float32)}

    runs = {}
    for prefetch in (0, 2):
        loader = DataLoader(stream, 8, columns=["x"], transform=noisy, prefetch=prefetch, seed=4)
        runs[prefetch] = [{k: np.asarray(v) for k, v in b.items()} for b in loader]
    assert len(runs[0]) == len(runs[2]) == 10
    for a, b in zip(runs[0], runs[2], strict=True):
        np.testing.assert_array_equal(a["x"], b["x"])
        np.testing.assert_array_equal(a["noise"], b["noise"])
    noise = [b["noise"] for b in runs[2]]
    assert all(not np.array_equal(a, b) for a, b in itertools.pairwise(noise))


def test_batches_kept_from_a_process_worker_stay_intact():
    rng = np.random.default_rng(0)
    ds = Dataset.from_dict(
        {"x": rng.random((96, 64), dtype=np.float32), "id": np.arange(96, dtype=np.int32)}
    )
    inline = [{k: np.asarray(v).copy() for k, v in b.items()} for b in DataLoader(ds, 8)]
    same = lambda row: row  # noqa: E731 (work for the worker process: the loader then uses it)
    loader = DataLoader(ds, 8, num_workers=1, row_transform=same)
    # all alive to the end; the second epoch comes from the worker alone (the first batches of
    # the first are built in this process while it starts)
    kept = [b for _ in range(2) for b in loader]
    assert len(kept) == 2 * len(inline) == 24
    for a, b in zip(kept, inline + inline, strict=True):
        np.testing.assert_array_equal(np.asarray(a["x"]), b["x"])
        np.testing.assert_array_equal(np.asarray(a["id"]), b["id"])


def test_num_proc_after_shuffle_select_and_filter_equals_one_process():
    ds = Dataset.from_dict({"x": np.arange(3000), "s": [f"r{i}" for i in range(3000)]})
    view = ds.shuffle(seed=1).select(range(100, 2900)).filter(lambda r: r["x"] % 3 != 0)

    def tag(batch, indices):
        return {"y": [x * 10 + i % 7 for x, i in zip(batch["x"], indices, strict=True)]}

    kwargs = dict(batched=True, batch_size=300, with_indices=True)
    one, two = view.map(tag, **kwargs), view.map(tag, num_proc=2, **kwargs)
    assert two["x"] == one["x"] and two["y"] == one["y"] and two["s"] == one["s"]
    keep = lambda r, i: r["x"] % 4 != 1 and i % 5 != 2  # noqa: E731
    assert (
        view.filter(keep, with_indices=True, num_proc=2)["x"]
        == view.filter(keep, with_indices=True)["x"]
    )


def test_a_byte_flipped_inside_a_large_tensor_is_refused(tmp_path):
    from flax import nnx

    from jaxfeed.models import MLP
    from jaxfeed.serve.export import ExportError, export, load_exported

    folder = export(MLP(3, (16,), hidden=(64,), rngs=nnx.Rngs(0)), tmp_path / "model")
    weights = (folder / "model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", weights[:8])
    header = json.loads(weights[8 : 8 + size])
    name, largest = max(
        ((k, v) for k, v in header.items() if k != "__metadata__"),
        key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0],
    )
    start, end = largest["data_offsets"]
    assert end - start > 1024, name  # more than the first KiB of a tensor
    flipped = bytearray(weights)
    flipped[8 + size + (start + end) // 2] ^= 0x01
    (folder / "model.safetensors").write_bytes(bytes(flipped))
    with pytest.raises(ExportError, match=f"weight '{name}' does not match its recorded checksum"):
        load_exported(folder)


def png(path, value=0):
    PIL.Image.fromarray(np.full((4, 4), value, np.uint8)).save(path)


def test_a_sibling_folder_sharing_the_prefix_is_outside(tmp_path):
    root, evil = tmp_path / "ds", tmp_path / "ds-evil"
    Dataset.from_dict({"x": [1, 2]}).save_to_disk(root)
    evil.mkdir()
    data = next(root.glob("*.arrow"))
    (evil / data.name).write_bytes(data.read_bytes())
    state = json.loads((root / "state.json").read_text())
    state["_data_files"] = [{"filename": f"../ds-evil/{data.name}"}]
    (root / "state.json").write_text(json.dumps(state))
    with pytest.raises(UnsafePathError, match="points outside the dataset folder"):
        load_from_disk(root)

    images = tmp_path / "images"
    images.mkdir()
    png(images / "a.png")
    png(evil / "b.png")
    (images / "metadata.csv").write_text("file_name,score\na.png,1\n../ds-evil/b.png,2\n")
    with pytest.raises(UnsafePathError, match="points outside the dataset folder"):
        load_dataset("imagefolder", data_dir=str(images))

    linked = tmp_path / "linked"
    linked.mkdir()
    png(linked / "a.png")
    os.symlink(evil / "b.png", linked / "b.png")
    with pytest.raises(UnsafePathError, match="outside the dataset folder"):
        load_dataset("imagefolder", data_dir=str(linked))


def test_a_stored_class_id_equal_to_num_classes_is_refused(tmp_path):
    features = Features({"label": ClassLabel(names=["no", "yes"])})
    table = pa.table({"label": [0, 1, 2]}).replace_schema_metadata(features.arrow_schema.metadata)
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(ValueError, match=r"row 2: class id 2 outside \[-1, 2\)"):
        load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train")
    with pytest.raises(ValueError, match=r"row 1: expected a class id in \[0, 2\) or -1.*got 2"):
        Dataset.from_dict({"label": [0, 2]}).cast(features)
    assert Dataset.from_dict({"label": [0, 1]}).cast(features).features == features


def test_the_command_trains_on_an_image_folder_with_metadata_csv(tmp_path, capsys):
    from jaxfeed.cli import main
    from jaxfeed.recipes import data as datamod

    folder = tmp_path / "pets"
    rows = ["file_name,caption,score"]
    for c, name in enumerate(["cat", "dog"]):
        (folder / name).mkdir(parents=True)
        for i in range(16):
            png(folder / name / f"{i}.png", 40 * c + i)
            rows.append(f"{name}/{i}.png,a {name},{c + i / 10}")
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n")
    source = datamod.detect(str(folder))
    assert source.kind == "image folder"
    train = source.data["train"]
    assert train.num_rows == 32 and {"image", "label", "caption", "score"} <= set(train.features)
    out = tmp_path / "run"
    code = main(["train", "--data", str(folder), "--model", "mlp", "--epochs", "1",
                 "--batch-size", "8", "--val-split", "0.25", "--out", str(out)])  # fmt: skip
    stdout, stderr = capsys.readouterr()
    assert code == 0, stdout + stderr
    assert f"data {folder}: detected image folder" in stdout
    config = json.loads((out / "config.json").read_text())
    assert "image" in json.dumps(config) and (out / "checkpoints").is_dir()
