"""Shared memory for process workers: the room in ``/dev/shm``, the segments a worker creates
(never registered with ``multiprocessing``'s resource tracker), a worker's reusable slots and the
layout of a batch written into one."""

from __future__ import annotations

import contextlib
import errno
import glob
import mmap
import os
import threading
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from jaxfeed.loading.workers.build import _Stack

_ALIGN = 64
# batches queued or being built per process worker, each in a slot of its own: ProcessBackend
# queues this many, and the room message counts them (here, so this module needs no backend)
JOBS_PER_WORKER = 4
_MIN_SLOT = 1 << 20
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


def _attach(name: str, size: int) -> mmap.mmap:
    """Map a worker's segment without registering it with the resource tracker (the worker
    owns it and unlinks it)."""
    if os.name == "posix":
        import _posixshmem  # noqa: PLC0415 (platform: POSIX only)

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
        import _posixshmem  # noqa: PLC0415 (platform: POSIX only)

        _posixshmem.shm_unlink(name)


class _Segment:
    """A POSIX shared-memory segment a worker creates, its pages reserved up front, and not
    registered with ``multiprocessing``'s resource tracker: the worker unlinks it, its watchdog
    when the parent dies, the parent what a killed worker left (by name prefix). A segment
    created and killed before the tracker heard of it made the parent's unregister fail."""

    def __init__(self, name: str, size: int) -> None:
        import _posixshmem  # noqa: PLC0415 (platform: POSIX only, the workers; no stub)

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
        import _posixshmem  # noqa: PLC0415 (platform: POSIX only)

        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink("/" + self.name)


def leftover_segments(prefix: str) -> list[str]:
    """Segments still present whose names start with ``prefix`` (Linux: ``/dev/shm``)."""
    return sorted("/" + os.path.basename(p) for p in glob.glob(f"/dev/shm/{prefix.lstrip('/')}*"))


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
