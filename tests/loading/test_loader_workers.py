"""DataLoader workers: row transforms, shared-memory batches, process hygiene, iteration rules."""

import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import PIL.Image
import pytest

from jaxfeed import DataLoader, Dataset, DecodeError, Features, Image, Value
from jaxfeed.loading.workers import leftover_segments
from loader_worker_rows import (
    FLAG,
    augment,
    fail_on_2,
    fail_on_13,
    fail_on_13_once_armed,
    hang_on_5_once_armed,
    plus_one,
    slow_on_1,
    uneven,
    with_pid,
)


def image_ds(n=22, corrupt=None):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
    images = []
    for i, a in enumerate(pixels):
        buffer = io.BytesIO()
        PIL.Image.fromarray(a).save(buffer, format="PNG")
        images.append(b"junk" if i == corrupt else buffer.getvalue())
    ds = Dataset.from_dict(
        {"image": images, "id": np.arange(n)},
        features=Features({"image": Image(), "id": Value("int64")}),
    )
    return ds, pixels


def as_lists(batches):
    return [(np.asarray(b["id"]).tolist(), np.asarray(b["image"])) for b in batches]


def same(a, b):
    assert [x[0] for x in a] == [x[0] for x in b]
    for (_, x), (_, y) in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def make(num_workers, **kw):
    ds, _ = image_ds()
    return DataLoader(
        ds, batch_size=5, shuffle=True, seed=3, row_transform=augment, num_workers=num_workers, **kw
    )


def test_row_transform_inline_and_threads_agree_and_resume():
    reference = make(0)
    stream = as_lists(b for _ in range(2) for b in reference)
    assert reference.epoch == 2 and np.asarray(stream[0][1]).dtype == np.float32
    threads = make(2, worker_mode="thread")
    same(as_lists(b for _ in range(2) for b in threads), stream)
    threads.close()
    for k in (2, 7):  # mid epoch 0, mid epoch 1
        first = make(0)
        it = iter(first)
        for i in range(k):
            if i == len(first):
                it = iter(first)
            next(it)
        state = json.loads(json.dumps(first.state_dict()))
        resumed = make(0, prefetch=0)
        resumed.load_state_dict(state)
        rest = as_lists(resumed)
        same(rest, stream[k : k + len(rest)])


def test_iteration_rules_one_epoch_per_for_and_one_iterator_at_a_time():
    ds = Dataset.from_dict({"id": np.arange(10)})
    loader = DataLoader(ds, batch_size=3, shuffle=True, seed=0)
    epoch0 = [np.asarray(b["id"]).tolist() for b in loader]
    a, b = iter(loader), iter(loader)
    with pytest.raises(RuntimeError, match="zip\\(loader, loader\\) cannot work"):
        next(a)
    next(b)
    del a, b
    with pytest.raises(RuntimeError, match="one epoch at a time"):
        list(zip(loader, loader, strict=False))
    fresh = DataLoader(ds, batch_size=3, shuffle=True, seed=0)
    for _ in fresh:
        break
    state = fresh.state_dict()
    assert (state["epoch"], state["batches_consumed"]) == (0, 1)
    epoch1 = [np.asarray(b["id"]).tolist() for b in fresh]  # a new epoch, from its start
    assert len(epoch1) == 4 and sorted(sum(epoch1, [])) == list(range(10))
    assert epoch1 != epoch0 and fresh.epoch == 2
    resumed = DataLoader(ds, batch_size=3, shuffle=True, seed=0)
    resumed.load_state_dict(state)  # the state still points into the epoch that was left
    assert [np.asarray(b["id"]).tolist() for b in resumed] == epoch0[1:]


def test_argument_checks():
    ds, _ = image_ds(4)
    assert DataLoader(ds, batch_size=2, num_workers="auto").num_workers >= 1
    with pytest.raises(ValueError, match="num_workers must be an int >= 0 or 'auto'"):
        DataLoader(ds, batch_size=2, num_workers="many")
    with pytest.raises(ValueError, match="timeout must be"):
        DataLoader(ds, batch_size=2, timeout=0)
    with pytest.raises(TypeError, match="row_transform must be a function"):
        DataLoader(ds, batch_size=2, row_transform=3)
    with pytest.raises(TypeError, match="row_transform must return a dict"):
        next(iter(DataLoader(ds, batch_size=2, row_transform=lambda row: 1)))
    with pytest.raises(ValueError, match="decode_size names \\['id'\\]"):
        DataLoader(ds, batch_size=2, decode_size={"id": (4, 4)})


def test_inline_errors_name_the_row():
    ds, _ = image_ds()
    with pytest.raises(ValueError, match="bad row") as info:
        list(DataLoader(ds, batch_size=4, row_transform=fail_on_13))
    assert any("row_transform on row 13" in note for note in info.value.__notes__)


