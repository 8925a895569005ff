"""No silent wrong values: a streaming state is only valid for the files it was saved from
(paths, sizes, modification times or ETags) and for the same stream."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import DataLoader, load_dataset


def _files(folder, start, n=2, rows=20):
    folder.mkdir(exist_ok=True)
    out = []
    for k in range(n):
        path = folder / f"part-{k}.parquet"
        lo = start + k * rows
        pq.write_table(pa.table({"x": list(range(lo, lo + rows))}), path, row_group_size=5)
        out.append(str(path))
    return out


def _stream(files):
    return load_dataset("parquet", data_files=files, split="train", streaming=True)


def test_a_stream_state_is_refused_after_its_files_change_or_for_another_stream(tmp_path):
    files = _files(tmp_path / "a", 0)
    ds = _stream(files)
    rows = iter(ds)
    [next(rows) for _ in range(7)]
    state = ds.state_dict()
    rows.close()  # no read-ahead thread outlives the test
    resumed = _stream(files)
    resumed.load_state_dict(state)  # unchanged files: the next row is row 7
    assert next(iter(resumed))["x"] == 7
    loader = DataLoader(_stream(files), batch_size=4)
    batches = iter(loader)
    next(batches)
    loader_state = loader.state_dict()
    loader.close()
    # another dataset's state: refused, not read at the first one's offsets
    other = _stream(_files(tmp_path / "b", 1000))
    with pytest.raises(ValueError, match="saved for another stream"):
        other.load_state_dict(state)
    with pytest.raises(
        ValueError, match=r"StreamingDataLoader\.load_state_dict: the state was saved"
    ):
        DataLoader(other, batch_size=4).load_state_dict(loader_state)
    # the files rewritten (new rows): the saved offsets would point at other rows
    _files(tmp_path / "a", 500, rows=30)
    with pytest.raises(ValueError, match=r"part-0.parquet changed since the state was saved"):
        _stream(files).load_state_dict(state)
    with pytest.raises(ValueError, match=r"part-0.parquet changed since the state was saved"):
        DataLoader(_stream(files), batch_size=4).load_state_dict(loader_state)
    # a state with the same size and modification time but another path is another stream too
    os.rename(tmp_path / "a", tmp_path / "c")
    moved = [f.replace(os.sep + "a" + os.sep, os.sep + "c" + os.sep) for f in files]
    with pytest.raises(ValueError, match="saved for another stream"):
        _stream(moved).load_state_dict(state)
