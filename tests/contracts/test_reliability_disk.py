"""Saved datasets: nothing outside the folder is read, features are checked against the
data, and ``verify=True`` detects any changed byte."""

import json

import numpy as np
import pyarrow as pa
import pytest

from jaxfeed import Array2D, ClassLabel, Dataset, DatasetDict, Features, Image, load_from_disk
from jaxfeed._base.files import ChecksumError, UnsafePathError
from jaxfeed.data.features import DecodeError
from jaxfeed.data.formats.validate import FeatureMismatchError


def save(path, n=4):
    ds = Dataset.from_dict(
        {"y": [i % 2 for i in range(n)]}, features=Features({"y": ClassLabel(names=["a", "b"])})
    )
    ds.save_to_disk(path)
    return ds


def edit_json(file, change):
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))


@pytest.mark.parametrize("entry", ["../outside/data-00000-of-00001.arrow", "ABS"])
def test_state_json_data_files_outside_the_folder_are_refused(tmp_path, entry):
    save(tmp_path / "outside", n=6)
    save(tmp_path / "ds")
    if entry == "ABS":
        entry = str(tmp_path / "outside" / "data-00000-of-00001.arrow")

    def point_out(state):
        state["_data_files"] = [{"filename": entry}]

    edit_json(tmp_path / "ds" / "state.json", point_out)
    with pytest.raises(UnsafePathError, match=r"data file .*points outside the dataset folder"):
        load_from_disk(tmp_path / "ds")


def test_symlinked_data_file_leading_outside_is_refused(tmp_path):
    save(tmp_path / "outside", n=6)
    save(tmp_path / "ds")
    data = tmp_path / "ds" / "data-00000-of-00001.arrow"
    data.unlink()
    data.symlink_to(tmp_path / "outside" / "data-00000-of-00001.arrow")
    with pytest.raises(UnsafePathError, match=r"data-00000-of-00001\.arrow"):
        load_from_disk(tmp_path / "ds")


@pytest.mark.parametrize("split", ["../other", ".", "..", "", "a/b", 3])
def test_dataset_dict_splits_outside_or_recursive_are_refused(tmp_path, split):
    save(tmp_path / "other", n=6)
    DatasetDict({"train": save(tmp_path / "x")}).save_to_disk(tmp_path / "dd")
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": [split]}))
    with pytest.raises((UnsafePathError, ValueError), match=r"split|splits"):
        load_from_disk(tmp_path / "dd")


def test_split_folder_holding_another_dataset_dict_is_refused(tmp_path):
    DatasetDict({"train": save(tmp_path / "x")}).save_to_disk(tmp_path / "dd")
    DatasetDict({"train": save(tmp_path / "y")}).save_to_disk(tmp_path / "dd" / "nested")
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["nested"]}))
    with pytest.raises(FileNotFoundError, match=r"split 'nested' has no saved dataset"):
        load_from_disk(tmp_path / "dd")


def test_class_ids_outside_the_declared_names_are_refused(tmp_path):
    Dataset.from_dict({"y": list(range(10))}).save_to_disk(tmp_path / "ds")

    def claim_two_classes(info):
        info["features"]["y"] = {"_type": "ClassLabel", "names": ["a", "b"]}

    edit_json(tmp_path / "ds" / "dataset_info.json", claim_two_classes)
    with pytest.raises(
        FeatureMismatchError, match=r"dataset_info.json: column 'y', row 2: class id 2"
    ):
        load_from_disk(tmp_path / "ds")


def test_array_shape_contradicted_by_the_data_is_refused(tmp_path):
    Dataset.from_dict({"x": [[1, 2, 3, 4], [5, 6, 7]]}).save_to_disk(tmp_path / "ds")

    def claim_2x2(info):
        info["features"]["x"] = Array2D((2, 2), "int64").to_dict()

    edit_json(tmp_path / "ds" / "dataset_info.json", claim_2x2)
    with pytest.raises(FeatureMismatchError, match=r"column 'x'"):
        load_from_disk(tmp_path / "ds")


def test_verify_detects_a_flipped_byte_and_a_changed_info(tmp_path):
    ds = Dataset.from_dict({"x": np.arange(1000, dtype=np.int64)})
    ds.save_to_disk(tmp_path / "ds")
    assert load_from_disk(tmp_path / "ds", verify=True)["x"][:3] == [0, 1, 2]
    data = tmp_path / "ds" / "data-00000-of-00001.arrow"
    raw = bytearray(data.read_bytes())
    raw[-100] ^= 0x01  # inside the values: the plain load cannot tell
    data.write_bytes(bytes(raw))
    assert load_from_disk(tmp_path / "ds")["x"] != list(range(1000))
    with pytest.raises(
        ChecksumError, match=r"data-00000-of-00001.arrow differs from what was saved"
    ):
        load_from_disk(tmp_path / "ds", verify=True)


def test_truncated_data_file_is_refused_even_without_verify(tmp_path):
    Dataset.from_dict({"x": np.arange(1000, dtype=np.int64)}).save_to_disk(tmp_path / "ds")
    data = tmp_path / "ds" / "data-00000-of-00001.arrow"
    data.write_bytes(data.read_bytes()[:-16])
    with pytest.raises(ChecksumError, match=r"bytes but .* were saved"):
        load_from_disk(tmp_path / "ds")


