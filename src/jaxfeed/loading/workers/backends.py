"""Where batches are built: :class:`InlineBackend` (when collected), :class:`ThreadBackend` (a
thread pool) and :class:`ProcessBackend` (spawned worker processes, batches handed over in shared
memory; the processes' side is :mod:`jaxfeed.loading.workers.worker`)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import hashlib
import mmap
import multiprocessing
import os
import queue
import secrets
import signal
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from jaxfeed._base.spawn import (
    NO_MAIN_GUARD_EXIT,
    Cancelled,
    Spawned,
    WorkerError,
    in_spawn_bootstrap,
)
from jaxfeed.loading.workers.build import Job, Recipe, _materialize, _note, build, build_plan
from jaxfeed.loading.workers.shm import (
    JOBS_PER_WORKER,
    _attach,
    _check_room,
    _unlink,
    leftover_segments,
)
from jaxfeed.loading.workers.worker import STARTING, worker_main

# A DataLoader starts its workers when it is made (see start_workers). A backend that has none
# when it is iterated starts them once the first batch, built in the parent, is out, or this many
# seconds after it was made: when workers re-ran the main script, their start made that first
# batch 1.7x slower (loaded 2-core machine, medians of 5 alternating runs: 1.57 s spawned at
# once, 0.91 s with the delay). Workers that do start together take turns (starts_at_once).
SPAWN_DELAY = 0.5
# A worker is one core's worth of work: its BLAS and OpenMP run one thread, as PyTorch's
# DataLoader sets torch.set_num_threads(1) in its workers (unless the user set these variables).
# OpenBLAS's thread pool alone doubled a worker's start-up CPU (0.27 -> 0.14 s importing numpy
# and jaxfeed's worker modules on the 2-core machine).
ONE_THREAD = {
    name: "1"
    for name in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    )
}
# a worker start slower than this is explained once per process (see _explain_slow_start)
SLOW_START_SECONDS = 2.0


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

    def epoch_done(self) -> None:
        pass

    def close(self, kill: bool = False) -> None:
        pass


class ThreadBackend:
    """Builds batches in a pool of threads (useful when decoders release the GIL)."""

    def __init__(self, recipe: Recipe, num_workers: int) -> None:
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

    def epoch_done(self) -> None:
        pass

    def discard(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pending.clear()

    def close(self, kill: bool = False) -> None:
        self.discard()
        self.pool.shutdown(wait=not kill, cancel_futures=True)


class _Worker:
    def __init__(self, spawned: Spawned, progress: Any) -> None:
        self.spawned, self.progress = spawned, progress
        self.process, self.conn = spawned.process, spawned.conn
        self.free = deque([0, 1])  # slot indexes not holding a batch in use
        self.slots = 2  # slots so far (more are made while the consumer holds batches)
        self.outstanding: deque = deque()  # job ids sent, in order
        self.maps: dict[str, mmap.mmap] = {}
        self.built = 0  # batches it sent back
        self.start: dict[str, Any] = {}  # what its "ready" message said of its start


class _Pool:
    """A backend's worker processes, with their shared-memory prefix and readiness. A pool
    belongs to one :class:`ProcessBackend` at a time; between epochs its backend *parks* it (see
    :func:`_park`), and a new backend over the same recipe (the same bytes: functions, features,
    seed) takes it over instead of starting processes of its own."""

    def __init__(self, digest: str, prefix: str, num_workers: int) -> None:
        self.digest, self.prefix = digest, prefix
        self.workers: list[_Worker] = []
        self.ready = [False] * num_workers
        self.all_ready = False
        self.holder: Any = None  # the _Claim of the backend that runs it; None while parked

    def reusable(self) -> bool:
        """Ready, alive, and holding no job (nothing a new owner could mistake for its own)."""
        return (
            self.all_ready
            and bool(self.workers)
            and all(w.process.is_alive() and not w.outstanding for w in self.workers)
        )


class _Claim:
    """What a backend's finalizer needs: the pool it runs or parked (never the backend itself)."""

    __slots__ = ("pool",)

    def __init__(self) -> None:
        self.pool: _Pool | None = None


_POOLS_LOCK = threading.Lock()
_PARKED: dict[str, list[_Pool]] = {}  # pools between epochs, by recipe digest


def _park(pool: _Pool) -> None:
    """Offer ``pool`` (its backend's epoch is over) to a new backend over the same recipe; its
    backend takes it back at its next epoch unless another took it meanwhile."""
    with _POOLS_LOCK:
        pool.holder = None
        _PARKED.setdefault(pool.digest, []).append(pool)


