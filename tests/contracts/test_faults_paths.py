"""Security: Image/Audio cells stored as a path only in a downloaded file are read only
from inside the dataset's folder (or a data_dir= the user gives); saved datasets embed bytes."""

import os
import shutil

import numpy as np
import PIL.Image
import pytest

from jaxfeed import Dataset, Features, Image, Value, load_dataset, load_from_disk
from jaxfeed._base.files import UnsafePathError


def _png(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(np.full((2, 2), value, np.uint8)).save(path)


def _parquet(folder, paths):
    folder.mkdir(parents=True, exist_ok=True)
    ds = Dataset.from_dict(
        {"img": [{"bytes": None, "path": p} for p in paths], "i": list(range(len(paths)))},
        features=Features({"img": Image(), "i": Value("int64")}),
    )
    ds.to_parquet(str(folder / "data.parquet"))  # the features go into the schema metadata
    return folder / "data.parquet"


def _load(folder, **kwargs):
    """The Parquet file of a downloaded folder (its images make a bare folder an imagefolder)."""
    return load_dataset("parquet", data_files=str(folder / "data.parquet"), split="train", **kwargs)


@pytest.fixture
def layout(tmp_path):
    _png(tmp_path / "secret.png", 200)  # outside the dataset
    _png(tmp_path / "ds-evil" / "x.png", 201)  # a sibling folder sharing the name's prefix
    _png(tmp_path / "ds" / "images" / "ok.png", 7)
    os.symlink(tmp_path / "secret.png", tmp_path / "ds" / "images" / "link.png")
    return tmp_path


@pytest.mark.parametrize(
    "bad",
    [
        "ABS",
        "../secret.png",
        "images/../../secret.png",
        "SIBLING",
        "images/link.png",
        "hf://x/y.png",
    ],
)
def test_paths_leading_outside_the_dataset_are_refused(layout, bad, monkeypatch):
    bad = {
        "ABS": str(layout / "secret.png"),
        "SIBLING": str(layout / "ds-evil" / "x.png"),
    }.get(bad, bad)
    _parquet(layout / "ds", ["images/ok.png", bad])
    monkeypatch.chdir(layout / "ds" / "images")  # relative paths are not read from the cwd
    with pytest.raises(UnsafePathError, match=r"data.parquet: column 'img', row 1: image path"):
        _load(layout / "ds")
    with pytest.raises(UnsafePathError, match=r"column 'img', row 1"):
        next(iter(_load(layout / "ds", streaming=True)))


def test_paths_inside_the_dataset_or_a_given_data_dir_are_read(layout, monkeypatch):
    _parquet(layout / "ds", ["images/ok.png", str(layout / "ds" / "images" / "ok.png")])
    monkeypatch.chdir(layout)
    ds = _load(layout / "ds").with_format("numpy")
    assert ds[0]["img"].tolist() == [[7, 7], [7, 7]] and ds[1]["img"][0, 0] == 7
    stream = _load(layout / "ds", streaming=True).with_format("numpy")
    assert next(iter(stream))["img"][0, 0] == 7
    # a data_dir= given on purpose is trusted: here the folder above, holding secret.png
    _parquet(layout / "ds2", [str(layout / "secret.png")])
    files = str(layout / "ds2" / "data.parquet")
    with pytest.raises(UnsafePathError):
        load_dataset("parquet", data_files=files, split="train")
    ds = load_dataset("parquet", data_files=files, data_dir=str(layout), split="train")
    assert ds.with_format("numpy")[0]["img"][0, 0] == 200


def test_saved_datasets_embed_their_media_and_refuse_foreign_paths(layout):
    _png(layout / "folder" / "cat" / "a.png", 3)
    _png(layout / "folder" / "dog" / "b.png", 4)
    folder = load_dataset("imagefolder", data_dir=str(layout / "folder"), split="train")
    folder.save_to_disk(layout / "saved")
    shutil.rmtree(layout / "folder")  # the saved dataset keeps working without the image folder
    saved = load_from_disk(layout / "saved").with_format("numpy")
    assert [int(saved[i]["image"][0, 0]) for i in range(2)] == [3, 4]
    assert saved.features["label"].names == ["cat", "dog"]
    # a saved dataset whose Arrow file names a path outside it (older saves, or a hostile one)
    hostile = Dataset.from_dict(
        {"img": [{"bytes": b"x", "path": None}]}, features=Features({"img": Image()})
    )
    hostile.save_to_disk(layout / "hostile")
    import pyarrow as pa

    data = layout / "hostile" / "data-00000-of-00001.arrow"
    table = pa.ipc.open_stream(str(data)).read_all()
    cells = pa.array([{"bytes": None, "path": str(layout / "secret.png")}], table.schema[0].type)
    with pa.OSFile(str(data), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(pa.table({"img": cells}, schema=table.schema))
    import json

    state = json.loads((layout / "hostile" / "state.json").read_text())
    state.pop("_jaxfeed_checksums")
    (layout / "hostile" / "state.json").write_text(json.dumps(state))
    with pytest.raises(UnsafePathError, match=r"column 'img', row 0: image path .* points outside"):
        load_from_disk(layout / "hostile")
    trusted = load_from_disk(layout / "hostile", data_dir=layout).with_format("numpy")
    assert trusted[0]["img"][0, 0] == 200
