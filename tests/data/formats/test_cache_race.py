"""Issue 44: a writer's temporary folder is never taken for a dead writer's. Another process runs
the clean-up at every step of each writer that fills a hidden ``.tmp-`` folder (the dataset
cache, the remote folder copy, ``save_to_disk``); the result must be published and loadable
every time, and the clean-up must remove nothing of a live writer."""

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import Dataset, load_dataset, load_from_disk
from jaxfeed._base import files as files_module
from jaxfeed._base.files import WRITER_LOCK, LockedTemporary, abandoned, is_locked

# Every step of LockedTemporary, and those the cache writer adds between them.
CACHE_STEPS = [
    "created",
    "locked aside",
    "locked",
    "filled",
    "described",
    "verified",
    "renaming",
    "renamed",
    "published",
    "closed",
]

_CLEANER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from jaxfeed._base.files import remove_abandoned
    from jaxfeed.data.formats import cache
    for line in sys.stdin:
        kind, where = json.loads(line)
        if kind == "cache":  # what `jaxfeed cache clean --older-than` and every cache open run
            before = {p.name for p in (Path(where) / "datasets").iterdir()}
            cache.clean(where, older_than=1e9)
            after = {p.name for p in (Path(where) / "datasets").iterdir()}
            removed = sorted(before - after)
        else:  # the clean-up of a folder's earlier saves (save_to_disk, the remote copies)
            parent, prefix = where
            removed = [p.name for p in remove_abandoned(parent, prefix)]
        print(json.dumps(removed), flush=True)
    """
)


@pytest.fixture
def cleaner(monkeypatch):
    """A second process that runs the clean-up whenever the writer here reaches a step."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLEANER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    calls: list[tuple[str, list[str]]] = []

    def arm(kind, where):
        def hook(step, tmp):
            proc.stdin.write(json.dumps([kind, where]) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            assert line, "the cleaning process died"
            calls.append((step, json.loads(line)))

        monkeypatch.setattr(LockedTemporary, "on_step", hook)
        calls.clear()
        return calls

    try:
        yield arm
    finally:
        monkeypatch.setattr(LockedTemporary, "on_step", None)
        proc.stdin.close()
        proc.wait(timeout=30)


def _no_temporaries(folder):
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


def test_cache_clean_up_at_every_step_of_the_writer_removes_nothing(tmp_path, cleaner):
    path, cache = tmp_path / "src.parquet", tmp_path / "cache"
    pq.write_table(pa.table({"x": list(range(50))}), path)
    (cache / "datasets").mkdir(parents=True)
    calls = cleaner("cache", str(cache))
    ds = load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
    assert [step for step, _ in calls] == CACHE_STEPS
    assert [removed for _, removed in calls] == [[]] * len(CACHE_STEPS)
    assert ds["x"] == list(range(50))
    (entry,) = [p for p in (cache / "datasets").iterdir()]
    assert sorted(p.name for p in entry.iterdir()) == ["data.arrow", "info.json", "verified.json"]
    LockedTemporary.on_step = None
    again = load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
    assert again["x"] == list(range(50))


def test_save_to_disk_clean_up_at_every_step_removes_nothing(tmp_path, cleaner):
    target = tmp_path / "ds"
    Dataset.from_dict({"y": [0, 1]}).save_to_disk(target)  # replaced: the swap path
    calls = cleaner("folder", [str(tmp_path), ".ds.tmp-"])
    Dataset.from_dict({"y": [1, 2, 3]}).save_to_disk(target)
    steps = [step for step, _ in calls]
    assert steps == [
        "created",
        "locked aside",
        "locked",
        "renaming",
        "renamed",
        "published",
        "closed",
    ]
    assert all(removed == [] for _, removed in calls)
    assert load_from_disk(target)["y"] == [1, 2, 3]
    assert not (target / WRITER_LOCK).exists() and not _no_temporaries(tmp_path)


def test_remote_folder_copy_clean_up_at_every_step_removes_nothing(tmp_path, cleaner, monkeypatch):
    monkeypatch.setenv("JAXFEED_CACHE", str(tmp_path / "cache"))
    url = f"memory://race-{os.getpid()}/ds"
    Dataset.from_dict({"y": [4, 5]}).save_to_disk(url)
    (tmp_path / "cache" / "remote").mkdir(parents=True)
    calls = cleaner("folder", [str(tmp_path / "cache" / "remote"), "."])
    assert load_from_disk(url)["y"] == [4, 5]
    steps = [s for s, _ in calls]
    assert steps == [
        "created",
        "locked aside",
        "locked",
        "renaming",
        "renamed",
        "published",
        "closed",
    ]
    assert all(removed == [] for _, removed in calls)
    assert not _no_temporaries(tmp_path / "cache" / "remote")


def test_a_dead_writers_folder_is_removed_and_an_unknowable_lock_is_left(tmp_path, monkeypatch):
    dead = tmp_path / ".x.tmp-dead0001"
    dead.mkdir()
    (dead / WRITER_LOCK).write_text("12345")  # its writer was killed: the file stays, unlocked
    young = tmp_path / ".x.tmp-young001"  # no lock file yet (a writer between mkdir and lock)
    young.mkdir()
    aside = tmp_path / ".x.tmp-aside001"  # its lock file still under its temporary name
    aside.mkdir()
    (aside / (WRITER_LOCK + ".new")).write_text("")
    assert abandoned(dead) and not abandoned(young) and not abandoned(aside)
    assert files_module.remove_abandoned(tmp_path) == [dead]
    # a lock file this process may not open: its writer cannot be known dead, so it is kept
    (young / WRITER_LOCK).write_text("12345")
    monkeypatch.setattr(files_module.os, "open", _refuse)
    assert is_locked(young / WRITER_LOCK) and not abandoned(young)
    monkeypatch.undo()
    assert not is_locked(young / "absent") and abandoned(young)


def _refuse(*args, **kwargs):
    raise PermissionError("no")
