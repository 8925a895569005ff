"""The Arrow cache as derived data: damaged entries named and rebuilt, abandoned temporaries
cleaned, entries of changed sources evicted, a size limit, a content-hash key, the cache CLI."""

import fcntl
import json
import os
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import ClassLabel, load_dataset
from jaxfeed.cli import main
from jaxfeed.data.formats import cache as cache_module


def _parquet(tmp_path, n=200):
    path = tmp_path / "src.parquet"
    words = [f"word-{i}" for i in range(n)]
    pq.write_table(pa.table({"x": list(range(n)), "s": words}), path)
    return path


def _load(path, cache):
    return load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))


def _entry(cache):
    (folder,) = [p for p in (cache / "datasets").iterdir() if not p.name.startswith(".")]
    return folder


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_entries_are_named_and_rebuilt(tmp_path):
    path, cache = _parquet(tmp_path), tmp_path / "cache"
    expected = _load(path, cache).to_dict()
    folder = _entry(cache)
    data = folder / "data.arrow"
    raw = data.read_bytes()
    damages = {
        # a poisoned string offset (segfaulted before), a flipped int value (silently different
        # before), a flipped character (a raw UnicodeDecodeError or another word before)
        "offset": raw.index((10 * 6 + 90 * 7).to_bytes(4, "little")) + 2,  # row 100's offset
        "value": raw.index((57).to_bytes(8, "little")),
        "text": raw.index(b"word-123") + 2,
    }
    for name, offset in damages.items():
        _flip(data, offset)
        with pytest.warns(UserWarning, match=f"cache entry {folder}.*rebuilding") as record:
            again = _load(path, cache)
        assert again.to_dict() == expected, name
        assert "CRC-32" in str(record[0].message) or "differs" in str(record[0].message)
    # truncated data, an unreadable info.json, and an info.json edited to say 2 classes
    data.write_bytes(data.read_bytes()[:-100])
    with pytest.warns(UserWarning, match="truncated"):
        assert _load(path, cache).to_dict() == expected
    (folder / "info.json").write_text("{not json")
    with pytest.warns(UserWarning, match="info.json is unreadable"):
        assert _load(path, cache).to_dict() == expected
    info = json.loads((folder / "info.json").read_text())
    info["features"]["x"] = ClassLabel(names=["a", "b"]).to_dict()
    (folder / "info.json").write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="info.json differs"):
        assert _load(path, cache).features["x"].dtype == "int64"
    # the same edit with its digest recomputed: the features are checked against the data
    info["info_sha256"] = cache_module.info_digest(info)
    (folder / "info.json").write_text(json.dumps(info))
    with pytest.warns(UserWarning, match=r"class id \d+ outside \[-1, 2\)"):
        assert _load(path, cache).features["x"].dtype == "int64"
    # an untouched entry is opened without a warning (and without a full pass over its data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _load(path, cache).to_dict() == expected


def test_abandoned_temporaries_are_cleaned_and_live_ones_kept(tmp_path):
    path, cache = _parquet(tmp_path), tmp_path / "cache"
    _load(path, cache)
    datasets = cache / "datasets"
    dead = datasets / ".abc.tmp-dead0001"  # a writer killed by SIGKILL: its lock file, no lock
    dead.mkdir()
    (dead / ".writer.lock").write_text("12345")
    (dead / "data.arrow").write_bytes(b"x" * 1000)
    live = datasets / ".abd.tmp-live0001"
    live.mkdir()
    fd = os.open(live / ".writer.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a live writer holds it
    try:
        _load(path, cache)
        assert not dead.exists() and live.exists()
    finally:
        os.close(fd)
    _load(path, cache)
    assert not live.exists()


def test_a_changed_source_evicts_its_entry_and_the_size_limit_removes_the_oldest(
    tmp_path, monkeypatch
):
    path, cache = _parquet(tmp_path), tmp_path / "cache"
    for n in range(5):  # rewritten five times: one entry, not five
        pq.write_table(pa.table({"x": list(range(100 + n))}), path)
        assert _load(path, cache).num_rows == 100 + n
    assert len(cache_module.entries(cache)) == 1
    others = []
    for i in range(3):
        other = tmp_path / f"o{i}.parquet"
        pq.write_table(pa.table({"y": list(range(50_000))}), other)
        others.append(other)
    monkeypatch.setenv("JAXFEED_CACHE_MAX_GB", str(2.5 * 400_000 / (1 << 30)))  # ~2.5 entries
    for other in others:
        _load(other, cache)
    kept = [e["sources"] for e in cache_module.entries(cache)]
    assert kept == [[str(others[1])], [str(others[2])]]  # the least recently used went first
    monkeypatch.setenv("JAXFEED_CACHE_MAX_GB", "lots")
    with pytest.raises(ValueError, match="JAXFEED_CACHE_MAX_GB must be a number"):
        _load(path, cache)


def test_content_hash_mode_sees_a_rewrite_with_the_same_size_and_mtime(tmp_path):
    path, cache = tmp_path / "t.parquet", tmp_path / "cache"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    st = os.stat(path)
    assert _load(path, cache)["x"] == [1, 2, 3]
    pq.write_table(pa.table({"x": [7, 8, 9]}), path)  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size
    assert _load(path, cache)["x"] == [1, 2, 3]  # the documented key: size and mtime
    hashed = load_dataset(
        "parquet",
        data_files=str(path),
        split="train",
        cache_dir=str(cache),
        verification_mode="all_checks",
    )
    assert hashed["x"] == [7, 8, 9]
    with pytest.raises(ValueError, match="verification_mode must be one of"):
        load_dataset("parquet", data_files=str(path), cache_dir=str(cache), verification_mode="x")


def test_cache_command_lists_and_cleans(tmp_path, capsys):
    path, cache = _parquet(tmp_path), tmp_path / "cache"
    _load(path, cache)
    folder = _entry(cache)
    assert main(["cache", "list", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert folder.name in out and "200 rows" in out and "1 entry," in out
    assert " s ago" in out and "0.0 d ago" not in out  # used just now
    assert main(["cache", "clean", "--older-than", "1d", "--cache-dir", str(cache)]) == 0
    assert "removed 0 entries" in capsys.readouterr().out and folder.exists()
    old = folder.stat().st_mtime - 3 * 86400
    os.utime(folder, (old, old))
    assert main(["cache", "clean", "--older-than", "2d", "--cache-dir", str(cache)]) == 0
    assert "removed 1 entry " in capsys.readouterr().out and not folder.exists()
    assert main(["cache", "list", "--cache-dir", str(cache)]) == 0
    assert "0 entries" in capsys.readouterr().out
