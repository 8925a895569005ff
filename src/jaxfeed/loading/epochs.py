"""One epoch of the map-style :class:`~jaxfeed.DataLoader`: batches submitted ahead to the
worker backend and collected in order (:class:`_Stream`), run in a prefetch thread
(:class:`_Producer`) or placed ahead by the iterating thread, and handed out by the iterator that
``iter(loader)`` returns (:class:`_EpochIterator`). A batch that aliases a worker's shared-memory
slot gives the slot back only once its arrays are gone (:func:`_release_when_gone`).

An epoch sees its loader only through :class:`EpochHost` (the loader imports this module, never
the other way round): it asks for orders, jobs and placed batches, and reports how far it got,
instead of writing the loader's position.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sized
from typing import Any, Protocol

from jaxfeed.loading.packing import PackPlan
from jaxfeed.loading.workers import Cancelled, Job

Batch = dict[str, Any]


class EpochHost(Protocol):
    """What an epoch needs of its loader (:class:`~jaxfeed.DataLoader` is one): its settings,
    five package-private methods that make batches, and three through which the epoch reports
    back. The loader's state (epoch, position, iterator, backend) stays the loader's to change."""

    batch_size: int
    prefetch: int
    timeout: float | None
    source: Sized

    def __len__(self) -> int:
        """The batches of the loader's current epoch."""
        ...

    def _order(self, epoch: int) -> Any:
        """What says which rows each batch of ``epoch`` reads (``rows(start, stop)``, or a
        :class:`~jaxfeed.loading.packing.PackPlan`)."""
        ...

    def _num_batches(self, epoch: int) -> int:
        """The batches of ``epoch``."""
        ...

    def _job(self, order: Any, epoch: int, step: int) -> Job:
        """Order and gather of batch ``step``: what a worker needs to build it."""
        ...

    def _place(self, batch: Batch, job: Job, shared: bool) -> tuple[Batch, list]:
        """The built batch on the device(s), and the device arrays that alias a worker's slot."""
        ...

    def _worker_work(self) -> bool:
        """Whether workers have anything to do (decoding, transforms, a generic source)."""
        ...

    def _consumed(self, position: int) -> None:
        """The consumer has received ``position`` batches of the epoch being read."""
        ...

    def _epoch_ended(self, iterator: object, epoch: int) -> None:
        """``iterator`` read ``epoch`` to its end: the next iteration starts the next epoch
        (unless a newer iterator is the loader's by now)."""
        ...

    def _epoch_closed(self, backend: Any, failed: bool, left_early: bool) -> None:
        """An epoch over ``backend`` closed: one that ``failed`` stops its workers, one
        ``left_early`` gives its pending batches up (nothing if the loader has another backend)."""
        ...


def _release_when_gone(arrays: list, release: Callable[[], None]) -> None:
    """Call ``release`` now, or once every array in ``arrays`` has been garbage collected."""
    if not arrays:
        release()
        return
    left = [len(arrays)]
    lock = threading.Lock()

    def one_gone() -> None:
        with lock:
            left[0] -= 1
            done = left[0] == 0
        if done:
            release()

    for array in arrays:
        weakref.finalize(array, one_gone)


_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Stream:
    """The batches ``start..`` of one epoch: jobs submitted ahead to the backend, collected in
    order, placed on the device."""

    def __init__(self, loader: EpochHost, backend: Any, epoch: int, start: int) -> None:
        self.loader, self.backend, self.epoch = loader, backend, epoch
        self.order = loader._order(epoch)
        self.next_step = start
        self.total = loader._num_batches(epoch)
        self.pending: deque = deque()

    def next(self, cancel: threading.Event | None = None) -> Batch | None:
        loader, backend = self.loader, self.backend
        while self.next_step < self.total and len(self.pending) < backend.capacity:
            job = loader._job(self.order, self.epoch, self.next_step)
            self.pending.append((backend.submit(job), job))
            self.next_step += 1
        if not self.pending:
            return None
        ticket, job = self.pending.popleft()
        batch, release = backend.collect(ticket, job, loader.timeout, cancel)
        try:
            placed, keep = loader._place(batch, job, shared=release is not None)
        except BaseException:
            if release is not None:
                release()
            raise
        if release is not None:
            _release_when_gone(keep, release)
        return placed

    def describe(self, step: int) -> str:
        start = step * self.loader.batch_size
        if isinstance(self.order, PackPlan):
            s = self.order.pieces(start, start + self.loader.batch_size)
            rows = list(dict.fromkeys(self.order.row[s].tolist()))
        else:
            stop = min(start + self.loader.batch_size, len(self.loader.source))
            rows = self.order.rows(start, stop).tolist()
        shown = ", ".join(map(str, rows[:16])) + (", ..." if len(rows) > 16 else "")
        return f"batch {step} of epoch {self.epoch} (rows {shown})"


