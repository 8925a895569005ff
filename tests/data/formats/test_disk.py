import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxfeed import Array2D, ClassLabel, Dataset, DatasetDict, Features, Value, load_from_disk


def make(n=10):
    return Dataset.from_dict(
        {"x": np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2), "y": list(range(n))},
        features=Features({"x": Array2D((2, 2), "float32"), "y": Value("int64")}),
    )


def test_roundtrip_keeps_features_format_and_mmaps(tmp_path):
    ds = make(10).shuffle(seed=0).with_format("numpy", columns=["x"])
    ds.save_to_disk(tmp_path / "ds")
    back = load_from_disk(tmp_path / "ds")
    assert back.features == ds.features and back.format["type"] == "numpy"
    np.testing.assert_array_equal(back[:]["x"], ds[:]["x"])
    view = back._internal.reader.view("x")
    assert view is not None and not view.single.flags.writeable


def test_load_is_memory_mapped(tmp_path):
    import pyarrow as pa

    big = Dataset.from_dict({"x": np.zeros((200_000, 8, 8), np.float32)})  # 51 MB
    big.save_to_disk(tmp_path / "big")
    del big
    before = pa.total_allocated_bytes()
    back = load_from_disk(tmp_path / "big")
    assert pa.total_allocated_bytes() - before < 1 << 20
    assert back.with_format("numpy")[199_999]["x"].shape == (8, 8)


def test_datasetdict_roundtrip(tmp_path):
    dd = DatasetDict({"train": make(6), "test": make(3)})
    dd.save_to_disk(tmp_path / "dd")
    back = load_from_disk(tmp_path / "dd")
    assert isinstance(back, DatasetDict) and back.num_rows == {"train": 6, "test": 3}


def test_readable_by_hf_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    # Value, ClassLabel and Sequence columns (HF cannot read ArrayND from fixed-size lists)
    ds = Dataset.from_dict({"y": [0, 1, 1], "s": [[1.0], [], [2.0, 3.0]], "t": ["a", "b", "c"]})
    ds = ds.cast_column("y", ClassLabel(names=["no", "yes"]))
    ds.save_to_disk(tmp_path / "ds")
    theirs = datasets.load_from_disk(str(tmp_path / "ds"))
    assert theirs["y"] == [0, 1, 1] and theirs.features["y"].names == ["no", "yes"]
    assert theirs[2]["s"] == [2.0, 3.0]


def test_overwrite_only_datasets(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a saved dataset"):
        make().save_to_disk(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    make(3).save_to_disk(tmp_path / "ds")
    make(4).save_to_disk(tmp_path / "ds")
    assert load_from_disk(tmp_path / "ds").num_rows == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_not_a_dataset(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a saved dataset"):
        load_from_disk(tmp_path)


def test_killed_mid_save_leaves_previous_dataset(process_group, tmp_path):
    make(3).save_to_disk(tmp_path / "ds")
    script = textwrap.dedent(
        f"""
        import os, numpy as np
        import jaxfeed.data.formats.saved as disk
        from jaxfeed import Dataset
        real = disk._write_json
        def slow(path, payload):
            real(path, payload)
            if path.name == "dataset_info.json":
                print("writing", flush=True)
                import time; time.sleep(60)
        disk._write_json = slow
        Dataset.from_dict({{"y": list(range(1000))}}).save_to_disk({str(tmp_path / "ds")!r})
        """
    )
    proc = process_group([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ds.tmp-")]
    assert load_from_disk(tmp_path / "ds")["y"] == [0, 1, 2]
    make(5).save_to_disk(tmp_path / "ds")  # the next save cleans the half-written folder up
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert load_from_disk(tmp_path / "ds").num_rows == 5


def test_crash_between_renames_is_recovered(tmp_path):
    make(3).save_to_disk(tmp_path / "ds")
    os.replace(tmp_path / "ds", tmp_path / ".ds.old-1234")
    assert load_from_disk(tmp_path / "ds").num_rows == 3
