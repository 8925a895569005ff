"""``save_pretrained`` / ``save_adapter`` into a folder that already holds a save (issue 63: D02,
D03, D04): the folder afterwards loads as exactly what was saved (an older sharded checkpoint's
shards and index, an adapter, a merged model: gone), at every moment as one whole save (a failed
save leaves the old one; two concurrent saves leave one's whole save), its other files kept.

Torch-free: the checkpoint is written by jaxfeed and numpy (``lm_checkpoints.save_tiny``)."""

from __future__ import annotations

import errno
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from jaxfeed.models import LoRA, from_pretrained, save_pretrained
from jaxfeed.models.hub import adapters
from jaxfeed.models.hub.files import CheckpointError, Weights, write_safetensors
from jaxfeed.models.hub.weights import variables
from models.hub.lm_checkpoints import save_tiny


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "llama")


def values(model) -> dict[str, np.ndarray]:
    return {p: np.asarray(v.get_value()) for p, v in variables(model).items()}


def assert_same(model, expected: dict[str, np.ndarray]) -> None:
    got = values(model)
    assert sorted(got) == sorted(expected)
    for path, value in expected.items():
        np.testing.assert_array_equal(got[path], value, err_msg=path)


def scaled(model, factor: float):
    """Every kernel (and adapter) times ``factor``: a model unlike the one loaded."""
    for path, var in variables(model).items():
        if path.endswith(("kernel", "lora_a", "lora_b")):
            var.set_value(var.get_value() * factor + (0.5 if path.endswith("lora_b") else 0.0))
    return model


