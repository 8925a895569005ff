"""Folders in the Hub layout: README ``configs`` may only name files inside the folder,
and malformed configs give one clear error naming README.md."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import load_dataset
from jaxfeed._base.files import UnsafePathError


def card(folder, yaml):
    (folder / "README.md").write_text(f"---\n{yaml}\n---\n# Card\n")


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "outside.csv").write_text("x\n666\n")
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2]}), root / "data" / "train.parquet")
    return root


@pytest.mark.parametrize(
    "pattern",
    ["../outside.csv", "ABS", "../*.csv", "data/../../outside.csv", "**/../../outside.csv"],
)
def test_readme_data_files_outside_the_folder_are_refused(repo, pattern):
    if pattern == "ABS":
        pattern = str(repo.parent / "outside.csv")
    card(repo, f"configs:\n- config_name: default\n  data_files: '{pattern}'")
    with pytest.raises(UnsafePathError, match=r"README\.md must be relative to the dataset folder"):
        load_dataset(str(repo))


def test_readme_split_entries_outside_the_folder_are_refused(repo):
    card(
        repo,
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: ../outside.csv",
    )
    with pytest.raises(UnsafePathError, match=r"'\.\./outside\.csv' \(split 'train'\)"):
        load_dataset(str(repo))


def test_symlink_matched_by_a_readme_glob_is_refused(repo):
    (repo / "data" / "leak.csv").symlink_to(repo.parent / "outside.csv")
    card(repo, "configs:\n- config_name: default\n  data_files: 'data/*.csv'")
    with pytest.raises(UnsafePathError, match=r"leak\.csv' is a link to .* outside the dataset"):
        load_dataset(str(repo))


def test_symlink_found_by_the_folder_layout_is_refused(repo):
    (repo / "data" / "test.csv").symlink_to(repo.parent / "outside.csv")
    with pytest.raises(UnsafePathError, match=r"test\.csv' is a link"):
        load_dataset(str(repo))


def test_hub_cache_snapshot_links_into_its_blobs_are_allowed(tmp_path):
    repo = tmp_path / "datasets--someone--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    (repo / "blobs").mkdir(parents=True)
    (snapshot / "data").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), repo / "blobs" / "abc123")
    (snapshot / "data" / "train-00000.parquet").symlink_to("../../../blobs/abc123")
    card(snapshot, "configs:\n- config_name: default\n  data_files: 'data/*.parquet'")
    assert load_dataset(str(snapshot), split="train")["x"] == [1, 2, 3]
    (snapshot / "README.md").unlink()
    assert load_dataset(str(snapshot), split="train")["x"] == [1, 2, 3]


@pytest.mark.parametrize(
    "yaml, match",
    [
        ("configs: just-a-string", r"'configs' must be a list"),
        ("configs:\n- just-a-string", r"configs\[0\] must be a mapping"),
        (
            "configs:\n- config_name: a\n  data_files:\n  - split: train",
            r"configs\[0\] \('a'\) data_files\[0\] has no 'path'",
        ),
        (
            "configs:\n- config_name: a\n  data_files: 3",
            r"data_files must be a path or a list of paths",
        ),
        (
            "configs:\n- config_name: a\n  data_files: {train: [1, 2]}",
            r"data_files\['train'\] must be a path",
        ),
        ("- a list", r"the YAML header must be a mapping"),
        ("configs: [unclosed", r"cannot parse its YAML header"),
    ],
)
def test_malformed_readme_configs_are_one_clear_error(repo, yaml, match):
    card(repo, yaml)
    with pytest.raises(ValueError, match=match) as err:
        load_dataset(str(repo))
    assert "README.md" in str(err.value) and "\n" not in str(err.value)


def test_brackets_in_a_real_file_name_are_not_a_glob(repo):
    pq.write_table(pa.table({"x": [7]}), repo / "data" / "part[1].parquet")
    pq.write_table(pa.table({"x": [8]}), repo / "data" / "part1.parquet")
    card(repo, "configs:\n- config_name: default\n  data_files: 'data/part[1].parquet'")
    assert load_dataset(str(repo), split="train")["x"] == [7]
    path = str(repo / "data" / "part[1].parquet")
    assert load_dataset("parquet", data_files=path, split="train")["x"] == [7]
    card(repo, "configs:\n- config_name: default\n  data_files: 'data/nothing[1].parquet'")
    with pytest.raises(
        FileNotFoundError, match=r"nothing matches \(\[ and \] are glob characters\)"
    ):
        load_dataset(str(repo))


def test_readme_linked_from_outside_is_refused(repo):
    (repo.parent / "card.md").write_text(
        "---\nconfigs:\n- config_name: a\n  data_files: 'data/*'\n---\n"
    )
    (repo / "README.md").symlink_to(repo.parent / "card.md")
    with pytest.raises(UnsafePathError, match=r"dataset card .*README\.md' is a link"):
        load_dataset(str(repo))


def test_glob_characters_in_the_folder_name_are_literal(tmp_path):
    root = tmp_path / "data[1]"
    (root / "d").mkdir(parents=True)
    pq.write_table(pa.table({"x": [4]}), root / "d" / "train.parquet")
    card(root, "configs:\n- config_name: default\n  data_files: 'd/*.parquet'")
    assert load_dataset(str(root), split="train")["x"] == [4]