def test_edited_state_or_info_fail_verification(tmp_path):
    save(tmp_path / "ds")

    def rename(info):
        info["features"]["y"]["names"] = ["a", "c"]

    edit_json(tmp_path / "ds" / "dataset_info.json", rename)
    assert load_from_disk(tmp_path / "ds").features["y"].names == ["a", "c"]
    with pytest.raises(ChecksumError, match=r"dataset_info\.json"):
        load_from_disk(tmp_path / "ds", verify=True)
    save(tmp_path / "ds2")
    edit_json(tmp_path / "ds2" / "state.json", lambda s: s.update(_format_type="numpy"))
    with pytest.raises(ChecksumError, match=r"state\.json differs"):
        load_from_disk(tmp_path / "ds2", verify=True)


def test_verify_without_recorded_checksums_says_so(tmp_path):
    save(tmp_path / "ds")

    def forget(state):
        del state["_jaxfeed_checksums"]

    edit_json(tmp_path / "ds" / "state.json", forget)
    assert load_from_disk(tmp_path / "ds").num_rows == 4
    with pytest.raises(ChecksumError, match="has no checksums"):
        load_from_disk(tmp_path / "ds", verify=True)


def test_verify_covers_every_split(tmp_path):
    DatasetDict({"train": save(tmp_path / "a"), "test": save(tmp_path / "b")}).save_to_disk(
        tmp_path / "dd"
    )
    assert load_from_disk(tmp_path / "dd", verify=True).num_rows == {"train": 4, "test": 4}
    data = tmp_path / "dd" / "test" / "data-00000-of-00001.arrow"
    raw = bytearray(data.read_bytes())
    raw[-20] ^= 0x40
    data.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match=r"test/data-00000"):
        load_from_disk(tmp_path / "dd", verify=True)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"{not json", "state.json .* is not valid JSON"),
        (b"\xff\xfe", "state.json .* is not valid JSON"),
        (b"[1, 2]", "must hold a JSON object"),
        (b'{"_data_files": "x"}', "'_data_files' must be a non-empty list"),
        (b'{"_data_files": [{"name": "x"}]}', "needs a 'filename'"),
    ],
)
def test_malformed_state_json_is_one_clear_error(tmp_path, content, match):
    save(tmp_path / "ds")
    (tmp_path / "ds" / "state.json").write_bytes(content)
    with pytest.raises(ValueError, match=match):
        load_from_disk(tmp_path / "ds")


def test_arrow_file_that_is_not_arrow_names_the_file(tmp_path):
    save(tmp_path / "ds")
    state = tmp_path / "ds" / "state.json"
    edit_json(state, lambda s: s.pop("_jaxfeed_checksums"))
    (tmp_path / "ds" / "data-00000-of-00001.arrow").write_bytes(b"garbage" * 10)
    with pytest.raises(ValueError, match=r"cannot read the Arrow data file .*data-00000"):
        load_from_disk(tmp_path / "ds")


def test_every_shard_is_checksummed(tmp_path):
    Dataset.from_dict({"x": list(range(10))}).save_to_disk(tmp_path / "ds", num_shards=3)
    assert load_from_disk(tmp_path / "ds", verify=True)["x"] == list(range(10))
    shard = tmp_path / "ds" / "data-00001-of-00003.arrow"
    raw = bytearray(shard.read_bytes())
    raw[-30] ^= 0x02
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match=r"data-00001-of-00003\.arrow differs"):
        load_from_disk(tmp_path / "ds", verify=True)


@pytest.mark.parametrize("name", ["state.json", "dataset_info.json"])
def test_json_files_linked_from_outside_are_refused(tmp_path, name):
    save(tmp_path / "outside", n=6)
    save(tmp_path / "ds")
    (tmp_path / "ds" / name).unlink()
    (tmp_path / "ds" / name).symlink_to(tmp_path / "outside" / name)
    with pytest.raises(UnsafePathError, match=name.replace(".", r"\.")):
        load_from_disk(tmp_path / "ds")


def test_split_folder_linked_from_outside_is_refused(tmp_path):
    save(tmp_path / "outside", n=6)
    DatasetDict({"train": save(tmp_path / "x")}).save_to_disk(tmp_path / "dd")
    import shutil

    shutil.rmtree(tmp_path / "dd" / "train")
    (tmp_path / "dd" / "train").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafePathError, match="split 'train'"):
        load_from_disk(tmp_path / "dd")


def test_image_with_neither_bytes_nor_path_names_the_row(tmp_path):
    Dataset.from_dict(
        {"img": [{"bytes": b"x", "path": None}] * 2}, features=Features({"img": Image()})
    ).save_to_disk(tmp_path / "ds")
    table = pa.ipc.open_stream(str(tmp_path / "ds" / "data-00000-of-00001.arrow")).read_all()
    empty = pa.StructArray.from_arrays(
        [pa.array([None, None], pa.binary()), pa.array(["x.png", None])], names=["bytes", "path"]
    )
    path = str(tmp_path / "ds" / "data-00000-of-00001.arrow")
    with pa.OSFile(path, "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(pa.table({"img": empty}, schema=table.schema))
    edit_json(tmp_path / "ds" / "state.json", lambda s: s.pop("_jaxfeed_checksums"))
    ds = load_from_disk(tmp_path / "ds").with_format("numpy")
    with pytest.raises(DecodeError, match=r"column 'img', row 1.*neither bytes nor a path"):
        ds[1]
