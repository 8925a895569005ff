"""How `DataLoader` builds batches: decode, per-row transforms, collation; inline, in threads, or in
spawned worker processes that hand finished batches over in shared memory.

A batch is described by a :class:`Job` (its epoch, step, rows and positions in the epoch, and for
Arrow datasets the already gathered columns, media still encoded). :func:`build` turns a job into
numpy columns with the same code in every mode, so results do not depend on where it runs:

1. media columns (``Image``/``Audio``) are decoded;
2. ``row_transform(row)`` or ``row_transform(row, rng)`` runs on every row, ``rng`` seeded by
   ``(seed, epoch, position of the row in the epoch)``;
3. rows are collated (stacked when they share shape and dtype), then the recipe's ``collate``
   (:mod:`jaxfeed.padding` or :mod:`jaxfeed.packing`) pads or packs variable-length columns;
4. ``transform(batch)`` or ``transform(batch, rng)`` runs on the batch, ``rng`` seeded by
   ``(seed, epoch, step)``.

:class:`ProcessBackend` runs jobs in ``num_workers`` spawned processes (never forked: the parent
may run JAX). The recipe (features and the user's functions) is sent once, by value with
cloudpickle, so functions defined in a script's ``__main__`` or a notebook work. Each worker owns
shared-memory slots that it reuses (growing them when a batch needs more room): a finished batch is
written into a slot, only its layout travels through the pipe, the consumer reads it in place and
gives the slot back after the transfer, or, on a CPU device where the ``jax.Array`` aliases the
slot, once that array is garbage (another slot is made meanwhile). Workers ignore SIGINT (the parent
handles Ctrl-C), exit within a fraction of a second when their parent dies (a watchdog thread),
and unlink their segments on every exit path; the parent unlinks what a killed worker left.

A spawned worker needs a second or more to start (a fresh interpreter that imports the main script
again), against a fraction of that for a forked one: meanwhile :class:`ProcessBackend` builds the
first batches in the main process, with the same code and generators (so the same batches), and
starts the workers once the first batch is out; from the first ready worker on, the workers build
everything. The end of the first epoch waits for every worker, so a worker that cannot start is
still an error of that epoch.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import inspect
import mmap
import multiprocessing
import os
import queue
import secrets
import signal
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import cloudpickle
import numpy as np

from jaxfeed.features import DecodeError
from jaxfeed.features.media import MediaFeature

NO_MAIN_GUARD_EXIT = 86  # a worker's exit status when it found the main script unguarded
_ALIGN = 64
JOBS_PER_WORKER = 4  # batches queued or being built per process worker
# Process workers start once the first batch, built in the parent, is out, or this many seconds
# after the backend was made: a worker's start (a fresh interpreter importing the main script) is
# a burst of CPU that, on the loaded 2-core machine, made that first batch 1.7x slower (medians
# of 5 alternating runs: 1.57 s when spawned at once, 0.91 s with the delay).
SPAWN_DELAY = 0.5
_MIN_SLOT = 1 << 20
_WATCHDOG_SECONDS = 0.2
SHM_DIR = "/dev/shm"
SHM_LIMIT_ENV = "JAXFEED_SHM_BYTES"  # room workers may take in SHM_DIR (default: its free space)


class SharedMemoryRoomError(OSError):
    """``/dev/shm`` has no room for a worker's batch slot (Docker's default is 64 MB)."""


def shm_room() -> int | None:
    """Bytes free in ``/dev/shm`` (None where there is no such folder), capped by
    ``$JAXFEED_SHM_BYTES`` when it is set."""
    free = None
    with contextlib.suppress(OSError):
        st = os.statvfs(SHM_DIR)
        free = st.f_bavail * st.f_frsize
    limit = os.environ.get(SHM_LIMIT_ENV)
    if limit:
        try:
            cap = int(float(limit))
        except ValueError:
            raise ValueError(
                f"${SHM_LIMIT_ENV} must be a number of bytes, got {limit[:40]!r}"
            ) from None
        free = cap if free is None else min(free, cap)
    return free


def _room_message(needed: int, free: int | None) -> str:
    mib = 1 << 20
    have = "no room" if free is None else f"{free / mib:.0f} MiB free"
    return (
        f"a DataLoader worker needs a shared-memory slot of {needed / mib:.0f} MiB for one batch "
        f"(up to {JOBS_PER_WORKER} per worker), but {SHM_DIR} has {have}. Give it more room "
        f"(docker run --shm-size=1g, or a larger emptyDir medium: Memory in Kubernetes), use a "
        "smaller batch_size or fewer num_workers, or DataLoader(worker_mode='thread'), which "
        "needs no shared memory"
    )


def takes_rng(fn: Callable) -> bool:
    """Whether ``fn`` accepts a second positional argument (the generator)."""
    try:
        params = [
            p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]  # fmt: skip
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) for k in key])


# ---------------------------------------------------------------------------------- building
class Recipe:
    """Everything a worker needs to build any batch; sent to each worker once."""

    def __init__(
        self,
        *,
        media: dict[str, MediaFeature],
        items: Any,
        row_transform: Callable | None,
        transform: Callable | None,
        seed: int,
        decode_size: dict[str, tuple[int, int]],
        collate: Callable | None = None,
    ) -> None:
        self.media = media
        self.collate = collate  # collate(batch, job): padding or packing of ragged columns
        self.items = items  # a generic source read in the worker (None for Arrow datasets)
        self.row_transform = row_transform
        self.row_rng = row_transform is not None and takes_rng(row_transform)
        self.transform = transform
        self.transform_rng = transform is not None and takes_rng(transform)
        self.seed = seed
        self.decode_size = decode_size


@dataclass
class Job:
    """One batch to build: ``rows`` of the dataset at ``positions`` of epoch ``epoch``."""

    epoch: int
    step: int
    rows: np.ndarray
    positions: np.ndarray
    columns: dict[str, Any] | None  # gathered by the parent for Arrow datasets
    layout: Any = None  # what collate needs beyond the rows: a packing layout, padding widths


class _Stack:
    """A column still to be stacked (possibly straight into shared memory)."""

    __slots__ = ("dtype", "shape", "values")

    def __init__(self, values: list, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.values, self.shape, self.dtype = values, shape, dtype

    def into(self, out: np.ndarray) -> np.ndarray:
        for i, v in enumerate(self.values):
            out[i] = v
        return out


def _stackable(values: list) -> _Stack | None:
    if not values:
        return None
    first = values[0]
    if not isinstance(first, np.ndarray | np.generic | bool | int | float):
        return None
    head = np.asarray(first)
    if head.dtype.hasobject or head.dtype.kind in "USV":
        return None
    for v in values:
        if not isinstance(v, np.ndarray | np.generic | bool | int | float):
            return None
        if isinstance(v, np.ndarray | np.generic):
            if v.shape != head.shape or v.dtype != head.dtype:
                return None
        elif head.shape != () or np.asarray(v).dtype != head.dtype:
            return None
    return _Stack(values, (len(values), *head.shape), head.dtype)


def _materialize(plan: dict[str, Any], alloc: Callable | None = None) -> dict[str, Any]:
    out = {}
    for key, value in plan.items():
        if isinstance(value, _Stack):
            buffer = (
                alloc(key, value.shape, value.dtype)
                if alloc is not None
                else np.empty(value.shape, value.dtype)
            )
            out[key] = value.into(buffer)
        else:
            out[key] = value
    return out


def _note(err: BaseException, text: str) -> BaseException:
    with contextlib.suppress(Exception):
        if text not in getattr(err, "__notes__", ()):
            err.add_note(text)
    return err


def _decode(recipe: Recipe, column: str, stored: Any, row: int, index: int) -> Any:
    feature = recipe.media[column]
    try:
        size = recipe.decode_size.get(column)
        if size is not None and hasattr(feature, "decode_array"):
            return feature.decode_array(stored, index, min_size=size)
        return feature.decode_value(stored, index)
    except DecodeError as err:
        raise err.at(column, row) from None


class _Rows:
    """Per-row values of a batch being built. Columns whose rows are arrays of one shape and dtype
    go into their batch buffer row by row, while each row is still in the CPU cache (collecting
    the rows first and stacking them afterwards cost a third of the throughput of an image
    pipeline); the buffers come from ``alloc`` (a worker's shared-memory slot) or ``np.empty``.
    A column whose rows stop matching becomes a plain list."""

    def __init__(self, n: int, alloc: Callable | None) -> None:
        self.n = n
        self.alloc = alloc
        self.buffers: dict[str, np.ndarray] = {}
        self.lists: dict[str, list] = {}

    def add(self, i: int, row: dict[str, Any]) -> None:
        if i == 0:
            self._start(row)
        for key, value in row.items():
            buffer = self.buffers.get(key)
            if buffer is not None:
                if _fits(value, buffer):
                    buffer[i] = value
                    continue
                self.lists[key] = list(buffer[:i].copy())  # rows so far, as separate arrays
                del self.buffers[key]
            self.lists[key].append(value)

    def _start(self, row: dict[str, Any]) -> None:
        specs = []
        for key, value in row.items():
            if isinstance(value, np.ndarray | np.generic | bool | int | float):
                head = np.asarray(value)
                if not head.dtype.hasobject and head.dtype.kind not in "USV":
                    specs.append((key, (self.n, *head.shape), head.dtype))
                    continue
            self.lists[key] = []
        if self.alloc is not None and specs:
            self.buffers = self.alloc(specs)
        else:
            self.buffers = {key: np.empty(shape, dtype) for key, shape, dtype in specs}

    def columns(self, keys: Any) -> dict[str, Any]:
        out = {}
        for key in keys:
            if key in self.buffers:
                out[key] = self.buffers[key]
            else:
                values = self.lists[key]
                out[key] = _stackable(values) or _stack_if_same(values)
        return out


def _fits(value: Any, buffer: np.ndarray) -> bool:
    if isinstance(value, np.ndarray | np.generic):
        return value.shape == buffer.shape[1:] and value.dtype == buffer.dtype
    if isinstance(value, bool | int | float) and buffer.ndim == 1:
        return np.asarray(value).dtype == buffer.dtype
    return False


def build_plan(
    recipe: Recipe, job: Job, progress: Any = None, alloc: Callable | None = None
) -> dict[str, Any]:
    """The batch of ``job`` as numpy columns (arrays still to stack left as ``_Stack``).

    ``alloc(specs)`` (``specs``: ``[(column, shape, dtype)]``) returns the buffers (by column)
    where the rows of the batch's array columns are written as they are made (see ``_Rows``).
    """
    columns = job.columns if job.columns is not None else recipe.items.gather(job.rows, None)
    rows = job.rows
    n = len(rows)
    fn = recipe.row_transform
    direct = recipe.transform is None and recipe.collate is None
    sink = _Rows(n, alloc if direct else None)
    media = [key for key in columns if key in recipe.media]
    if fn is None:
        # Without media to decode the batch is the gathered columns as they are: no per-row
        # Python (a loop over empty rows here halved the in-memory loader's throughput).
        for i in range(n if media else 0):
            row_id = int(rows[i])
            if progress is not None:
                progress.value = row_id
            sink.add(i, {key: _decode(recipe, key, columns[key][i], row_id, i) for key in media})
        plan: dict[str, Any] = {}
        decoded = sink.columns(media) if n and media else {key: [] for key in media}
        for key, value in columns.items():
            plan[key] = decoded[key] if key in recipe.media else value
    else:
        keys = None
        for i in range(n):
            row_id = int(rows[i])
            if progress is not None:
                progress.value = row_id
            row = {
                key: _decode(recipe, key, value[i], row_id, i) if key in recipe.media else value[i]
                for key, value in columns.items()
            }
            try:
                if recipe.row_rng:
                    result = fn(row, _rng(recipe.seed, job.epoch, job.positions[i]))
                else:
                    result = fn(row)
            except Exception as err:
                raise _note(
                    err,
                    f"raised by row_transform on row {row_id} (position {int(job.positions[i])} "
                    f"of epoch {job.epoch})",
                ) from None
            if not isinstance(result, dict):
                raise TypeError(
                    f"row_transform must return a dict of columns, got {type(result).__name__} "
                    f"for row {row_id}"
                )
            if keys is None:
                keys = list(result)
            elif result.keys() != set(keys):
                raise ValueError(
                    f"row_transform returned keys {sorted(result)} for row {row_id} but "
                    f"{sorted(keys)} for row {int(rows[0])}; every row needs the same keys"
                )
            sink.add(i, result)
        plan = sink.columns(keys or [])
    if progress is not None:
        progress.value = -1
    if recipe.collate is not None:
        plan = recipe.collate(_materialize(plan), job)
    if recipe.transform is not None:
        batch = _materialize(plan)
        try:
            if recipe.transform_rng:
                batch = recipe.transform(batch, _rng(recipe.seed, job.epoch, job.step))
            else:
                batch = recipe.transform(batch)
        except Exception as err:
            raise _note(
                err, f"raised by transform on batch {job.step} of epoch {job.epoch}"
            ) from None
        if not isinstance(batch, dict):
            raise TypeError(f"transform must return a dict of columns, got {type(batch).__name__}")
        plan = batch
    return plan


def _stack_if_same(values: list) -> np.ndarray | list:
    if (
        values
        and all(isinstance(x, np.ndarray) for x in values)
        and all(x.shape == values[0].shape and x.dtype == values[0].dtype for x in values)
    ):
        return np.stack(values)
    return values


def build(recipe: Recipe, job: Job) -> dict[str, Any]:
    """The numpy batch of ``job`` (inline and thread modes)."""
    return _materialize(build_plan(recipe, job))


# ---------------------------------------------------------------------------------- backends
class InlineBackend:
    """Builds each batch when it is collected, in the calling thread."""

    capacity = 1

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    def submit(self, job: Job) -> Job:
        return job

    def collect(
        self, ticket: Job, job: Job, timeout: float | None, cancel: Any = None
    ) -> tuple[dict, Callable | None]:
        return build(self.recipe, job), None

    def discard(self) -> None:
        pass

    def ensure_started(self, cancel: Any = None) -> None:
        pass

    def start_workers(self, now: bool = True) -> None:
        pass

    def close(self, kill: bool = False) -> None:
        pass


class ThreadBackend:
    """Builds batches in a pool of threads (useful when decoders release the GIL)."""

    def __init__(self, recipe: Recipe, num_workers: int) -> None:
        import concurrent.futures as cf

        self.recipe = recipe
        self.pool = cf.ThreadPoolExecutor(num_workers, thread_name_prefix="jaxfeed-worker")
        self.capacity = 2 * num_workers
        self.pending: set = set()

    def submit(self, job: Job) -> Any:
        future = self.pool.submit(build, self.recipe, job)
        self.pending.add(future)
        return future

    def collect(
        self, ticket: Any, job: Job, timeout: float | None, cancel: Any = None
    ) -> tuple[dict, Callable | None]:
        import concurrent.futures as cf

        end = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                result = ticket.result(timeout=0.1)
                self.pending.discard(ticket)
                return result, None
            except cf.TimeoutError:
                if cancel is not None and cancel.is_set():
                    raise Cancelled from None
                if end is not None and time.monotonic() > end:
                    raise TimeoutError(
                        f"DataLoader timeout={timeout:g} s: {_describe(job)} was not ready"
                    ) from None

    def ensure_started(self, cancel: Any = None) -> None:
        pass

    def start_workers(self, now: bool = True) -> None:
        pass

    def discard(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pending.clear()

    def close(self, kill: bool = False) -> None:
        self.discard()
        self.pool.shutdown(wait=not kill, cancel_futures=True)


class Cancelled(Exception):
    """The consumer stopped waiting (the epoch was closed)."""


class WorkerError(RuntimeError):
    """A worker process died or could not start."""


class MainGuardError(RuntimeError):
    """The main script started worker processes while being re-imported by a spawned worker."""


def main_guard_message(starter: str, fallback: str) -> str:
    """What to do when a spawned process re-running the main script reached ``starter`` again.

    >>> print(main_guard_message("Dataset.map(num_proc=...)", "num_proc=None").splitlines()[0])
    ... # doctest: +ELLIPSIS
    Dataset.map(num_proc=...) starts worker processes with 'spawn', which runs ... again in each ...
    """
    main = sys.modules.get("__main__")
    script = os.path.basename(getattr(main, "__file__", "") or "your script")
    return (
        f"{starter} starts worker processes with 'spawn', which runs {script} again in each of "
        f"them; {script} reached {starter} at import time. Put the code that runs it under\n\n"
        '    if __name__ == "__main__":\n\n'
        f"at the bottom of {script} (or use {fallback})."
    )


@contextlib.contextmanager
def _main_without_file() -> Any:
    """Spawn re-runs the main script in workers from ``__main__.__file__``; code from stdin or
    ``-c`` has a ``__file__`` that is no file (which makes every worker die): hide it, as
    notebooks do (the user's functions reach the workers by value anyway)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    hide = (
        path is not None
        and getattr(getattr(main, "__spec__", None), "name", None) is None
        and not os.path.isfile(os.path.join(multiprocessing.process.ORIGINAL_DIR or "", path))
    )
    if hide:
        del main.__file__
    try:
        yield
    finally:
        if hide:
            main.__file__ = path


def in_spawn_bootstrap() -> bool:
    """True while a spawned process is still importing its parent's main module."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def _spawned_main(target: Callable, conn: Any, *args: Any) -> None:
    """A spawned process: read the payload from the pipe, then run ``target(conn, payload, ...)``."""
    try:
        payload = conn.recv_bytes()
    except (EOFError, OSError):  # the parent went away before sending it
        return
    target(conn, payload, *args)


class Spawned:
    """One worker process started with ``spawn`` (never ``fork``: the parent may run JAX), with a
    duplex pipe ``conn`` to it.

    Its ``payload`` (the user's functions, a shard of rows: any size) goes through that pipe once
    the process runs, written by a thread. It never travels with the process's start-up data:
    ``multiprocessing`` writes those to the child while holding the pipe's other end open itself,
    so a child that dies before reading them (a script without a main guard, an import error, a
    kill) leaves that write blocked forever once they pass the pipe's 64 KiB. Here a dead child
    closes the only reading end: the write fails at once and the parent reads end-of-file or the
    exit status, which :meth:`failure` turns into a clear error.

    Called while this process is itself a spawned child re-running an unguarded main script, it
    leaves quietly with :data:`NO_MAIN_GUARD_EXIT` (the parent reports it once, with
    :class:`MainGuardError`, instead of one bootstrapping traceback per child).
    """

    def __init__(self, target: Callable, args: tuple, name: str, payload: bytes) -> None:
        if in_spawn_bootstrap():
            os._exit(NO_MAIN_GUARD_EXIT)
        context = multiprocessing.get_context("spawn")  # never fork a process that runs JAX
        self.conn, child = context.Pipe(duplex=True)
        self.process = context.Process(
            target=_spawned_main, args=(target, child, *args), name=name, daemon=True
        )
        try:
            with _main_without_file():
                self.process.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()  # the child's end lives in the child only: its death is end-of-file
        self._sender = threading.Thread(
            target=self._send, args=(payload,), name=f"{name}-payload", daemon=True
        )
        self._sender.start()

    def _send(self, payload: bytes) -> None:
        with contextlib.suppress(OSError):  # the child died: the parent sees its exit status
            self.conn.send_bytes(payload)

    def sent(self) -> None:
        """Wait until the payload is written (before sending anything else on ``conn``)."""
        self._sender.join()

    def failure(
        self, who: str, doing: str, error: type[Exception], starter: str, fallback: str
    ) -> Exception:
        """The exception for this process having died: :class:`MainGuardError` when it stopped
        in an unguarded main script, else ``error`` naming ``who``, its pid and exit status."""
        code = self.process.exitcode
        if code == NO_MAIN_GUARD_EXIT:
            return MainGuardError(main_guard_message(starter, fallback))
        how = (
            f"was killed by signal {-code}" if code is not None and code < 0 else f"exited ({code})"
        )
        parts = [f"{who} (pid {self.process.pid}) {how}", doing]
        if code is not None and code > 0:
            parts.append("(what it printed on stderr says why)")
        return error(" ".join(p for p in parts if p))

    def stop(self, kill: bool = True, timeout: float = 5) -> None:
        """End the process (killed when still alive after ``timeout``) and close the pipe."""
        if kill and self.process.is_alive():
            self.process.kill()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._sender.join(5)  # its write ends with the process
        with contextlib.suppress(Exception):
            self.conn.close()


def _attach(name: str, size: int) -> mmap.mmap:
    """Map a worker's segment without registering it with the resource tracker (the worker
    owns it and unlinks it)."""
    if os.name == "posix":
        import _posixshmem

        fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
        try:
            return mmap.mmap(fd, size)
        finally:
            os.close(fd)
    segment = shared_memory.SharedMemory(name.lstrip("/"))  # pragma: no cover - Windows
    return segment._mmap  # type: ignore[attr-defined]


def _unlink(name: str) -> None:
    """Unlink a segment a killed worker created. Workers' segments are never registered with
    the resource tracker (see :class:`_Segment`), so there is nothing to tell it: unregistering
    a name it never saw printed a stray ``KeyError`` traceback at exit."""
    with contextlib.suppress(Exception):
        import _posixshmem

        _posixshmem.shm_unlink(name)


class _Segment:
    """A POSIX shared-memory segment a worker creates, its pages reserved up front, and not
    registered with ``multiprocessing``'s resource tracker: the worker unlinks it, its watchdog
    when the parent dies, the parent what a killed worker left (by name prefix). A segment
    created and killed before the tracker heard of it made the parent's unregister fail."""

    def __init__(self, name: str, size: int) -> None:
        import _posixshmem  # POSIX only (ProcessBackend's workers); the module has no stub

        self.name, self.size = name.lstrip("/"), size
        fd = _posixshmem.shm_open("/" + self.name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            os.ftruncate(fd, size)
            # take the pages now: a full /dev/shm fails here with ENOSPC instead of killing the
            # worker with SIGBUS when the batch is written
            os.posix_fallocate(fd, 0, size)
            self._mmap = mmap.mmap(fd, size)
        except BaseException:
            with contextlib.suppress(OSError):
                _posixshmem.shm_unlink("/" + self.name)
            raise
        finally:
            os.close(fd)
        self.buf: memoryview | None = memoryview(self._mmap)

    def close(self) -> None:
        """Unmap (``BufferError`` while arrays still view it: then it goes with them)."""
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        self._mmap.close()

    def unlink(self) -> None:
        import _posixshmem  # POSIX only

        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink("/" + self.name)


def leftover_segments(prefix: str) -> list[str]:
    """Segments still present whose names start with ``prefix`` (Linux: ``/dev/shm``)."""
    return sorted("/" + os.path.basename(p) for p in glob.glob(f"/dev/shm/{prefix.lstrip('/')}*"))


class _Worker:
    def __init__(self, spawned: Spawned, progress: Any) -> None:
        self.spawned, self.progress = spawned, progress
        self.process, self.conn = spawned.process, spawned.conn
        self.free = deque([0, 1])  # slot indexes not holding a batch in use
        self.slots = 2  # slots so far (more are made while the consumer holds batches)
        self.outstanding: deque = deque()  # job ids sent, in order
        self.maps: dict[str, mmap.mmap] = {}


class _Progress:
    """The row a build is at (-1 between rows), as a worker's shared ``Value`` has it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = -1


class _Starter:
    """Builds jobs in this process, in one daemon thread, while the worker processes start (see
    :class:`ProcessBackend`). A job that raises comes back as its exception, with a note saying
    where it ran; the consumer waits for a job with the loader's ``timeout`` (a row that hangs
    here leaves this thread behind, as with ``worker_mode="thread"``)."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.progress = _Progress()
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.done: dict[int, tuple[bool, Any]] = {}
        self.dropped: set[int] = set()
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="jaxfeed-start", daemon=True)
        self.thread.start()

    def put(self, job_id: int, job: Job) -> None:
        self.jobs.put((job_id, job))

    def stop(self) -> None:
        """End the thread once the jobs already given are built."""
        self.jobs.put(None)

    def drop(self, job_ids: set[int]) -> None:
        """Forget these jobs' batches (the epoch was left early)."""
        with self.cond:
            self.dropped.update(job_ids)
            for job_id in job_ids:
                self.done.pop(job_id, None)

    def _run(self) -> None:
        while True:
            item = self.jobs.get()
            if item is None:
                return
            job_id, job = item
            with self.cond:
                if job_id in self.dropped:
                    self.dropped.discard(job_id)
                    continue
            try:
                result: tuple[bool, Any] = (
                    True,
                    _materialize(build_plan(self.recipe, job, self.progress)),
                )
            except BaseException as err:
                self.progress.value = -1
                result = (False, err)
            with self.cond:
                if job_id in self.dropped:
                    self.dropped.discard(job_id)
                else:
                    self.done[job_id] = result
                self.cond.notify_all()

    def take(
        self,
        job_id: int,
        job: Job,
        timeout: float | None,
        cancel: Any,
    ) -> dict[str, Any]:
        """The batch of ``job`` (raising its error, ``TimeoutError`` after ``timeout``)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.cond:
                if job_id in self.done:
                    ok, value = self.done.pop(job_id)
                    break
                self.cond.wait(0.05)
                if job_id in self.done:
                    continue
                if (cancel is not None and cancel.is_set()) or (
                    end is not None and time.monotonic() > end
                ):
                    self.dropped.add(job_id)
                    if cancel is not None and cancel.is_set():
                        raise Cancelled
                    raise TimeoutError(
                        f"DataLoader timeout={timeout:g} s: {_describe(job, self.progress)} was "
                        "not ready (built in the main process while the workers started)"
                    )
        if not ok:
            raise _note(
                value,
                f"in the main process (pid {os.getpid()}), which builds the first batches while "
                "the DataLoader's workers start",
            )
        _check_room(value)
        return value


def _slot_size(nbytes: int) -> int:
    """Bytes of a slot made for a batch of ``nbytes`` (room to grow a little)."""
    return max(_MIN_SLOT, int(nbytes * 1.25) // _ALIGN * _ALIGN + _ALIGN)


def _check_room(batch: dict[str, Any]) -> None:
    """Raise :class:`SharedMemoryRoomError` now, for a batch built in this process, when the
    workers could not hold one like it in ``/dev/shm`` (the error they would raise later)."""
    specs = [
        (k, v.shape, v.dtype)
        for k, v in batch.items()
        if isinstance(v, np.ndarray) and not v.dtype.hasobject
    ]
    size = _slot_size(_layout(specs)[1])
    free = shm_room()
    if free is not None and size > free:
        raise SharedMemoryRoomError(_room_message(size, free))


class ProcessBackend:
    """``num_workers`` spawned processes, batches returned in shared memory slots (one per queued job,
    more while the consumer holds on to batches that alias a slot).

    Starting a worker takes a fresh interpreter that imports the main script again (its ``jax``
    too): 1.5 to 3 s, against 0.2 s for a forked PyTorch worker. Meanwhile the first batches are
    built in this process, in one thread (:class:`_Starter`), with the same code and the same
    per-row generators, so they are the same batches; the consumer never waits for the workers to
    start. From the first worker that is ready on, batches go to the workers only. Start-up
    failures still surface in the first epoch: its end waits for every worker to be ready
    (:meth:`ensure_started`).
    """

    def __init__(self, recipe: Recipe, num_workers: int, start_timeout: float = 300.0) -> None:
        if in_spawn_bootstrap():  # a worker re-running an unguarded main script: see Spawned
            os._exit(NO_MAIN_GUARD_EXIT)
        self.prefix = f"/jf{os.getpid()}_{secrets.token_hex(3)}"
        # Batches are collected in order from workers taken in turn, so a worker that finishes
        # early waits for the next job until the slower one's batch is collected: with 2 jobs
        # queued per worker the 2 cores of the augmentation benchmark were busy 1.91 of 2 (median
        # of 4 runs), with 4 1.97, for 14% more rows/s. Each job holds a shared-memory slot of
        # one batch.
        self.capacity = JOBS_PER_WORKER * num_workers
        self.recipe = recipe
        self.workers: list[_Worker] = []
        self.ready: list[bool] = [False] * num_workers
        self.all_ready = False
        self.deadline = time.monotonic() + start_timeout
        self.start_timeout = start_timeout
        self.next_id = 0
        self.turn = 0  # the worker that gets the next job when several have the same load
        self.owner: dict[int, int] = {}
        self.unsent: deque[tuple[int, Job]] = deque()  # submitted, in order, not given out yet
        self.starter: _Starter | None = None
        self.started_here: set[int] = set()  # job ids given to the starter, not yet collected
        self.stale: set[int] = set()
        self.closed = False
        self.num_workers = num_workers
        self.payload = cloudpickle.dumps(recipe)
        self.spawn_by = time.monotonic() + SPAWN_DELAY
        self._finalizer = weakref.finalize(self, _shutdown, self.workers, self.prefix, True)
        self.lock = threading.Lock()  # the consuming thread starts the workers (start_workers)

    def start_workers(self, now: bool = True) -> None:
        """Start the worker processes, once: ``now``, or (``now=False``) if ``SPAWN_DELAY`` has
        passed. The loader calls it from the thread that iterates, after the first batch (or while
        waiting for it): from the main thread, the workers start with SIGINT ignored (inherited),
        so that a Ctrl-C while they import does not print their tracebacks."""
        if self.workers or self.closed or (not now and time.monotonic() < self.spawn_by):
            return
        with self.lock:
            if self.workers or self.closed:
                return
            main = threading.current_thread() is threading.main_thread()
            handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
            try:
                self._spawn()
            finally:
                if handler is not None:
                    signal.signal(signal.SIGINT, handler)

    def _spawn(self) -> None:
        self.deadline = time.monotonic() + self.start_timeout
        try:
            for w in range(self.num_workers):
                progress = multiprocessing.get_context("spawn").Value("q", -1, lock=False)
                spawned = Spawned(
                    worker_main,
                    (f"{self.prefix}_{w}", os.getpid(), progress),
                    f"jaxfeed-worker-{w}",
                    self.payload,
                )
                self.workers.append(_Worker(spawned, progress))
        except BaseException:
            self.close(kill=True)
            raise

    def _check_start(self, wait: bool, cancel: Any = None) -> None:
        """Take the ``ready`` message of every worker that sent it (all of them with ``wait``),
        raising what stopped one from starting."""
        if self.all_ready:
            return
        if wait:
            self.start_workers()
        with self.lock:
            self._take_ready(wait, cancel)

    def _take_ready(self, wait: bool, cancel: Any) -> None:
        for w, worker in enumerate(self.workers):
            if self.ready[w]:
                continue
            while not worker.conn.poll(0.05 if wait else 0):
                if not worker.process.is_alive() and not worker.conn.poll(0):
                    worker.process.join(1)
                    self._raise_dead(w, "while starting")
                if time.monotonic() > self.deadline:
                    raise WorkerError(
                        f"DataLoader worker {w} did not start within {self.start_timeout:g} s"
                    )
                if cancel is not None and cancel.is_set():
                    raise Cancelled
                if not wait:
                    break
            else:
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is None:
                    worker.process.join(5)
                    self._raise_dead(w, "while starting")
                if message[0] == "fatal":
                    raise WorkerError(
                        f"DataLoader worker {w} could not load the loader's functions and "
                        f"features (they are sent to workers with cloudpickle):\n{message[1]}"
                    )
                worker.spawned.sent()  # the worker read the payload: the pipe is free for jobs
                self.ready[w] = True
        self.all_ready = bool(self.workers) and all(self.ready)
        if self.all_ready and self.starter is not None:
            self.starter.stop()  # its last jobs finish; nothing more is built in this process

    def _raise_dead(self, w: int, doing: str) -> None:
        raise self.workers[w].spawned.failure(
            f"DataLoader worker {w}", doing, WorkerError, "DataLoader(num_workers=...)",
            "num_workers=0",
        )  # fmt: skip

    def ensure_started(self, cancel: Any = None) -> None:
        """Wait until every worker is ready (an epoch built in this process ends here, so that a
        worker that could not start is an error of that epoch)."""
        if not self.closed:
            self._check_start(wait=True, cancel=cancel)

    def _pick(self, force: bool) -> int | None:
        """The ready worker for the next job: the least loaded, in turn; while some are still
        starting, only one with fewer than ``JOBS_PER_WORKER`` jobs (or any, with ``force``)."""
        best = None
        n = len(self.workers)
        for k in range(n):
            w = (self.turn + k) % n
            if not self.ready[w]:
                continue
            load = len(self.workers[w].outstanding)
            if not (self.all_ready or force) and load >= JOBS_PER_WORKER:
                continue
            if best is None or load < len(self.workers[best].outstanding):
                best = w
        return best

    def _send(self, w: int) -> None:
        job_id, job = self.unsent.popleft()
        worker = self.workers[w]
        if worker.free:
            slot = worker.free.popleft()
        else:  # every slot holds a batch the consumer still uses (or a stale one): one more
            slot = worker.slots
            worker.slots += 1
        worker.conn.send(("job", job_id, slot, job))
        worker.outstanding.append((job_id, slot))
        self.owner[job_id] = w
        self.turn = (w + 1) % len(self.workers)

    def _dispatch(self) -> None:
        """Give submitted jobs out in order: to ready workers, or, while none is ready, to the
        starter (at most 2 ahead, so that it stops soon after the workers are ready)."""
        self._check_start(wait=False)
        while self.unsent:
            w = self._pick(force=False)
            if w is None:
                break
            self._send(w)
        if not any(self.ready):
            while self.unsent and len(self.started_here) < 2:
                self._start_here()

    def _start_here(self) -> None:
        job_id, job = self.unsent.popleft()
        if self.starter is None:
            self.starter = _Starter(self.recipe)
        self.starter.put(job_id, job)
        self.started_here.add(job_id)

    def submit(self, job: Job) -> int:
        job_id = self.next_id
        self.next_id += 1
        self.unsent.append((job_id, job))
        self._dispatch()
        return job_id

    def _receive(self, w: int, job: Job | None, timeout: float | None, cancel: Any = None) -> tuple:
        """The next message of worker ``w`` for a current job (stale batches are dropped and their
        slots freed); with ``job`` None, returns after dropping one stale batch."""
        worker = self.workers[w]
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            while not worker.conn.poll(0.05):
                if cancel is not None and cancel.is_set():
                    raise Cancelled
                if not worker.process.is_alive() and not worker.conn.poll(0):
                    self._raise_dead(w, "" if job is None else f"while building {_describe(job)}")
                if end is not None and time.monotonic() > end and job is not None:
                    raise TimeoutError(
                        f"DataLoader timeout={timeout:g} s: {_describe(job, worker.progress)} was "
                        "not ready "
                        f"(worker {w}, pid {worker.process.pid})"
                    )
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                message = None
            if message is None:
                worker.process.join(1)
                self._raise_dead(w, "" if job is None else f"while building {_describe(job)}")
            job_id, slot = worker.outstanding.popleft()
            self.owner.pop(job_id, None)
            if job_id in self.stale:
                self.stale.discard(job_id)
                worker.free.append(slot)
                if job is None:
                    return message
                continue
            return message

    def collect(
        self, ticket: int, job: Job, timeout: float | None, cancel: Any = None
    ) -> tuple[dict, Callable | None]:
        self._dispatch()
        if self.unsent and self.unsent[0][0] == ticket:  # not given out yet
            w = self._pick(force=True)
            if w is not None:
                self._send(w)
            else:
                self._start_here()
        if ticket in self.started_here:
            self.started_here.discard(ticket)
            assert self.starter is not None
            return self.starter.take(ticket, job, timeout, cancel), None
        w = self.owner[ticket]
        worker = self.workers[w]
        message = self._receive(w, job, timeout, cancel)
        slot = message[2] if message[0] == "batch" else message[4]
        if message[0] == "error":
            worker.free.append(slot)
            error = cloudpickle.loads(message[2])
            raise _note(
                error, f"in DataLoader worker {w} (pid {worker.process.pid}):\n{message[3]}"
            )
        _, _, _, name, size, layout, others = message
        segment = worker.maps.get(name)
        if segment is None:
            slot_prefix = name.rsplit("_", 1)[0]
            for old in [k for k in worker.maps if k.rsplit("_", 1)[0] == slot_prefix]:
                del worker.maps[old]  # unmapped once no device array aliases it any more
            segment = worker.maps[name] = _attach(name, size)
        batch = dict(others)
        for key, offset, shape, dtype in layout:
            batch[key] = np.ndarray(shape, np.dtype(dtype), buffer=segment, offset=offset)

        def release(segment: mmap.mmap = segment) -> None:
            # holding `segment` here keeps the mapping alive as long as arrays that alias it
            worker.free.append(slot)

        return batch, release

    def discard(self) -> None:
        """Forget the outstanding batches (an epoch was left early); their slots come back as the
        workers finish them."""
        self.stale.update(self.owner)
        self.unsent.clear()
        if self.starter is not None:
            self.starter.drop(self.started_here)
        self.started_here.clear()

    def close(self, kill: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self._finalizer.detach()
        if self.starter is not None:
            self.starter.stop()
        _shutdown(self.workers, self.prefix, kill)


def _describe(job: Job, progress: Any = None) -> str:
    current = progress.value if progress is not None else -1
    rows = job.rows.tolist()
    shown = ", ".join(map(str, rows[:16])) + (", ..." if len(rows) > 16 else "")
    at = f", stuck at row {current}" if current >= 0 else ""
    return f"batch {job.step} of epoch {job.epoch} (rows {shown}{at})"


def _shutdown(workers: list[_Worker], prefix: str, kill: bool) -> None:
    for worker in workers:
        with contextlib.suppress(Exception):
            if not kill:
                worker.conn.send(("stop",))
    end = time.monotonic() + (0 if kill else 2.0)
    for worker in workers:
        worker.process.join(max(0.0, end - time.monotonic()))
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(5)
    for worker in workers:
        worker.spawned.stop()  # joins the payload's writer, closes the pipe
        worker.maps.clear()  # mappings go with their last user (device arrays may alias them)
    for name in leftover_segments(prefix):  # what killed workers could not unlink
        _unlink(name)


# ---------------------------------------------------------------------------------- worker side
class _Slots:
    """A worker's shared-memory slots, reused batch after batch and grown when needed."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.segments: dict[int, _Segment] = {}
        self.generation = 0
        self.lock = threading.Lock()

    def get(self, slot: int, nbytes: int) -> _Segment:
        with self.lock:
            segment = self.segments.get(slot)
            if segment is None or segment.size < nbytes:
                if segment is not None:
                    with contextlib.suppress(BufferError):  # a view still alive: unmapped with it
                        segment.close()
                    segment.unlink()
                    del self.segments[slot]
                self.generation += 1
                size = _slot_size(nbytes)
                free = shm_room()
                if free is not None and size > free:
                    raise SharedMemoryRoomError(_room_message(size, free))
                name = f"{self.prefix}_{slot}_{self.generation}".lstrip("/")
                try:
                    segment = _Segment(name, size)
                except OSError as err:
                    if err.errno not in (errno.ENOSPC, errno.ENOMEM):
                        raise
                    raise SharedMemoryRoomError(_room_message(size, shm_room())) from None
                self.segments[slot] = segment
            return segment

    def unlink_all(self) -> None:
        with self.lock:
            for segment in self.segments.values():
                with contextlib.suppress(Exception):
                    segment.unlink()
                with contextlib.suppress(Exception):
                    segment.close()
            self.segments.clear()


