import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from jaxfeed import Array2D, ClassLabel, Dataset, DatasetDict, Features, Value


@pytest.fixture
def ds():
    feats = Features(
        {
            "image": Array2D((3, 2), "uint8"),
            "label": ClassLabel(names=["a", "b", "c"]),
            "text": Value("string"),
        }
    )
    images = np.arange(10 * 6, dtype=np.uint8).reshape(10, 3, 2)
    return Dataset.from_dict(
        {
            "image": images,
            "label": [i % 3 for i in range(10)],
            "text": [f"t{i}" for i in range(10)],
        },
        features=feats,
    )


def test_basic_properties(ds):
    assert len(ds) == ds.num_rows == 10
    assert ds.column_names == ["image", "label", "text"]
    assert ds.shape == (10, 3)
    assert "num_rows: 10" in repr(ds)


def test_python_access(ds):
    row = ds[1]
    assert row == {"image": [[6, 7], [8, 9], [10, 11]], "label": 1, "text": "t1"}
    assert ds[-1]["text"] == "t9"
    batch = ds[2:4]
    assert batch["label"] == [2, 0] and batch["text"] == ["t2", "t3"]
    assert ds[[0, 9]]["text"] == ["t0", "t9"]
    assert ds[np.array([3, 1])]["text"] == ["t3", "t1"]
    assert ds[::4]["text"] == ["t0", "t4", "t8"]
    assert ds["text"][:2] == ["t0", "t1"]
    assert [r["text"] for r in ds][:3] == ["t0", "t1", "t2"]


def test_numpy_access(ds):
    np_ds = ds.with_format("numpy")
    batch = np_ds[np.array([4, 0, 7])]
    assert batch["image"].shape == (3, 3, 2) and batch["image"].dtype == np.uint8
    np.testing.assert_array_equal(batch["label"], [1, 0, 1])
    np.testing.assert_array_equal(np_ds["image"][4], np.arange(24, 30).reshape(3, 2))
    assert list(batch["text"]) == ["t4", "t0", "t7"]
    assert np_ds[0]["label"] == 0


def test_index_errors(ds):
    with pytest.raises(IndexError, match="row 10 is out of range for a dataset of 10 rows"):
        ds[10]
    with pytest.raises(IndexError, match="row -11"):
        ds[-11]
    with pytest.raises(IndexError, match="row 12 is out of range"):
        ds[[1, 12]]
    with pytest.raises(KeyError, match="column 'nope' is not in the dataset"):
        ds["nope"]
    with pytest.raises(TypeError, match="cannot index a dataset with float"):
        ds[1.5]
    assert ds[[]] == {"image": [], "label": [], "text": []}


def test_iter_exact_batches(ds):
    sizes = [len(b["label"]) for b in ds.iter(batch_size=4)]
    assert sizes == [4, 4, 2]
    sizes = [len(b["label"]) for b in ds.iter(batch_size=4, drop_last_batch=True)]
    assert sizes == [4, 4]
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        next(ds.iter(batch_size=0))


def test_iter_across_chunks():
    table = pa.concat_tables([pa.table({"x": list(range(i * 3, i * 3 + 3))}) for i in range(4)])
    ds = Dataset.from_arrow(table).with_format("numpy")
    assert ds.data.column("x").num_chunks == 4
    batches = [b["x"].tolist() for b in ds.iter(batch_size=5)]
    assert batches == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    np.testing.assert_array_equal(ds[[11, 0, 5, 6]]["x"], [11, 0, 5, 6])


def test_format_api(ds):
    assert ds.format == {
        "type": None,
        "format_kwargs": {},
        "columns": ds.column_names,
        "output_all_columns": False,
    }
    j = ds.with_format("numpy", columns=["label"])
    assert list(j[0]) == ["label"]
    j = ds.with_format("numpy", columns="label", output_all_columns=True)
    row = j[0]
    assert isinstance(row["label"], np.integer) and row["text"] == "t0"
    ds.set_format("numpy")
    assert ds.format["type"] == "numpy"
    ds.reset_format()
    assert ds.format["type"] is None
    with pytest.raises(
        ValueError,
        match=r"unknown format type 'torch'; valid types are None, 'python', 'numpy', 'jax'",
    ):
        ds.with_format("torch")
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in the dataset"):
        ds.with_format("jax", columns=["nope"])
    with pytest.raises(TypeError, match="unexpected arguments for the jax format"):
        ds.with_format("jax", colour="red")


def test_arrow_and_pandas_formats(ds):
    table = ds.with_format("arrow")[2:4]
    assert isinstance(table, pa.Table) and table.num_rows == 2
    df = ds.with_format("pandas")[:3]
    assert isinstance(df, pd.DataFrame) and list(df["text"]) == ["t0", "t1", "t2"]


def test_columns_must_match_in_length():
    with pytest.raises(
        ValueError, match="all columns must have the same number of rows; got 'a': 3, 'b': 2"
    ):
        Dataset.from_dict({"a": [1, 2, 3], "b": [1, 2]})


def test_features_and_data_must_agree():
    with pytest.raises(ValueError, match=r"columns \['b'\] are not in the given features"):
        Dataset.from_dict({"a": [1], "b": [2]}, features=Features({"a": Value("int64")}))
    with pytest.raises(ValueError, match=r"features \['c'\] have no column"):
        Dataset.from_dict({"a": [1]}, features=Features({"a": Value("int64"), "c": Value("int64")}))


def test_from_arrow_keeps_features_in_metadata(ds):
    again = Dataset.from_arrow(ds.data)
    assert again.features == ds.features
    plain = Dataset.from_arrow(pa.table({"x": pa.array([1, 2], pa.int16())}))
    assert plain.features == Features({"x": Value("int16")})
    cast = Dataset.from_arrow(pa.table({"x": [1, 2]}), features=Features({"x": Value("float32")}))
    assert cast.data.column("x").type == pa.float32()


def test_from_pandas_and_list():
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    ds = Dataset.from_pandas(df)
    # pandas 3 str columns are large_string in Arrow, and `datasets` 5 keeps that type
    assert ds.features == Features({"a": Value("int64"), "b": Value("large_string")})
    assert ds[1] == {"a": 2, "b": "y"}
    ds = Dataset.from_list([{"a": 1, "b": None}, {"a": 2, "b": "z", "c": 0}])
    assert ds.to_dict() == {"a": [1, 2], "b": [None, "z"]}  # the first row names the columns


def test_datasetdict():
    dds = DatasetDict.from_dict({"train": {"x": [1, 2, 3]}, "test": {"x": [4]}})
    assert dds.num_rows == {"train": 3, "test": 1}
    assert dds.column_names == {"train": ["x"], "test": ["x"]}
    dds.set_format("numpy")
    assert dds["train"].format["type"] == "numpy"
    dds.reset_format()
    assert dds["test"][0] == {"x": 4}
    with pytest.raises(TypeError, match=r"should be of type `Dataset`.*split 'x'"):
        DatasetDict({"x": [1, 2]})