def _unpark(pool: _Pool, claim: _Claim) -> bool:
    """Take ``pool`` back if it is still parked."""
    with _POOLS_LOCK:
        parked = _PARKED.get(pool.digest, [])
        if pool not in parked:
            return False
        parked.remove(pool)
        pool.holder = claim
        return True


def _take_parked(digest: str, num_workers: int, claim: _Claim) -> _Pool | None:
    """A parked pool of ``num_workers`` workers for the recipe ``digest`` (None if there is none;
    parked pools with a dead worker are left to their backends, which report it)."""
    with _POOLS_LOCK:
        for pool in _PARKED.get(digest, []):
            if len(pool.workers) == num_workers and pool.reusable():
                _PARKED[digest].remove(pool)
                pool.holder = claim
                return pool
    return None


def _release(claim: _Claim, kill: bool) -> None:
    """Stop the workers of ``claim``'s pool (a closed or collected backend), unless another
    backend runs them now."""
    pool, claim.pool = claim.pool, None
    if pool is None:
        return
    with _POOLS_LOCK:
        parked = _PARKED.get(pool.digest, [])
        if pool in parked:
            parked.remove(pool)
        elif pool.holder is not claim:
            return  # taken over by another backend
        pool.holder = None
    _shutdown(pool.workers, pool.prefix, kill)


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