def _layout(specs: list[tuple[str, tuple, np.dtype]]) -> tuple[list[tuple], int]:
    """``[(column, offset, shape, dtype str)]`` of arrays packed in one segment, and its bytes."""
    layout, offset = [], 0
    for key, shape, dtype in specs:
        layout.append((key, offset, tuple(shape), np.dtype(dtype).str))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    return layout, offset


class _SlotAlloc:
    """``build_plan``'s ``alloc`` in a worker: the batch's buffers are views of a slot."""

    def __init__(self, slots: _Slots, slot: int) -> None:
        self.slots, self.slot = slots, slot
        self.segment: _Segment | None = None
        self.layout: list[tuple] = []
        self.views: dict[str, np.ndarray] = {}

    def __call__(self, specs: list[tuple[str, tuple, np.dtype]]) -> dict[str, np.ndarray]:
        self.layout, nbytes = _layout(specs)
        self.segment = self.slots.get(self.slot, nbytes)
        self.views = {
            key: np.ndarray(shape, np.dtype(dtype), buffer=self.segment.buf, offset=start)
            for key, start, shape, dtype in self.layout
        }
        return self.views

    def release(self) -> None:
        """Drop the views (a segment with exported views cannot be closed when it grows)."""
        self.views, self.segment = {}, None


