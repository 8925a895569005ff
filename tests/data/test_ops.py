import numpy as np
import pyarrow as pa
import pytest

from jaxfeed import (
    Array2D,
    ClassLabel,
    Dataset,
    Features,
    List,
    Value,
    concatenate_datasets,
    load_from_disk,
)


@pytest.fixture
def ds():
    images = np.arange(20 * 4, dtype=np.uint8).reshape(20, 2, 2)
    return Dataset.from_dict(
        {"image": images, "label": [i % 4 for i in range(20)], "id": list(range(20))},
        features=Features(
            {
                "image": Array2D((2, 2), "uint8"),
                "label": ClassLabel(num_classes=4),
                "id": Value("int64"),
            }
        ),
    )


def test_select_and_shuffle_are_index_mappings(ds):
    sel = ds.select([5, 1, 7])
    assert sel.data is ds.data and sel["id"] == [5, 1, 7]
    np.testing.assert_array_equal(
        sel.with_format("numpy")[:]["image"][0], ds.with_format("numpy")[5]["image"]
    )
    sh = ds.shuffle(seed=3)
    assert sorted(sh["id"]) == list(range(20)) and sh["id"] != list(range(20))
    assert sh["id"] == ds.shuffle(seed=3)["id"]
    nested = sh.select(range(2, 5))
    assert nested["id"] == sh["id"][2:5]
    assert ds.select(range(3, 6)).data.num_rows == 3  # contiguous: a zero-copy slice
    with pytest.raises(IndexError, match="row 20 is out of range"):
        ds.select([20])


def test_shuffled_reads_gather_in_bulk(ds, monkeypatch):
    sh = ds.shuffle(seed=0).with_format("numpy")
    calls = []
    view = sh._internal.reader.view("image")
    real = view.take
    monkeypatch.setattr(
        view, "take", lambda idx, out=None: calls.append(len(idx)) or real(idx, out)
    )
    batch = sh[:8]
    assert calls == [8]
    np.testing.assert_array_equal(
        batch["image"], ds.with_format("numpy")[sh._internal.indices[:8]]["image"]
    )


def test_flatten_indices(ds):
    flat = ds.shuffle(seed=1).flatten_indices()
    assert flat._internal.indices is None and flat["id"] == ds.shuffle(seed=1)["id"]


def test_filter(ds):
    assert ds.filter(lambda r: r["label"] == 2)["id"] == [2, 6, 10, 14, 18]
    even = ds.with_format("numpy").filter(lambda b: b["id"] % 2 == 0, batched=True, batch_size=7)
    assert even["id"].tolist() == list(range(0, 20, 2))
    assert ds.filter(lambda r, i: i < 3, with_indices=True)["id"] == [0, 1, 2]
    with pytest.raises(ValueError, match="one bool per row"):
        ds.filter(lambda b: [True], batched=True)


def test_map_row_and_batched(ds):
    out = ds.map(lambda r: {"double": r["id"] * 2})
    assert out["double"][:3] == [0, 2, 4] and out.features["double"] == Value("int64")
    out = ds.with_format("numpy").map(
        lambda b: {"image": b["image"].astype(np.float32) / 255.0}, batched=True, batch_size=6
    )
    # Fractions do not fit the input's Array2D uint8: as in `datasets`, the column gets the
    # variable-length lists inferred for arrays.
    assert out.features["image"] == List(List(Value("float32")))
    np.testing.assert_allclose(
        out[:]["image"], ds.with_format("numpy")[:]["image"] / 255.0, rtol=1e-6
    )
    out = ds.map(lambda r: {"x": r["id"]}, remove_columns=["image", "label"])
    assert out.column_names == ["id", "x"]
    assert ds.shuffle(seed=0).map(lambda r: {})["id"] == ds.shuffle(seed=0)["id"]


def test_map_can_change_row_count_when_columns_removed(ds):
    out = ds.with_format("numpy").map(
        lambda b: {"id": np.repeat(b["id"], 2)}, batched=True, remove_columns=ds.column_names
    )
    assert out.num_rows == 40
    with pytest.raises(ValueError, match="must remove the other columns"):
        ds.with_format("numpy").map(lambda b: {"y": np.repeat(b["id"], 2)}, batched=True)


def test_map_on_disk_writes_arrow_next_to_it(ds, tmp_path):
    ds.save_to_disk(tmp_path / "saved")
    loaded = load_from_disk(tmp_path / "saved")
    out = loaded.map(lambda r: {"y": r["id"] + 1})
    files = sorted(p.name for p in (tmp_path / "saved").glob("cache-map-*.arrow"))
    assert len(files) == 1
    assert out["y"][:3] == [1, 2, 3]
    assert loaded.cleanup_cache_files() == 1


def test_train_test_split(ds):
    split = ds.train_test_split(test_size=0.25, seed=0)
    assert split.num_rows == {"train": 15, "test": 5}
    assert sorted(list(split["train"]["id"]) + list(split["test"]["id"])) == list(range(20))
    strat = ds.train_test_split(test_size=8, seed=1, stratify_by_column="label")
    assert sorted(strat["test"]["label"]) == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match=r"test_size=1\.5"):
        ds.train_test_split(test_size=1.5)


def test_column_ops(ds):
    assert ds.rename_column("id", "idx").column_names == ["image", "label", "idx"]
    assert ds.remove_columns("image").column_names == ["label", "id"]
    assert ds.select_columns(["id"]).column_names == ["id"]
    cast = ds.cast_column("id", Value("float32"))
    assert cast.features["id"] == Value("float32") and cast.data.column("id").type == pa.float32()
    names = Dataset.from_dict({"y": ["a", "b", "a"]}).cast_column("y", ClassLabel(names=["a", "b"]))
    assert names["y"] == [0, 1, 0]
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in the dataset"):
        ds.remove_columns("nope")
    with pytest.raises(ValueError, match="column 'y', row 2"):
        Dataset.from_dict({"y": ["a", "b", "c"]}).cast_column("y", ClassLabel(names=["a", "b"]))


def test_concatenate(ds):
    both = concatenate_datasets([ds.select([0, 1]), ds.select([5])])
    assert both["id"] == [0, 1, 5]
    wide = concatenate_datasets([ds.select_columns("id"), ds.select_columns("label")], axis=1)
    assert wide.column_names == ["id", "label"]
    with pytest.raises(
        ValueError, match="dataset 1 differs from an earlier dataset in column 'id'"
    ):
        concatenate_datasets([ds, ds.cast_column("id", Value("float64"))])


def test_from_generator():
    def rows(n):
        for i in range(n):
            yield {"x": i, "s": str(i)}

    ds = Dataset.from_generator(rows, gen_kwargs={"n": 2500})
    assert ds.num_rows == 2500 and ds[2499] == {"x": 2499, "s": "2499"}
    with pytest.raises(TypeError, match="item 0 is a int"):
        Dataset.from_generator(lambda: iter([1]))