class ProcessBackend:
    """``num_workers`` spawned processes, batches returned in shared memory slots (one per queued job,
    more while the consumer holds on to batches that alias a slot).

    A worker starts from a fresh interpreter that does **not** run the main script again (the
    recipe carries the script's functions by value): it imports the worker modules here (numpy,
    no JAX) and what the user's functions need, and reads the recipe. The loader starts the
    workers when it is made. Meanwhile the first batches are built in this process, in one thread
    (:class:`_Starter`), with the same code and the same per-row generators, so they are the same
    batches; the consumer never waits for the workers to start. From the first worker that is
    ready on, batches go to the workers only. Start-up failures still surface in the first epoch:
    its end waits for every worker to be ready (:meth:`ensure_started`).

    Workers are started once per loader, and at the end of each epoch their pool is parked (see
    :class:`_Pool`): a new backend over the same recipe (a new ``DataLoader`` per epoch over the
    same dataset and functions) takes the ready workers over instead of starting its own; the old
    backend, if it reads another epoch, takes them back or starts new ones.
    """

    def __init__(self, recipe: Recipe, num_workers: int, start_timeout: float = 300.0) -> None:
        if in_spawn_bootstrap():  # a worker re-running an unguarded main script: see Spawned
            os._exit(NO_MAIN_GUARD_EXIT)
        # Batches are collected in order from workers taken in turn, so a worker that finishes
        # early waits for the next job until the slower one's batch is collected: with 2 jobs
        # queued per worker the 2 cores of the augmentation benchmark were busy 1.91 of 2 (median
        # of 4 runs), with 4 1.97, for 14% more rows/s. Each job holds a shared-memory slot of
        # one batch.
        self.capacity = JOBS_PER_WORKER * num_workers
        self.recipe = recipe
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
        self.digest = hashlib.sha256(self.payload).hexdigest()
        self.spawn_by = time.monotonic() + SPAWN_DELAY
        self.claim = _Claim()
        self._finalizer = weakref.finalize(self, _release, self.claim, True)
        self.lock = threading.Lock()  # the consuming thread starts the workers (start_workers)
        self._use(None)
        pool = _take_parked(self.digest, num_workers, self.claim)
        if pool is not None:
            self._use(pool)

    def _use(self, pool: _Pool | None) -> None:
        """Run jobs on ``pool`` (None: none yet; the next :meth:`start_workers` starts one)."""
        self.claim.pool = pool
        self.workers: list[_Worker] = pool.workers if pool is not None else []
        self.ready: list[bool] = pool.ready if pool is not None else [False] * self.num_workers
        self.all_ready = pool is not None and pool.all_ready
        self.prefix = (
            pool.prefix if pool is not None else f"/jf{os.getpid()}_{secrets.token_hex(3)}"
        )
        self.turn = 0

    def _hold(self) -> None:
        """Make sure this backend runs a pool before it gives out a job: take back the pool it
        parked at the end of its last epoch or, if a new backend took that over, a parked one or
        new workers (this backend then builds in this process while they start)."""
        pool = self.claim.pool
        if pool is None or pool.holder is self.claim or self.closed:
            return
        if _unpark(pool, self.claim):
            return
        self._use(_take_parked(self.digest, self.num_workers, self.claim))
        self.starter = None  # a stopped one: a new one builds while new workers start
        if not self.workers:
            self.start_workers()

    def epoch_done(self) -> None:
        """The epoch is over and every batch collected: park the pool for a new backend over the
        same recipe (this one takes it back at its next epoch unless one did)."""
        pool = self.claim.pool
        with self.lock:
            if (
                pool is not None
                and pool.holder is self.claim
                and not self.closed
                and not (self.unsent or self.started_here or self.stale)
                and pool.reusable()
            ):
                _park(pool)

    def start_workers(self, now: bool = True) -> None:
        """Start the worker processes, once: ``now``, or (``now=False``) if ``SPAWN_DELAY`` has
        passed. The loader calls it when it is made and from the thread that iterates: from the
        main thread, the workers start with SIGINT ignored (inherited), so that a Ctrl-C while
        they import does not print their tracebacks."""
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
        pool = _Pool(self.digest, self.prefix, self.num_workers)
        pool.holder = self.claim
        self.claim.pool = pool
        self.workers, self.ready, self.all_ready = pool.workers, pool.ready, False
        at_once = starts_at_once()
        try:
            for w in range(self.num_workers):
                progress = multiprocessing.get_context("spawn").Value("q", STARTING, lock=False)
                # worker w imports once worker w - at_once is ready (or dead): on a small machine
                # the workers' imports do not take the cores the first batches are built on
                turn = self.workers[w - at_once] if w >= at_once else None
                spawned = Spawned(
                    worker_main,
                    (f"{self.prefix}_{w}", os.getpid(), progress),
                    f"jaxfeed-worker-{w}",
                    self.payload,
                    main=False,  # the recipe carries the script's functions by value
                    wait=None if turn is None else functools.partial(_started, turn),
                    env=ONE_THREAD,
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
                info = message[2] if len(message) > 2 else {}
                began = worker.spawned.started_at
                released = worker.spawned.released_at or began
                worker.start = {
                    **info,
                    "boot": info.get("entered", began) - began,
                    "released_at": released,
                    "queued": released - began,  # waiting for its turn to import
                    "seconds": time.time() - released,
                }
                self.ready[w] = True
        self.all_ready = bool(self.workers) and all(self.ready)
        if self.all_ready:
            self.claim.pool.all_ready = True  # type: ignore[union-attr]
            _explain_slow_start(self.workers)
        if self.all_ready and self.starter is not None:
            self.starter.stop()  # its last jobs finish; nothing more is built in this process

    def _raise_dead(self, w: int, doing: str) -> None:
        worker = self.workers[w]
        if self.ready[w] and (not doing or doing == "while starting"):
            doing = f"after building {worker.built} batches" if worker.built else "while idle"
        raise worker.spawned.failure(
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
        try:
            worker.conn.send(("job", job_id, slot, job))
        except OSError:  # BrokenPipeError: it died since its last batch (between epochs, say)
            worker.process.join(1)
            self._raise_dead(w, f"before {_describe(job)} (it had built {worker.built} batches)")
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
        self._hold()
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
            worker.built += 1
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
        _release(self.claim, kill)


_explained = False  # the slow-start note is given once per process


def _explain_slow_start(workers: list[_Worker]) -> None:
    """Say once when workers were slow to start (over ``SLOW_START_SECONDS``) because of what
    reading the loader's functions imported (torch, say): the cure is the user's. A start slow
    only because the machine is busy is not worth a warning."""
    global _explained
    starts = [w.start for w in workers if "seconds" in w.start]
    if _explained or not starts:
        return
    slowest = max(starts, key=lambda s: s["seconds"])
    heavy = sorted({m for s in starts for m in s.get("heavy", ())})
    recipe = slowest.get("recipe", 0.0)
    if slowest["seconds"] < SLOW_START_SECONDS or (recipe < SLOW_START_SECONDS / 2 and not heavy):
        return
    _explained = True
    imports = f" (they import {', '.join(heavy)})" if heavy else ""
    warnings.warn(
        f"DataLoader workers took {slowest['seconds']:.1f} s to start: reading the loader's "
        f"functions and dataset took {recipe:.1f} s{imports}; import heavy modules inside the "
        "functions that need them, or keep them out of the module that defines the functions. "
        "Workers start once per loader, and a new loader over the same dataset and functions "
        "takes them over, so this is paid once",
        RuntimeWarning,
        stacklevel=2,
    )


def starts_at_once() -> int:
    """How many workers may import at the same time: the cores this process may use, less one
    for the parent, which builds the first batches while they start (at least 1).

    >>> starts_at_once() >= 1
    True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _started(worker: _Worker) -> bool:
    """Whether ``worker`` is past its start (ready, or dead: either way the next one may go)."""
    return worker.progress.value != STARTING or not worker.process.is_alive()


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
