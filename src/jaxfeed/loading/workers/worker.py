"""The worker processes' side of :class:`~jaxfeed.loading.workers.ProcessBackend`: read the recipe,
say it is ready (with what its start cost), build the batches it is sent into its shared-memory
slots. A worker runs no main script; it imports this module, what it imports (numpy, cloudpickle,
the features' decoders; never JAX) and what the user's functions need."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

import cloudpickle

from jaxfeed._base import spawn as _spawn
from jaxfeed.loading.workers.build import build_plan
from jaxfeed.loading.workers.shm import _SlotAlloc, _Slots, _write

_WATCHDOG_SECONDS = 0.2
STARTING = -2  # a worker's progress value until it is ready (then -1: idle, or the row it builds)
# top-level packages a worker's start is worth blaming on when they appear in it
HEAVY = ("torch", "tensorflow", "jax", "flax", "transformers", "sklearn", "pandas", "cv2")


def _error_payload(err: BaseException) -> bytes:
    try:
        return cloudpickle.dumps(err)
    except Exception:
        return cloudpickle.dumps(RuntimeError(f"{type(err).__name__}: {err}"))


def worker_main(conn: Any, payload: bytes, prefix: str, parent: int, progress: Any) -> None:
    """A worker process: build the batches it is sent until told to stop or its parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    slots = _Slots(prefix)

    def watchdog() -> None:
        while True:
            time.sleep(_WATCHDOG_SECONDS)
            if os.getppid() != parent:
                slots.unlink_all()
                os._exit(0)

    threading.Thread(target=watchdog, name="jaxfeed-watchdog", daemon=True).start()
    before, began = set(sys.modules), time.time()
    try:
        recipe = cloudpickle.loads(payload)
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    start = {
        "entered": _spawn.STARTED_AT or began,  # the interpreter is up
        "modules": began - (_spawn.RECEIVED_AT or began),  # importing this module's imports
        "recipe": time.time() - began,
        "heavy": sorted({m.split(".")[0] for m in set(sys.modules) - before} & set(HEAVY)),
        "cpu": time.process_time(),
        "ready_at": time.time(),
    }
    progress.value = -1  # ready: the next worker may start importing
    conn.send(("ready", os.getpid(), start))
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message[0] != "job":
                break
            _, job_id, slot, job = message
            alloc = _SlotAlloc(slots, slot)
            try:
                plan = build_plan(recipe, job, progress, alloc)
                reply = ("batch", job_id, slot, *_write(plan, slots, slot, alloc))
            except BaseException as err:
                progress.value = -1
                reply = ("error", job_id, _error_payload(err), traceback.format_exc(), slot)
            finally:
                plan = None  # no view of the slot may outlive the job (see _SlotAlloc.release)
                alloc.release()
            try:
                conn.send(reply)
            except (BrokenPipeError, OSError):
                break
            except Exception as err:  # a value pickle cannot take
                try:  # an object of a class from the main script, which this process never ran
                    data = cloudpickle.dumps(reply)
                except Exception:  # an unpicklable value in a batch
                    conn.send(("error", job_id, _error_payload(err), traceback.format_exc(), slot))
                else:
                    conn.send_bytes(data)  # what conn.recv() reads back
    finally:
        slots.unlink_all()
