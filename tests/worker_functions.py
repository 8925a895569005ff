"""Row transforms for worker tests, in a module that imports only numpy: a worker that runs them
imports this module (they are pickled by reference) and nothing heavier, so it starts quickly and
shows what jaxfeed itself brings into a worker."""

import multiprocessing
import os
import sys
import time

import numpy as np


def tag(row):
    """The row's id, the pid that built it, and whether JAX or flax was imported there."""
    heavy = any(m.split(".")[0] in ("jax", "jaxlib", "flax") for m in sys.modules)
    return {"id": row["id"], "pid": np.int64(os.getpid()), "jax": np.bool_(heavy)}


def slow_here(row):
    """:func:`tag`, slow in the main process only (so workers take over mid-epoch)."""
    if multiprocessing.parent_process() is None:
        time.sleep(0.03)
    return tag(row)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")  # fmt: skip


def blas_threads(row):
    """The row's id and, for each of :data:`THREAD_VARIABLES`, the value the building process
    has in its environment (0: unset)."""
    return {"id": row["id"], **{n: np.int64(os.environ.get(n, "0")) for n in THREAD_VARIABLES}}


def scaled_and_tagged(row):
    """The row's image decoded and scaled to [0, 1], its label, and :func:`tag`'s pid and flag."""
    image = np.asarray(row["image"], np.float32) / 255
    return {**tag(row), "image": image, "label": row["label"]}