@pytest.mark.slow
def test_process_workers_match_inline_resume_and_clean_up():
    reference = as_lists(b for loader in [make(0)] for _ in range(2) for b in loader)
    loader = DataLoader(
        image_ds()[0], batch_size=5, shuffle=True, seed=3, row_transform=with_pid, num_workers=2
    )
    pids = []
    got = []
    for _ in range(2):
        for batch in loader:
            got.append(batch)
            pids.append(set(np.asarray(batch["pid"]).tolist()))
    same(as_lists(got), reference)  # slots are reused: earlier batches must be unaffected
    workers = {p.pid for p in multiprocessing.active_children()}
    assert len(workers) == 2
    # the first batch is built in this process while the workers start; the workers, ready by the
    # end of the first epoch, build every batch of the second (started once, not per epoch)
    per_epoch = len(got) // 2
    assert pids[0] == {os.getpid()}
    assert set().union(*pids[:per_epoch]) <= workers | {os.getpid()}
    assert set().union(*pids[per_epoch:]) == workers
    prefix = loader.debug_info()["shared_memory_prefix"]
    assert leftover_segments(prefix)  # the reused slots
    for _ in loader:
        break
    del _
    assert loader.state_dict()["batches_consumed"] == 1
    loader.close()
    assert not leftover_segments(prefix) and not multiprocessing.active_children()

    one = make(1)  # one worker, resumed mid-epoch 1
    one.load_state_dict({**loader.state_dict(), "epoch": 1, "batches_consumed": 2})
    same(as_lists(one), reference[len(one) + 2 :])
    prefix = one.debug_info()["shared_memory_prefix"]
    del one  # garbage collection stops the workers and unlinks their memory
    assert not leftover_segments(prefix) and not multiprocessing.active_children()


def plain(value):
    return [plain(x) for x in value] if isinstance(value, list) else np.asarray(value).tolist()


@pytest.mark.parametrize("transform", [None, plus_one])
def test_rows_that_stop_matching_become_lists_in_every_mode(transform):
    def run(num_workers):
        loader = DataLoader(
            image_ds()[0], 5, row_transform=uneven, transform=transform, num_workers=num_workers
        )
        with loader:
            return [{k: plain(v) for k, v in b.items()} for b in loader]

    inline, workers = run(0), run(1)  # one process worker: the same slot path, half the spawns
    assert len(inline) == 5
    first = inline[0]
    assert first["vec"] == [[0, 1, 2], [1, 2, 3], [2, 3], [3, 4, 5], [4, 5, 6]]
    assert [float(x) for x in first["mixed"]] == [0, 1, 2, 3.5, 4]
    assert first["name"] == [f"row{i}" for i in range(5)]
    pixels = image_ds()[1]
    bump = 1 if transform else 0
    for b, got in enumerate(workers):
        want = inline[b]
        assert got["vec"] == want["vec"] and got["name"] == want["name"]
        assert [float(x) for x in got["mixed"]] == [float(x) for x in want["mixed"]]
        expected = pixels[5 * b : 5 * b + 5].reshape(-1, 8 * 8 * 3)[:, :4].astype(np.int16) + bump
        assert got["flat"] == want["flat"] == expected.tolist()
        assert got["id"] == list(range(5 * b, min(5 * b + 5, 22)))


@pytest.mark.slow
def test_process_worker_errors_and_timeouts_name_the_row_and_clean_up(tmp_path, monkeypatch):
    ds, _ = image_ds(corrupt=13)
    loader = DataLoader(ds, batch_size=4, num_workers=2, row_transform=lambda row: row)
    with pytest.raises(DecodeError, match="column 'image', row 13"):
        list(loader)
    assert loader.debug_info()["backend"] is None and not multiprocessing.active_children()

    # the first epoch may be built partly in this process while the workers start; the second is
    # built by the workers alone: the functions fail there (armed by a file, seen by the workers)
    flag = tmp_path / "armed"
    monkeypatch.setenv(FLAG, str(flag))
    ds, _ = image_ds()
    loader = DataLoader(ds, batch_size=4, num_workers=2, row_transform=fail_on_13_once_armed)
    assert len(list(loader)) == 6
    flag.touch()
    with pytest.raises(ValueError, match="bad row") as info:
        list(loader)
    notes = "\n".join(info.value.__notes__)
    assert "row_transform on row 13 (position 13 of epoch 1)" in notes
    assert "in DataLoader worker" in notes
    assert not multiprocessing.active_children()

    flag.unlink()
    loader = DataLoader(
        ds, batch_size=4, num_workers=2, row_transform=hang_on_5_once_armed, timeout=1.5
    )
    assert len(list(loader)) == 6
    flag.touch()
    prefix = loader.debug_info()["shared_memory_prefix"]
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"batch 1 of epoch 1 \(rows 4, 5, 6, 7, stuck at row 5"):
        list(loader)
    assert time.monotonic() - start < 60
    assert not multiprocessing.active_children() and not leftover_segments(prefix)