def sharded_copy(base: Path, folder: Path) -> Path:
    """``base`` as a two-shard checkpoint with an index (as transformers writes a large one)."""
    folder.mkdir()
    shutil.copy(base / "config.json", folder)
    weights = Weights(base)
    names = weights.names()
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}  # fmt: skip
    for shard, part in shards.items():
        write_safetensors(folder / shard, {n: np.array(weights.get(n)) for n in part})
    weight_map = {n: shard for shard, part in shards.items() for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


# ------------------------------------------------------------------------------ D02
def test_a_save_over_a_sharded_checkpoint_reloads_as_what_was_saved(base, tmp_path):
    """The index and shards stayed and won: from_pretrained reloaded the old model."""
    folder = sharded_copy(base, tmp_path / "ckpt")
    (folder / "README.md").write_text("kept")
    model = scaled(from_pretrained(folder), 1.5)
    save_pretrained(model, folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "config.json", "model.safetensors"
    ]  # fmt: skip
    assert (folder / "README.md").read_text() == "kept"
    assert_same(from_pretrained(folder), values(model))
    assert [p.name for p in folder.parent.iterdir()] == ["ckpt"]  # no temporary folder left


# ------------------------------------------------------------------------------ D03
def test_a_merged_save_over_an_adapter_leaves_no_adapter_and_back(base, tmp_path):
    """transformers loaded the merged folder as base + the stale adapter."""
    folder = tmp_path / "out"
    model = scaled(from_pretrained(base, lora=LoRA(rank=2)), 1.0)
    save_pretrained(model, folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"
    ]  # fmt: skip
    save_pretrained(model, folder, merge=True)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert_same(from_pretrained(folder), values(adapters.merged(model)))
    save_pretrained(model, folder)  # and the adapter again: the merged model goes
    assert sorted(p.name for p in folder.iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"
    ]  # fmt: skip


# ------------------------------------------------------------------------------ D04
def test_two_adapter_saves_into_one_folder_leave_one_whole_save(base, tmp_path, monkeypatch):
    """The first saver is held after writing its weights while the second saves whole: the
    folder then held the second's weights and the first's adapter_config.json (another rank)."""
    folder = tmp_path / "adapter"
    first = scaled(from_pretrained(base, lora=LoRA(rank=2)), 2.0)
    second = scaled(from_pretrained(base, lora=LoRA(rank=4)), 3.0)
    wrote, done = threading.Event(), threading.Event()
    real = adapters.write_safetensors

    def held(path, tensors, **kw):
        real(path, tensors, **kw)
        if threading.current_thread().name == "first":
            wrote.set()
            assert done.wait(60)

    monkeypatch.setattr(adapters, "write_safetensors", held)
    errors = []
    thread = threading.Thread(target=lambda: errors.append(save_pretrained(first, folder)),
                              name="first")  # fmt: skip
    thread.start()
    assert wrote.wait(60)
    save_pretrained(second, folder)
    done.set()
    thread.join(60)
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == 2  # the last whole
    loaded = from_pretrained(base, adapter=folder)
    for path, value in values(first).items():
        if path.endswith(("lora_a", "lora_b")):
            np.testing.assert_array_equal(values(loaded)[path], value, err_msg=path)


def test_a_save_that_fails_midway_leaves_the_previous_one(base, tmp_path, monkeypatch):
    """A save killed after its weights: the folder held the new weights and the old config."""
    folder = tmp_path / "adapter"
    old = scaled(from_pretrained(base, lora=LoRA(rank=2)), 2.0)
    save_pretrained(old, folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = adapters.write_safetensors

    def dies(path, tensors, **kw):
        real(path, tensors, **kw)
        raise KeyboardInterrupt  # as a Ctrl-C (or a kill) between the two files

    monkeypatch.setattr(adapters, "write_safetensors", dies)
    with pytest.raises(KeyboardInterrupt):
        save_pretrained(from_pretrained(base, lora=LoRA(rank=4)), folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert [p.name for p in folder.parent.iterdir()] == ["adapter"]


@pytest.mark.parametrize("why", ["a mount point", "a git clone", "the working folder"])
def test_where_folders_cannot_or_should_not_trade_places_files_are_replaced_in_place(
    base, tmp_path, monkeypatch, why
):
    """A mount point (EBUSY), a folder with sub-folders (copied whole otherwise), the process's
    working folder (left pointing at the old one otherwise): the files are replaced in place, and
    the old checkpoint's files still go."""
    folder = sharded_copy(base, tmp_path / "ckpt")
    if why == "a mount point":

        def cannot(first, second):
            raise OSError(errno.EBUSY, "a mount point")

        monkeypatch.setattr("jaxfeed.models.hub.save_folder.exchange", cannot)
    elif why == "a git clone":
        (folder / ".git").mkdir()
        (folder / ".git" / "HEAD").write_text("ref: refs/heads/main")
    else:
        monkeypatch.chdir(folder)
    inode = folder.stat().st_ino
    model = scaled(from_pretrained(folder), 0.5)
    save_pretrained(model, folder)
    kept = [".git"] if why == "a git clone" else []
    assert sorted(p.name for p in folder.iterdir()) == [*kept, "config.json", "model.safetensors"]
    assert folder.stat().st_ino == inode  # the same folder, written in place
    assert_same(from_pretrained(folder), values(model))


# ------------------------------------------------------------------------------ D06
def test_an_int8_merge_refuses_a_checkpoint_that_changed_since_the_load(base, tmp_path):
    """merge=True of an int8 model reads the full-precision weights again from the folder it was
    loaded from: another checkpoint there (a new download, a save) was merged in silently."""
    pytest.importorskip("qwix")
    folder = tmp_path / "ckpt"
    shutil.copytree(base, folder)
    model = scaled(from_pretrained(folder, lora=LoRA(rank=2), quantize="int8"), 1.0)
    save_pretrained(model, tmp_path / "merged", merge=True)  # the same files: merged
    assert sorted(p.name for p in (tmp_path / "merged").iterdir()) == [
        "config.json", "model.safetensors"
    ]  # fmt: skip
    save_tiny(tmp_path / "other", seed=1)
    shutil.copy(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"reads the full-precision weights again from .*"
                       r"ckpt, whose files changed since the model was loaded from it: "
                       r"model.safetensors \(changed\); load the model again"):  # fmt: skip
        save_pretrained(model, tmp_path / "merged-again", merge=True)
    assert not (tmp_path / "merged-again").exists()
