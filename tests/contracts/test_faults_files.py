"""Untrusted dataset files that crashed or misled the readers (deep nesting, hostile
field values, a data file listed twice) get one clear error naming the file and field."""

import json

import numpy as np
import PIL.Image
import pytest

from jaxfeed import Dataset, load_dataset, load_from_disk


def _image(path, value=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(np.full((4, 4), value, np.uint8)).save(path)


def test_metadata_jsonl_nested_too_deep_is_refused_not_a_crash(tmp_path):
    _image(tmp_path / "a.png")
    deep = "[" * 10_000 + "]" * 10_000  # about 20 KB: segfaulted inside pyarrow before
    (tmp_path / "metadata.jsonl").write_text(
        '{"file_name": "a.png", "tags": "[[[[ not nesting ]"}\n'
        + f'{{"file_name": "b.png", "x": {deep}}}\n'
    )
    with pytest.raises(ValueError, match=r"metadata.jsonl: line 2 nests 10001 levels deep"):
        load_dataset("imagefolder", data_dir=str(tmp_path))
    # brackets inside strings, escaped quotes included, are not nesting
    (tmp_path / "metadata.jsonl").write_text(
        json.dumps({"file_name": "a.png", "caption": '\\"' + "[" * 500}) + "\n"
    )
    ds = load_dataset("imagefolder", data_dir=str(tmp_path), split="train")
    assert ds["caption"] == ['\\"' + "[" * 500]


def _saved(tmp_path):
    path = tmp_path / "ds"
    Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(path)
    return path


def _edit(file, change):
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("file", "field", "value"),
    [
        ("state.json", "_format_kwargs", [1, 2]),
        ("state.json", "_format_columns", {"a": 1}),
        ("state.json", "_format_columns", [1, 2]),
        ("state.json", "_format_type", 7),
        ("state.json", "_output_all_columns", "yes"),
        ("dataset_info.json", "features", 5),
        ("dataset_info.json", "features", "x" * 100_000),
    ],
)
def test_hostile_field_values_name_the_file_and_field(tmp_path, file, field, value):
    path = _saved(tmp_path)
    _edit(path / file, lambda d: d.__setitem__(field, value))
    with pytest.raises(ValueError, match=rf"{file}: field '{field}' must (be|list)") as err:
        load_from_disk(path)
    assert len(str(err.value)) < 400  # the value is never formatted whole into the message


@pytest.mark.parametrize("file", ["state.json", "dataset_info.json"])
def test_deeply_nested_json_is_refused_naming_the_file(tmp_path, file):
    path = _saved(tmp_path)
    text = (path / file).read_text()
    (path / file).write_text(text[:-1].rstrip() + ', "deep": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(ValueError, match=rf"{file} .*nests 50000 levels deep"):
        load_from_disk(path)


def test_a_data_file_listed_three_times_is_refused_without_verify(tmp_path):
    path = _saved(tmp_path)
    _edit(path / "state.json", lambda d: d.__setitem__("_data_files", d["_data_files"] * 3))
    with pytest.raises(
        ValueError, match=r"state.json: field '_data_files' lists .* more than once"
    ):
        load_from_disk(path)


def _bomb(levels):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nconfigs: *a{levels}\n"


@pytest.mark.parametrize("levels", [6, 9])
def test_yaml_alias_bomb_in_a_readme_header_is_refused(tmp_path, levels):
    (tmp_path / "a.csv").write_text("x\n1\n")
    header = _bomb(levels)
    assert len(header) < 700  # 9 levels: 9^10 values once expanded
    (tmp_path / "README.md").write_text(f"---\n{header}---\n# card\n")
    with pytest.raises(ValueError, match=r"README.md: its YAML header: aliases expand") as err:
        load_dataset(str(tmp_path))
    assert len(str(err.value)) < 400


HUGE = 10**12


def test_a_huge_declared_class_count_costs_nothing_until_names_are_used(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jaxfeed import ClassLabel, Features

    meta = {"info": {"features": {"y": {"_type": "ClassLabel", "num_classes": HUGE}}}}
    table = pa.table({"y": [0, 5, 999_999_999_999]}).replace_schema_metadata(
        {"huggingface": json.dumps(meta)}
    )
    pq.write_table(table, tmp_path / "t.parquet")
    assert (tmp_path / "t.parquet").stat().st_size < 2000
    ds = load_dataset(str(tmp_path / "t.parquet"), split="train")
    label = ds.features["y"]
    assert label.num_classes == HUGE and not isinstance(label.names, list)
    assert label.int2str(5) == "5" and label.str2int("999999999999") == HUGE - 1
    assert label.names[-1] == "999999999999" and len(repr(ds.features)) < 200
    assert label == ClassLabel(num_classes=HUGE) and label != ClassLabel(num_classes=HUGE - 1)
    assert ClassLabel(num_classes=5000) == ClassLabel(names=[str(i) for i in range(5000)])
    with pytest.raises(ValueError, match="invalid class name '007'"):
        label.str2int("007")
    # the same count from a saved dataset's dataset_info.json
    Dataset.from_dict(
        {"y": [0, 1]}, features=Features({"y": ClassLabel(num_classes=2)})
    ).save_to_disk(tmp_path / "ds")
    _edit(
        tmp_path / "ds" / "dataset_info.json",
        lambda d: d["features"].__setitem__("y", {"_type": "ClassLabel", "num_classes": HUGE}),
    )
    saved = load_from_disk(tmp_path / "ds")
    assert saved.features["y"].num_classes == HUGE and saved.features["y"].to_dict() == {
        "_type": "ClassLabel",
        "num_classes": HUGE,
    }
    _edit(
        tmp_path / "ds" / "dataset_info.json",
        lambda d: d["features"].__setitem__("y", {"_type": "ClassLabel", "num_classes": "x" * 999}),
    )
    with pytest.raises(ValueError, match="num_classes must be an integer") as err:
        load_from_disk(tmp_path / "ds")
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("how", ["cache", "streaming", "keep_in_memory"])
def test_a_json_lines_data_file_nested_too_deep_is_refused_not_a_crash(tmp_path, how):
    path = tmp_path / "t.jsonl"
    rows = [json.dumps({"b": i, "a": [[i]]}) for i in range(3000)]
    deep = '{"b": 1, "a": ' + "[" * 10_000 + "]" * 10_000 + "}"
    path.write_text("\n".join([*rows, deep]) + "\n")
    kwargs = {"cache_dir": str(tmp_path / "c")} if how == "cache" else {how: True}
    with pytest.raises(ValueError, match=rf"t.jsonl: line {len(rows) + 1} nests 10001 levels deep"):
        ds = load_dataset(str(path), split="train", **kwargs)
        list(ds) if how == "streaming" else None
    path.write_text("\n".join(rows) + "\n")  # shallow lines load as before
    first = next(iter(load_dataset(str(path), split="train", **kwargs)))
    assert first == {"b": 0, "a": [[0]]}
