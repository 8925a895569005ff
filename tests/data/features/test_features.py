import numpy as np
import pyarrow as pa
import pytest

from jaxfeed import (
    Array2D,
    Array3D,
    Array4D,
    Array5D,
    ClassLabel,
    Dataset,
    FeatureError,
    Features,
    List,
    Sequence,
    Value,
)


def test_value_dtypes_roundtrip():
    for dtype in [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "string",
        "binary",
    ]:
        assert Value(dtype).pa_type == pa.type_for_alias(dtype)
    assert Value("float").dtype == "float32"
    with pytest.raises(ValueError, match="unknown dtype 'int7'"):
        Value("int7")


def test_class_label_api():
    label = ClassLabel(names=["cat", "dog", "bird"])
    assert label.num_classes == 3
    assert label.str2int("dog") == 1
    assert label.str2int(["bird", "cat"]) == [2, 0]
    assert label.int2str(2) == "bird"
    assert label.int2str([0, 1]) == ["cat", "dog"]
    assert ClassLabel(num_classes=3).names == ["0", "1", "2"]
    with pytest.raises(ValueError, match="invalid class name 'cow'"):
        label.str2int("cow")
    with pytest.raises(ValueError, match="invalid class id 3"):
        label.int2str(3)
    with pytest.raises(ValueError, match="needs names"):
        ClassLabel()
    with pytest.raises(ValueError, match="duplicate"):
        ClassLabel(names=["a", "a"])