class _Producer:
    """Runs a :class:`_Stream` in a background thread, at most ``depth`` batches ahead."""

    def __init__(self, stream: _Stream, depth: int) -> None:
        self.stream = stream
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.slots = threading.Semaphore(depth)  # at most `depth` batches ready and unconsumed
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="jaxfeed-prefetch", daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            if self.slots.acquire(timeout=0.05):
                self.queue.put(item)
                return True
        return False

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.stream.next(self.stop)
                if batch is None:
                    self._put(_END)
                    return
                if not self._put(batch):
                    return
        except Cancelled:
            return
        except BaseException as err:
            self._put(_Failure(err))

    def get(self, timeout: float | None, step: int) -> Any:
        end = None if timeout is None else time.monotonic() + timeout + 2.0
        while True:
            try:
                item = self.queue.get(timeout=0.1)
            except queue.Empty:
                self.stream.backend.start_workers(now=False)  # from this (the iterating) thread
                if not self.thread.is_alive() and self.queue.empty():
                    return _Failure(RuntimeError("the prefetch thread stopped without a result"))
                if end is not None and time.monotonic() > end:
                    return _Failure(
                        TimeoutError(
                            f"DataLoader timeout={timeout:g} s: {self.stream.describe(step)} was "
                            "not ready"
                        )
                    )
                continue
            self.slots.release()
            return item

    def close(self, wait: float) -> bool:
        """Stop the thread; whether it ended within ``wait`` seconds."""
        self.stop.set()
        while True:  # drop ready batches (their device buffers) now
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=wait)
        return not self.thread.is_alive()


class _EpochIterator:
    """One epoch of batches; closing it (``break``, garbage collection, errors) stops its thread."""

    def __init__(self, loader: EpochHost, epoch: int, start: int, backend: Any) -> None:
        self.loader = loader
        self.epoch = epoch
        self.step = start
        self.done = False
        self.superseded = False
        self.stream = _Stream(loader, backend, epoch, start)
        self.producer: _Producer | None = None
        self.ahead: deque | None = None  # batches placed ahead by the iterating thread
        if start >= len(loader):
            self._end()
        elif loader.prefetch > 0 and loader._worker_work():
            self.producer = _Producer(self.stream, loader.prefetch)
        elif loader.prefetch > 0:
            # Nothing to decode or transform: a batch is one gather (a memory copy) and one
            # transfer, ~25 us for 128 MNIST rows. A background thread made that slower, not
            # faster: under the GIL its hand-overs (queue, semaphore, the GIL passed at every
            # transfer) cost about as much as the batch (`python -m jaxfeed.bench.check --only
            # loader`, loaded 2-core machine, medians of 3 alternating runs: 0.95x the numpy-gather
            # limit with the thread, 1.57x without; 9.6 MB batches with a synced step lost too).
            # Gathering several batches at once and zero-copy transfers from 64-byte aligned
            # buffers measured slower, not faster. So the iterating thread keeps ``prefetch``
            # batches placed ahead itself, as flax's ``prefetch_to_device`` does: their
            # transfers are issued before they are needed and the gather overlaps the compiled
            # step already dispatched.
            self.ahead = deque()

    def __iter__(self) -> _EpochIterator:
        return self

    def __len__(self) -> int:
        return 0 if self.done else max(0, len(self.loader) - self.step)

    def _end(self) -> None:
        self.done = True
        self.loader._epoch_ended(self, self.epoch)

    def _finish(self) -> None:
        # process workers that could not start fail the epoch whose batches were built in this
        # process meanwhile (waited for here, not against the per-batch timeout)
        self.stream.backend.ensure_started()
        self.stream.backend.epoch_done()  # its workers may serve a new loader over the same data
        self._end()
        self.close()
        raise StopIteration

    def __next__(self) -> Batch:
        if self.superseded:
            raise RuntimeError(
                "this DataLoader iterator was ended by a newer iter() over the same loader; a "
                "DataLoader reads one epoch at a time (zip(loader, loader) cannot work): use two "
                "DataLoader objects for two independent streams"
            )
        if self.done:
            raise StopIteration
        try:
            if self.ahead is not None:
                batch = self._next_ahead()
            elif self.producer is None:
                batch = self.stream.next()
                if batch is None:
                    self._finish()
            else:
                item = self.producer.get(self.loader.timeout, self.step)
                if item is _END:
                    self._finish()
                if isinstance(item, _Failure):
                    raise item.error
                batch = item
        except StopIteration:
            raise
        except BaseException:
            self.close(failed=True)
            raise
        self.step += 1
        self.loader._consumed(self.step)
        # process workers not started when the loader was made start from the iterating thread
        # once the first batch (built in this process) is out (see workers.SPAWN_DELAY)
        self.stream.backend.start_workers()
        return batch

    def _next_ahead(self) -> Batch:
        """The oldest batch placed ahead, after placing up to ``prefetch`` more. A batch that
        fails to build is raised in its turn, after the batches before it (as from the thread)."""
        ahead, depth = self.ahead, self.loader.prefetch
        while len(ahead) <= depth and not (ahead and isinstance(ahead[-1], _Failure | None)):
            try:
                ahead.append(self.stream.next())
            except Exception as err:
                ahead.append(_Failure(err))
        item = ahead.popleft()
        if item is None:
            self._finish()
        if isinstance(item, _Failure):
            raise item.error
        return item

    def close(self, failed: bool = False, superseded: bool = False) -> None:
        """Stop the prefetch thread; an epoch left early gives its pending batches up, one that
        failed (error, timeout, Ctrl-C) also stops the workers (they restart on the next epoch)."""
        if superseded and not self.done:
            self.superseded = True
        stopped = True
        if self.ahead is not None:
            self.ahead.clear()  # their device buffers go now
        if self.producer is not None:
            stopped = self.producer.close(wait=1.0 if failed else 30.0)
            self.producer = None
        left_early = not self.done
        self.done = True
        self.loader._epoch_closed(
            self.stream.backend, failed=failed or not stopped, left_early=left_early
        )

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may already be gone at interpreter shutdown
            self.close()
        except Exception:
            pass