def test_the_first_batch_is_built_here_with_its_errors_and_timeout():
    """While the workers start, the first batches are built in this process (batch 0 always: the
    workers start once it is out), with errors that say where they ran and the loader's timeout;
    /dev/shm's room for the workers' slots is checked on them."""
    ds, _ = image_ds()
    loader = DataLoader(ds, batch_size=4, num_workers=1, row_transform=fail_on_2, prefetch=0)
    with pytest.raises(ValueError, match="bad row") as info:
        next(iter(loader))
    notes = "\n".join(info.value.__notes__)
    assert "row_transform on row 2 (position 2 of epoch 0)" in notes
    assert f"in the main process (pid {os.getpid()})" in notes
    assert loader.debug_info()["backend"] is None and not multiprocessing.active_children()

    loader = DataLoader(ds, batch_size=4, num_workers=1, row_transform=slow_on_1, timeout=0.5)
    with pytest.raises(TimeoutError) as info:
        next(iter(loader))
    assert str(info.value) == (
        "DataLoader timeout=0.5 s: batch 0 of epoch 0 (rows 0, 1, 2, 3, stuck at row 1) was not "
        "ready (built in the main process while the workers started)"
    )
    assert not multiprocessing.active_children()


SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    import numpy as np
    from jaxfeed import DataLoader, Dataset

    def stuck(row):  # defined in __main__: reaches the workers by value
        if MODE == "hang" and multiprocessing.parent_process() is not None:
            open(sys.argv[2], "w").close()  # the test waits for this: a worker is hung
            time.sleep(3600)  # in a worker (this process builds the first batches itself)
        return {"x": row["x"] * 2, "pid": os.getpid()}

    MODE = sys.argv[1]
    loader = DataLoader(Dataset.from_dict({"x": np.arange(8)}), batch_size=2, num_workers=2,
                        row_transform=stuck, prefetch=1)
    it = iter(loader)
    batch = next(it)  # built in this process; the workers start once it is out
    children = multiprocessing.active_children()
    print(" ".join(str(p.pid) for p in children), flush=True)
    if MODE == "exit":  # once the test has found this process's children (the resource tracker
        while not os.path.exists(sys.argv[2]):  # is re-parented when this process is gone)
            time.sleep(0.01)
        os._exit(3)
    if MODE == "hang":  # the next batch built by a worker hangs
        print("waiting", flush=True)
        while True:
            for _ in loader:
                pass
    time.sleep(3600)
    """
)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
        return f.read().split(")")[-1].split()[0] != "Z"


def wait_gone(pids, seconds=15):
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def start_script(start, mode, hung="/nonexistent"):
    """The script read from stdin (no file: like a notebook, functions must travel by value), in
    its own process group (``start`` is the ``process_group`` fixture)."""
    proc = start(
        [sys.executable, "-", mode, hung],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdin.write(SCRIPT)
    proc.stdin.close()
    line = proc.stdout.readline()
    assert line.strip(), proc.stderr.read()
    return proc, [int(p) for p in line.split()]


def segments_of(pid):
    return leftover_segments(f"/jf{pid}_")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_workers_exit_when_the_main_process_dies(process_group, tmp_path, how):
    go = tmp_path / "go"
    proc, workers = start_script(process_group, "exit" if how == "exit" else "sleep", str(go))
    assert len(workers) >= 1 and all(alive(p) for p in workers)
    tracker = [
        int(p) for p in os.listdir("/proc") if p.isdigit() and _is_tracker_of(int(p), proc.pid)
    ]
    assert len(tracker) == 1  # multiprocessing's resource tracker, which must go too
    go.touch()  # "exit": the script ends now
    if how == "sigkill":
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert wait_gone(workers + tracker) == []
    assert segments_of(proc.pid) == []


def _is_tracker_of(pid, parent):
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().split(")")[-1].split()[1])
        with open(f"/proc/{pid}/cmdline") as f:
            return ppid == parent and "resource_tracker" in f.read()
    except OSError:
        return False


@pytest.mark.slow
def test_ctrl_c_stops_a_hung_worker(process_group, tmp_path):
    hung = tmp_path / "hung"
    proc, workers = start_script(process_group, "hang", str(hung))
    assert proc.stdout.readline().strip() == "waiting"
    end = time.monotonic() + 60  # until a worker is in the hanging row
    while not hung.exists() and time.monotonic() < end:
        time.sleep(0.01)
    assert hung.exists(), "no worker reached the hanging row"
    os.killpg(proc.pid, signal.SIGINT)  # the terminal sends it to the whole process group
    assert proc.wait(timeout=30) != 0
    err = proc.stderr.read()
    assert "KeyboardInterrupt" in err and err.count("Traceback") == 1, err
    assert wait_gone(workers, 10) == [] and segments_of(proc.pid) == []


def test_timeout_without_workers_names_the_rows():
    import threading

    release = threading.Event()

    def wait_on_row_5(row):
        if row["id"] == 5:
            release.wait(30)
        return row

    ds = Dataset.from_dict({"id": np.arange(12)})
    loader = DataLoader(ds, batch_size=4, row_transform=wait_on_row_5, prefetch=1, timeout=0.5)
    try:
        with pytest.raises(TimeoutError, match=r"batch 1 of epoch 0 \(rows 4, 5, 6, 7\)"):
            list(loader)
    finally:
        release.set()
    loader.close()
