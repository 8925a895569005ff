"""Imagefolder / audiofolder: metadata cannot reach outside the folder, is read as a typed
table, and cannot silently replace paths or folder labels."""

import json

import numpy as np
import PIL.Image
import pytest
import soundfile

from jaxfeed import load_dataset
from jaxfeed._base.files import UnsafePathError


def image(path, value=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(np.full((4, 4), value, np.uint8)).save(path)


@pytest.fixture
def flat(tmp_path):
    image(tmp_path / "outside.png", 255)
    root = tmp_path / "data"
    image(root / "a.png", 1)
    image(root / "b.png", 2)
    return root


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_metadata_image_column_cannot_replace_discovered_paths(flat, kind):
    outside = str(flat.parent / "outside.png")
    if kind == "csv":
        (flat / "metadata.csv").write_text(f"file_name,image\na.png,{outside}\nb.png,{outside}\n")
    else:
        rows = [{"file_name": n, "image": outside} for n in ("a.png", "b.png")]
        (flat / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        ValueError, match=r"metadata\.\w+: column 'image' would replace the discovered"
    ):
        load_dataset("imagefolder", data_dir=str(flat))


def test_metadata_audio_column_cannot_replace_discovered_paths(tmp_path):
    soundfile.write(tmp_path / "outside.wav", np.zeros(10, np.float32), 8000)
    root = tmp_path / "data"
    root.mkdir()
    soundfile.write(root / "a.wav", np.zeros(10, np.float32), 8000)
    (root / "metadata.csv").write_text(f"file_name,audio\na.wav,{tmp_path / 'outside.wav'}\n")
    with pytest.raises(ValueError, match="column 'audio' would replace"):
        load_dataset("audiofolder", data_dir=str(root))


@pytest.mark.parametrize("name", ["../outside.png", "ABS", "sub/../../outside.png"])
def test_metadata_file_name_outside_the_folder_is_refused(flat, name):
    if name == "ABS":
        name = str(flat.parent / "outside.png")
    (flat / "metadata.csv").write_text(f"file_name,caption\na.png,x\nb.png,y\n{name},z\n")
    with pytest.raises(UnsafePathError, match=r"metadata.csv row 2: file_name .* points outside"):
        load_dataset("imagefolder", data_dir=str(flat))


def test_symlinked_image_leading_outside_is_refused(flat):
    (flat / "c.png").symlink_to(flat.parent / "outside.png")
    with pytest.raises(UnsafePathError, match=r"media file .*c\.png.* outside the dataset folder"):
        load_dataset("imagefolder", data_dir=str(flat))


def test_metadata_csv_is_read_as_a_typed_table(flat):
    (flat / "metadata.csv").write_text(
        "file_name,code,text,count\na.png,1_000,nan,3\nb.png,007,hello,4\n"
    )
    ds = load_dataset("imagefolder", data_dir=str(flat), split="train")
    assert ds["code"] == ["1_000", "007"]  # a text column stays text (no 1000, no 7)
    assert ds["text"] == ["nan", "hello"]  # "nan" in a text column is the text "nan"
    assert ds["count"] == [3, 4] and ds.features["count"].dtype == "int64"
    (flat / "metadata.csv").write_text("file_name,v\na.png,1\nb.png,2.5\n")
    ds = load_dataset("imagefolder", data_dir=str(flat), split="train")
    assert ds["v"] == [1.0, 2.5] and ds.features["v"].dtype == "float64"


def test_duplicate_file_name_rows_are_refused(flat):
    (flat / "metadata.csv").write_text("file_name,caption\na.png,one\nb.png,two\na.png,three\n")
    with pytest.raises(ValueError, match=r"rows 0 and 2 both describe file_name 'a\.png'"):
        load_dataset("imagefolder", data_dir=str(flat))


def test_metadata_label_cannot_override_folder_labels(tmp_path):
    image(tmp_path / "cat" / "1.png")
    image(tmp_path / "dog" / "2.png")
    (tmp_path / "metadata.csv").write_text("file_name,label\ncat/1.png,7\ndog/2.png,7\n")
    with pytest.raises(
        ValueError, match="column 'label' would replace the labels given by the sub-folder"
    ):
        load_dataset("imagefolder", data_dir=str(tmp_path))


def test_metadata_label_in_a_flat_folder_is_a_plain_column(flat):
    (flat / "metadata.csv").write_text("file_name,label\na.png,3\nb.png,5\n")
    assert load_dataset("imagefolder", data_dir=str(flat), split="train")["label"] == [3, 5]


def test_same_base_name_in_two_folders_is_not_matched_by_name(tmp_path):
    image(tmp_path / "cat" / "1.png")
    image(tmp_path / "dog" / "1.png")
    (tmp_path / "metadata.csv").write_text("file_name,caption\n1.png,which one?\n")
    with pytest.raises(ValueError, match=r"cat/1\.png has no row in the metadata"):
        load_dataset("imagefolder", data_dir=str(tmp_path))


@pytest.mark.parametrize(
    "content, match",
    [
        (
            b'{"file_name": "a.png", "x": 1}\n{"file_name": "b.png", "x": \n',
            r"metadata\.jsonl: .*row 1",
        ),
        (
            b'{"file_name": "a.png", "x": "\xff\xfe"}\n',
            r"metadata\.jsonl: line 1 is not valid UTF-8",
        ),
        (
            b'{"file_name": "a.png", "x": 1}\n{"file_name": "b.png", "x": "s"}\n',
            r"metadata\.jsonl: .*row 1",
        ),
        (b"", r"metadata\.jsonl"),
    ],
)
def test_malformed_metadata_jsonl_is_one_clear_error(flat, content, match):
    (flat / "metadata.jsonl").write_bytes(content)
    with pytest.raises(ValueError, match=match) as err:
        load_dataset("imagefolder", data_dir=str(flat))
    assert "\n" not in str(err.value) and str(flat) in str(err.value)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"file_name,x\na.png,1\nb.png,2,3\n", r"metadata\.csv: .*Expected 2 columns, got 3"),
        (b"file_name,x\na.png,\xff\xfe\nb.png,ok\n", r"metadata\.csv: line 2 is not valid UTF-8"),
        (b"caption\nhello\n", r"metadata\.csv: the metadata needs a 'file_name' column"),
        (b"", r"metadata\.csv: .*[Ee]mpty"),
    ],
)
def test_malformed_metadata_csv_is_one_clear_error(flat, content, match):
    (flat / "metadata.csv").write_bytes(content)
    with pytest.raises(ValueError, match=match) as err:
        load_dataset("imagefolder", data_dir=str(flat))
    assert "\n" not in str(err.value)


def test_metadata_file_linked_from_outside_is_refused(flat):
    (flat.parent / "meta.csv").write_text("file_name,caption\na.png,x\nb.png,y\n")
    (flat / "metadata.csv").symlink_to(flat.parent / "meta.csv")
    with pytest.raises(UnsafePathError, match=r"metadata file .*metadata\.csv' is a link"):
        load_dataset("imagefolder", data_dir=str(flat))
