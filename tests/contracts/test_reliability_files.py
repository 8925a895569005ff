"""Data files: features stored in Parquet / Arrow metadata are checked against the data."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import load_dataset
from jaxfeed.data.formats.validate import FeatureMismatchError


def with_features(table, features):
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    return table.replace_schema_metadata(meta)


def test_parquet_classlabel_over_out_of_range_ids_is_refused(tmp_path):
    table = with_features(
        pa.table({"label": list(range(1000))}),
        {"label": {"_type": "ClassLabel", "names": ["a", "b"]}},
    )
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(
        FeatureMismatchError, match=r"train\.parquet: column 'label', row 2: class id 2 outside"
    ):
        load_dataset(str(tmp_path / "train.parquet"))


def test_parquet_array2d_over_an_int_column_is_refused(tmp_path):
    table = with_features(
        pa.table({"x": [1, 2, 3]}),
        {"x": {"_type": "Array2D", "shape": [2, 2], "dtype": "int64"}},
    )
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(
        FeatureMismatchError, match=r"column 'x', row 0: an array of shape \(2, 2\)"
    ):
        load_dataset(str(tmp_path))


def test_arrow_array2d_with_a_short_row_is_refused(tmp_path):
    table = with_features(
        pa.table({"x": [[[1, 2], [3, 4]], [[5, 6], [7]]]}),
        {"x": {"_type": "Array2D", "shape": [2, 2], "dtype": "int64"}},
    )
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    with pytest.raises(FeatureMismatchError, match=r"t\.arrow: column 'x', row 1: .*holds 1"):
        load_dataset(str(tmp_path / "t.arrow"))


def test_sequence_length_and_nested_class_ids_are_checked(tmp_path):
    table = with_features(
        pa.table({"s": [[0, 1], [1, 5]]}),
        {"s": {"_type": "Sequence", "feature": {"_type": "ClassLabel", "names": ["a", "b"]}}},
    )
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(FeatureMismatchError, match=r"column 's', row 1: class id 5"):
        load_dataset(str(tmp_path))
    table = with_features(
        pa.table({"s": [[0.5, 1.0], [2.0]]}),
        {
            "s": {
                "_type": "Sequence",
                "feature": {"_type": "Value", "dtype": "float32"},
                "length": 2,
            }
        },
    )
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(FeatureMismatchError, match=r"column 's', row 1: a list of 2 items"):
        load_dataset(str(tmp_path))


def test_valid_stored_features_load_unchanged(tmp_path):
    table = with_features(
        pa.table({"label": [0, 1, -1], "x": [[[1, 2], [3, 4]]] * 3}),
        {
            "label": {"_type": "ClassLabel", "names": ["a", "b"]},
            "x": {"_type": "Array2D", "shape": [2, 2], "dtype": "int64"},
        },
    )
    pq.write_table(table, tmp_path / "train.parquet")
    ds = load_dataset(str(tmp_path), split="train").with_format("numpy")
    assert ds[:]["x"].shape == (3, 2, 2) and ds.features["label"].names == ["a", "b"]


def test_invalid_stored_features_name_the_file(tmp_path):
    table = with_features(pa.table({"y": [0]}), {"y": {"_type": "ClassLabel", "names": ["a", "a"]}})
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(ValueError, match=r"train\.parquet: the features stored .* invalid"):
        load_dataset(str(tmp_path))


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("t.csv", b"a,a,b\n1,2,3\n", r"t\.csv: column 'a' appears 2 times"),
        ("t.csv", b"a,b\n1,\xff\xfe\n", r"t\.csv: column 'b' is not valid UTF-8"),
        ("t.csv", b"\xb6,b\n1,2\n", r"t\.csv: .*UTF-8"),
        ("t.jsonl", b'{"a": "\xe6x"}\n', r"t\.jsonl: column 'a' holds corrupt data"),
        ("t.json", b'[{"a": "\xe6x"}]', r"t\.json"),
    ],
)
def test_text_files_with_bad_bytes_name_the_file(tmp_path, name, content, match):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=match):
        load_dataset(str(tmp_path / name))


def test_arrow_file_with_corrupt_offsets_names_the_file(tmp_path):
    table = pa.table({"s": ["a", "bb", "ccc"]})
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    raw = bytearray((tmp_path / "t.arrow").read_bytes())
    offsets = bytes(pa.array([0, 1, 3, 6], pa.int32()).buffers()[1])[:16]
    at = bytes(raw).index(offsets)
    raw[at + 8 : at + 12] = (1000).to_bytes(4, "little")  # offset past the data
    (tmp_path / "t.arrow").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"t\.arrow.*column 's' holds corrupt data"):
        load_dataset(str(tmp_path / "t.arrow"))


def test_hf_sequence_of_dicts_stored_as_a_struct_of_lists_is_accepted(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "answers": datasets.Sequence(
                {"text": datasets.Value("string"), "start": datasets.Value("int32")}
            ),
            "label": datasets.ClassLabel(names=["a", "b"]),
        }
    )
    hf = datasets.Dataset.from_dict(
        {"answers": [{"text": ["x", "y"], "start": [1, 2]}], "label": [1]}, features=features
    )
    hf.to_parquet(str(tmp_path / "train.parquet"))
    ds = load_dataset(str(tmp_path), split="train")
    assert ds[0]["answers"] == {"text": ["x", "y"], "start": [1, 2]}


def test_corrupt_parquet_page_names_the_file(tmp_path):
    pq.write_table(pa.table({"a": list(range(100))}), tmp_path / "train.parquet")
    raw = bytearray((tmp_path / "train.parquet").read_bytes())
    raw[4] ^= 0xFF  # the first page header
    (tmp_path / "train.parquet").write_bytes(bytes(raw))
    with pytest.raises((OSError, ValueError), match=r"cannot read parquet file .*train\.parquet"):
        load_dataset(str(tmp_path))


@pytest.mark.parametrize("data_files", [[{"split": "train"}], {"train": [3]}])
def test_data_files_entries_that_are_not_paths_are_one_clear_error(data_files):
    with pytest.raises(ValueError, match=r"data_files for split 'train': entries are paths"):
        load_dataset("csv", data_files=data_files)