def _write(plan: dict[str, Any], slots: _Slots, slot: int, placed: _SlotAlloc) -> tuple:
    arrays, others = {}, {}
    for key, value in plan.items():
        if isinstance(value, _Stack) or (
            isinstance(value, np.ndarray) and not value.dtype.hasobject
        ):
            arrays[key] = value
        else:
            others[key] = value
    if placed.segment is not None and all(placed.views.get(k) is v for k, v in arrays.items()):
        segment = placed.segment  # every array was built in the slot: nothing to copy
        layout = [entry for entry in placed.layout if entry[0] in arrays]
        return "/" + segment.name.lstrip("/"), segment.size, layout, others
    # built elsewhere (a batch transform's output): copy into the slot; arrays that are views of
    # the slot are copied out first, as the new layout may overlap them
    arrays = {
        k: np.array(v) if any(v is w for w in placed.views.values()) else v
        for k, v in arrays.items()
    }
    placed.release()
    layout, nbytes = _layout([(k, v.shape, v.dtype) for k, v in arrays.items()])
    segment = slots.get(slot, nbytes)
    for (_key, start, shape, dtype), value in zip(layout, arrays.values(), strict=True):
        out = np.ndarray(shape, np.dtype(dtype), buffer=segment.buf, offset=start)
        if isinstance(value, _Stack):
            value.into(out)
        else:
            np.copyto(out, value)
        del out
    return "/" + segment.name.lstrip("/"), segment.size, layout, others


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
    try:
        recipe = cloudpickle.loads(payload)
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
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
            except Exception as err:  # an unpicklable value in a batch
                conn.send(("error", job_id, _error_payload(err), traceback.format_exc(), slot))
    finally:
        slots.unlink_all()
