"""Issue 44: a writer's temporary folder is never taken for a dead writer's. Another process runs
the clean-up at every step of each writer that fills a hidden ``.tmp-`` folder (the dataset
cache, the remote folder copy, ``save_to_disk``, the export writer); the result must be
published and loadable every time, and the clean-up must remove nothing of a live writer. A
full ``cache clean`` at any step, and a reader's recovery of a save between its two renames,
must not fail the writer either."""

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
from jaxfeed._base.files import (
    WRITER_LOCK,
    LockedTemporary,
    abandoned,
    is_locked,
    set_aside_name,
)
from jaxfeed.serve.export import _write_folder

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
    from jaxfeed.data.formats import cache, saved
    saved.RECOVER_WAIT_SECONDS = 0  # the writer waits for this process: check once, not wait
    for line in sys.stdin:
        kind, where = json.loads(line)
        if kind in ("cache", "cache-all"):  # `jaxfeed cache clean [--older-than]`, a cache open
            before = {p.name for p in (Path(where) / "datasets").iterdir()}
            cache.clean(where, older_than=1e9 if kind == "cache" else None)
            after = {p.name for p in (Path(where) / "datasets").iterdir()}
            removed = sorted(before - after)
        elif kind == "recover":  # a reader of a saved dataset (load_from_disk) while it is saved
            target = Path(where)
            before = {p.name for p in target.parent.iterdir()}
            saved._recover(target)
            removed = sorted(before - {p.name for p in target.parent.iterdir()})
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

    def arm(kind, where, only=None):
        def hook(step, tmp):
            if only is not None and not only(step):
                return
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
        "set aside",
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


def test_a_full_cache_clean_at_any_step_of_the_writer_never_fails_the_load(tmp_path, cleaner):
    """``jaxfeed cache clean`` (or another process's size trim) may remove an entry the moment it
    is published, before its writer opens it: the load builds it again instead of failing."""
    path = tmp_path / "src.parquet"
    pq.write_table(pa.table({"x": list(range(20))}), path)
    for at in CACHE_STEPS:
        cache = tmp_path / f"cache-{at.replace(' ', '-')}"
        (cache / "datasets").mkdir(parents=True)
        only, fired = _once_at(at)
        calls = cleaner("cache-all", str(cache), only=only)
        ds = load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
        assert ds["x"] == list(range(20)), at
        assert fired == [at]
        if at in ("published", "closed"):  # the race: the new entry removed before its opening
            assert len(calls[0][1]) == 1, calls


def _once_at(name):
    """A step filter true the first time the writer reaches ``name`` only, and what it let pass."""
    fired = []

    def only(step):
        if step == name and not fired:
            fired.append(step)
            return True
        return False

    return only, fired


def _export_files(n: int) -> dict[str, bytes]:
    config = {"format": "jaxfeed-export", "n": n}
    return {"model.safetensors": bytes(n), "config.json": json.dumps(config).encode()}


def test_export_clean_up_at_every_step_removes_nothing(tmp_path, cleaner):
    target = tmp_path / "model"
    _write_folder(target, _export_files(1))  # replaced below: the swap path
    calls = cleaner("folder", [str(tmp_path), ".model.tmp-"])
    _write_folder(target, _export_files(2))
    assert [step for step, _ in calls] == [
        "created",
        "locked aside",
        "locked",
        "renaming",
        "set aside",
        "renamed",
        "published",
        "closed",
    ]
    assert all(removed == [] for _, removed in calls)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((target / "config.json").read_text())["n"] == 2
    assert not [p for p in tmp_path.iterdir() if p.name != "model"]


def test_the_next_export_removes_what_a_killed_one_left_and_keeps_a_live_ones(tmp_path):
    """A killed export leaves its temporary folder (its lock file, unlocked) and, killed between
    its two renames, the earlier export it set aside: the next export to the same target
    removes both, and nothing of an export still running."""
    target = tmp_path / "model"
    _write_folder(target, _export_files(1))
    dead = tmp_path / ".model.tmp-dead0001"
    dead.mkdir()
    (dead / WRITER_LOCK).write_text("12345")  # SIGKILL: the file stays, nobody holds it
    (dead / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".model.old-dead0002").mkdir()  # its tmp gone: renamed into place, then killed
    young = tmp_path / ".model.tmp-young001"  # no lock file yet: a writer between mkdir and lock
    young.mkdir()
    with LockedTemporary(target, "export being written") as live:
        live_old = set_aside_name(live.path)
        live_old.mkdir()  # as if it were between its two renames
        _write_folder(target, _export_files(2))
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted(["model", young.name, live.path.name, live_old.name])
    (target / WRITER_LOCK).write_text("")  # an export killed just after its rename
    _write_folder(target, _export_files(3))  # still an export: replaced, not refused
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((target / "config.json").read_text())["n"] == 3


def test_a_reader_never_undoes_a_live_save_between_its_two_renames(tmp_path, cleaner):
    """``load_from_disk`` restores the set-aside folder of a save killed between its renames; run
    at every step of a live save (between them included), it moves nothing, and the save
    succeeds."""
    target = tmp_path / "ds"
    Dataset.from_dict({"y": [0, 1]}).save_to_disk(target)
    calls = cleaner("recover", str(target))
    Dataset.from_dict({"y": [1, 2, 3]}).save_to_disk(target)
    assert "set aside" in [step for step, _ in calls]
    assert all(removed == [] for _, removed in calls)
    assert load_from_disk(target)["y"] == [1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_a_dead_saves_set_aside_folder_is_restored_then_cleaned(tmp_path):
    target = tmp_path / "ds"
    Dataset.from_dict({"y": [7]}).save_to_disk(target)
    tmp = tmp_path / ".ds.tmp-dead0003"  # killed between its renames: its lock file, unlocked
    tmp.mkdir()
    (tmp / WRITER_LOCK).write_text("12345")
    target.rename(set_aside_name(tmp))
    assert load_from_disk(target)["y"] == [7]  # its writer is dead: restored
    stale = tmp_path / ".ds.old-dead0004"  # another one, its target there again
    stale.mkdir()
    Dataset.from_dict({"y": [8]}).save_to_disk(target)  # removes both leftovers
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    assert load_from_disk(target)["y"] == [8]


def test_atomic_writes_racing_for_one_file_both_succeed(tmp_path, monkeypatch):
    """Two writers of one file (a cache entry's ``verified.json`` opened by two processes): each
    writes its own temporary file, so neither renames the other's half-written one nor fails."""
    target = tmp_path / "verified.json"
    real = os.replace
    inner = []

    def replace(src, dst):
        if not inner:  # the second writer runs its whole write between the first's steps
            inner.append(src)
            files_module.atomic_write(target, "second")
        real(src, dst)

    monkeypatch.setattr(files_module.os, "replace", replace)
    files_module.atomic_write(target, "first")
    monkeypatch.undo()
    assert target.read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["verified.json"]