def test_class_label_names_file(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("neg\npos\n")
    assert ClassLabel(names_file=str(path)).names == ["neg", "pos"]


def test_class_label_encodes_names_and_ids():
    feats = Features({"label": ClassLabel(names=["neg", "pos"])})
    ds = Dataset.from_dict({"label": ["pos", 0, "neg", -1]}, features=feats)
    assert ds["label"] == [1, 0, 0, -1]


def test_features_dict_roundtrip_hf_layout():
    feats = Features(
        {
            "a": Value("int32"),
            "b": ClassLabel(names=["x", "y"]),
            "c": Array2D((2, 3), "float32"),
            "d": Array3D((None, 2, 2), "uint8"),
            "e": Sequence(Value("float64"), length=4),
            "f": List(Value("string")),
            "g": {"h": Value("bool"), "i": Sequence({"j": Value("int8")})},
            "k": Array4D((1, 2, 3, 4), "int16"),
            "l": Array5D((1, 1, 1, 1, 2), "float16"),
        }
    )
    d = feats.to_dict()
    assert d["a"] == {"_type": "Value", "dtype": "int32"}
    assert d["b"] == {"_type": "ClassLabel", "names": ["x", "y"]}
    assert d["c"] == {"_type": "Array2D", "shape": [2, 3], "dtype": "float32"}
    assert d["f"] == {"_type": "List", "feature": {"_type": "Value", "dtype": "string"}}
    assert d["e"]["length"] == 4
    assert Features.from_dict(d) == feats
    schema = feats.arrow_schema
    assert schema.field("c").type == pa.list_(pa.list_(pa.float32(), 3), 2)
    assert schema.field("e").type == pa.list_(pa.float64(), 4)
    assert Features.from_arrow_schema(schema) == feats


def test_array_feature_validation():
    with pytest.raises(ValueError, match="needs a shape of 2 dims"):
        Array2D((2, 2, 2), "int32")
    with pytest.raises(ValueError, match="only the first dimension may be None"):
        Array2D((2, None), "int32")
    with pytest.raises(ValueError, match="dtype must be one of"):
        Array2D((2, 2), "object")


def test_inference():
    ds = Dataset.from_dict(
        {
            "i": [1, 2],
            "f": [1, 2.5],
            "s": ["a", "b"],
            "b": [b"a", b"b"],
            "t": [True, False],
            "l": [[1, 2], [3]],
            "d": [{"x": 1}, {"x": 2}],
            "n": [None, None],
            "v": [np.zeros(3, np.float32), np.ones(3, np.float32)],
            "m": [np.zeros((2, 2), np.uint8), np.ones((2, 2), np.uint8)],
            "block": np.zeros((2, 4, 5, 3), np.uint8),
        }
    )
    f = ds.features
    assert f["i"] == Value("int64")
    assert f["f"] == Value("float64")
    assert f["s"] == Value("string")
    assert f["b"] == Value("binary")
    assert f["t"] == Value("bool")
    assert f["l"] == Sequence(Value("int64"))
    assert f["d"] == {"x": Value("int64")}
    assert f["n"] == Value("null")
    assert f["v"] == Sequence(Value("float32"), length=3)
    assert f["m"] == Array2D((2, 2), "uint8")
    assert f["block"] == Array3D((4, 5, 3), "uint8")


def test_fixed_shape_storage_is_zero_copy():
    block = np.arange(6 * 28 * 28, dtype=np.uint8).reshape(6, 28, 28)
    ds = Dataset.from_dict({"x": block}, features=Features({"x": Array2D((28, 28), "uint8")}))
    assert ds.data.schema.field("x").type == pa.list_(pa.list_(pa.uint8(), 28), 28)
    out = ds.with_format("numpy")[2:5]["x"]
    np.testing.assert_array_equal(out, block[2:5])
    buffer_address = ds.data.column("x").chunk(0).flatten().flatten().buffers()[1].address
    assert out.base is not None and out.__array_interface__["data"][0] == buffer_address + 2 * 784
    assert not out.flags.writeable


@pytest.mark.parametrize(
    ("features", "data", "match"),
    [
        (
            Features({"x": Array2D((2, 2), "int32")}),
            [[[1, 2], [3, 4]], [[1, 2, 3], [4, 5, 6]]],
            r"column 'x', row 1: expected an array of shape \(2, 2\)",
        ),
        (
            Features({"x": Array2D((2, 2), "uint8")}),
            [[[1, 2], [3, 4]], [[1, 2], [3, 400]]],
            "column 'x', row 1",
        ),
        (Features({"x": Array2D((1, 2), "int32")}), [[[1, 2]], [[1.5, 2]]], "column 'x', row 1"),
        (
            Features({"y": ClassLabel(names=["a", "b"])}),
            [0, 1, 2],
            "column 'y', row 2: expected a class id",
        ),
        (Features({"y": ClassLabel(names=["a", "b"])}), ["a", "c"], "column 'y', row 1"),
        (
            Features({"z": Value("int64")}),
            [1, 2, "three"],
            "column 'z', row 2: expected a int64 value",
        ),
        (Features({"z": Value("int8")}), [1, 200], "column 'z', row 1"),
        (Features({"z": Value("int32")}), [1, 2.5], "column 'z', row 1"),
        (Features({"s": Sequence(Value("int32"), length=2)}), [[1, 2], [3]], "column 's', row 1"),
        (Features({"s": Sequence(Value("int32"))}), [[1, 2], [3, "x"]], "column 's', row 1"),
        (
            Features({"s": Sequence(ClassLabel(names=["a"]))}),
            [["a"], ["a", "b"]],
            "column 's', row 1",
        ),
        (Features({"d": {"a": Value("int32")}}), [{"a": 1}, {"b": 2}], "column 'd', row 1"),
    ],
)
def test_bad_values_name_column_and_row(features, data, match):
    name = next(iter(features))
    with pytest.raises(FeatureError, match=match):
        Dataset.from_dict({name: data}, features=features)


def test_none_allowed_in_values_and_ragged_lists():
    ds = Dataset.from_dict(
        {"v": [1, None], "s": [[1], None]},
        features=Features({"v": Value("int64"), "s": Sequence(Value("int64"))}),
    )
    assert ds[1] == {"v": None, "s": None}


def test_mixed_types_in_inferred_column():
    with pytest.raises(FeatureError, match="column 'x', row 2"):
        Dataset.from_dict({"x": [1, 2, "three"]})


@pytest.mark.parametrize(
    "feature",
    [
        Sequence(Value("int32")),
        Sequence(Value("int32"), length=2),
        Sequence(Sequence(Value("int64"))),
    ],
)
def test_fractions_never_truncate_into_int_lists(feature):
    data = [[1, 2], [3, 4.5]] if not isinstance(feature.feature, Sequence) else [[[1]], [[2.5]]]
    with pytest.raises(FeatureError, match="column 's', row 1"):
        Dataset.from_dict({"s": data}, features=Features({"s": feature}))


def test_ragged_list_columns_of_one_length_read_as_zero_copy_views():
    import pyarrow as pa

    ds = Dataset.from_dict(
        {"ids": [[1, 2, 3], [4, 5, 6]], "ragged": [[1], [2, 3]]},
        features=Features({"ids": List(Value("int32")), "ragged": List(Value("int32"))}),
    )
    reader = ds._internal.reader
    assert reader.view("ids") is not None and reader.view("ragged") is None
    out = ds.with_format("numpy")[[1, 0]]
    assert out["ids"].tolist() == [[4, 5, 6], [1, 2, 3]] and out["ids"].dtype == np.int32
    assert [r.tolist() for r in out["ragged"]] == [[2, 3], [1]]
    # Chunks of different lengths: no shared view, values still right.
    other = pa.table({"ids": pa.array([[7, 8]], pa.list_(pa.int32())), "ragged": [[9]]})
    mixed = Dataset(pa.concat_tables([ds.data, other.cast(ds.data.schema)]), ds.features)
    assert mixed._internal.reader.view("ids") is None
    assert [r.tolist() for r in mixed.with_format("numpy")[:]["ids"]] == [
        [1, 2, 3],
        [4, 5, 6],
        [7, 8],
    ]
