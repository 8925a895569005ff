"""Row and batch functions of tests/loading/test_loader_workers.py, in a module that imports only
numpy: the loader's process workers unpickle them by reference, so a worker imports this module
and not the test module (whose ``from jaxfeed import DataLoader`` imports JAX, 1.4 s idle and
3-4 s on the loaded 2-core machine, in every worker the file starts)."""

import os
import time

import numpy as np


def augment(row, rng):
    image = row["image"].astype(np.float32) / 255
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return {"image": image + rng.normal(size=(1, 1, 3)).astype(np.float32), "id": row["id"]}


def with_pid(row, rng):
    return {**augment(row, rng), "pid": os.getpid()}


def fail_on_13(row):
    if row["id"] == 13:
        raise ValueError("bad row")
    return row


def hang_on_5(row):
    if row["id"] == 5:
        time.sleep(3600)
    return row


FLAG = "JAXFEED_TEST_FLAG_FILE"  # a file whose presence switches the next functions on


def armed():
    return os.path.exists(os.environ.get(FLAG, "/nonexistent"))


def fail_on_13_once_armed(row):
    if row["id"] == 13 and armed():
        raise ValueError("bad row")
    return row


def hang_on_5_once_armed(row):
    if row["id"] == 5 and armed():
        time.sleep(3600)
    return row


def fail_on_2(row):
    if row["id"] == 2:
        raise ValueError("bad row")
    return row


def slow_on_1(row):
    if row["id"] == 1:
        time.sleep(2)
    return row


def uneven(row):
    i = int(row["id"])
    return {
        "id": row["id"],
        "vec": np.arange(3 if i % 5 != 2 else 2, dtype=np.float32) + i,  # one ragged row per batch
        "mixed": np.int32(i) if i % 5 != 3 else np.float64(i + 0.5),  # a row of another dtype
        "name": f"row{i}",
        "flat": row["image"].reshape(-1)[:4].astype(np.int16),  # same shape everywhere
    }


def plus_one(batch):
    batch["flat"] += 1  # edits the built buffer in place: the copy into the slot must see it
    return batch
