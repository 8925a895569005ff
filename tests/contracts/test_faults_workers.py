"""Process workers on a crowded machine: a /dev/shm without room for a batch slot is a
clear error saying what to do (not a bare BrokenPipeError), and a worker error leaves no stray
resource-tracker traceback at exit."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxfeed import DataLoader, Dataset


def _add_one(row):
    return {"x": row["x"] + 1}


def test_a_small_dev_shm_is_a_clear_error_saying_what_to_do(monkeypatch):
    ds = Dataset.from_dict({"x": np.zeros((64, 256, 256), np.float32)})  # 16 MiB per batch of 64
    monkeypatch.setenv("JAXFEED_SHM_BYTES", str(8 << 20))  # a fake 8 MiB /dev/shm
    loader = DataLoader(ds, batch_size=64, num_workers=1, row_transform=_add_one, prefetch=0)
    with pytest.raises(
        OSError, match=r"shared-memory slot of 20 MiB .* /dev/shm has 8 MiB free"
    ) as err:
        next(iter(loader))
    message = str(err.value)
    assert "--shm-size" in message and "worker_mode='thread'" in message
    # the same loader in threads needs no shared memory
    loader = DataLoader(
        ds, batch_size=64, num_workers=1, row_transform=_add_one, prefetch=0, worker_mode="thread"
    )
    assert float(next(iter(loader))["x"][0, 0, 0]) == 1.0


SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from jaxfeed import Dataset, DataLoader

    def fail(row):
        if int(row["i"]) == 5:
            raise ValueError("bad row")
        return row

    if __name__ == "__main__":
        import _posixshmem, os
        ds = Dataset.from_dict({"i": np.arange(16)})
        loader = DataLoader(ds, batch_size=4, num_workers=2, row_transform=fail, prefetch=0)
        it = iter(loader)
        next(it)
        # what a worker killed between creating a segment and registering it leaves behind
        fd = _posixshmem.shm_open(loader.debug_info()["shared_memory_prefix"] + "_0_99", os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 4096)
        os.close(fd)
        try:
            list(it)
        except ValueError as err:
            print("worker error:", str(err).splitlines()[0])
    """
)


def test_a_worker_error_leaves_no_resource_tracker_traceback(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "worker error:" in done.stdout and "bad row" in done.stdout
    assert "KeyError" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr
