"""How `DataLoader` builds batches: decode, per-row transforms, collation; inline, in threads, or in
spawned worker processes that hand finished batches over in shared memory.

A batch is described by a :class:`Job` (its epoch, step, rows and positions in the epoch, and for
Arrow datasets the already gathered columns, media still encoded). :func:`build` turns a job into
numpy columns with the same code in every mode, so results do not depend on where it runs:

1. media columns (``Image``/``Audio``) are decoded;
2. ``row_transform(row)`` or ``row_transform(row, rng)`` runs on every row, ``rng`` seeded by
   ``(seed, epoch, position of the row in the epoch)``;
3. rows are collated (stacked when they share shape and dtype), then the recipe's ``collate``
   (:mod:`jaxfeed.loading.padding` or :mod:`jaxfeed.loading.packing`) pads or packs variable-length columns;
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

A worker is spawned but does not run the main script again (the recipe carries the script's
functions by value): it imports numpy, the decoders and what the user's functions need, never
JAX. The loader starts its workers when it is made; while they start, :class:`ProcessBackend`
builds the first batches in the main process, with the same code and generators (so the same
batches), and from the first ready worker on, the workers build everything. The end of the first
epoch waits for every worker, so a worker that cannot start is still an error of that epoch.
Workers live as long as their loader; between epochs they are offered to a new loader over the
same recipe (a new ``DataLoader`` per epoch over the same data and functions), which takes them
over instead of starting its own. A start slower than a few seconds is explained once (a
``RuntimeWarning`` naming what the functions imported).

The parts: :mod:`jaxfeed.loading.workers.build` (jobs, recipes, building a batch),
:mod:`jaxfeed.loading.workers.shm` (shared-memory room, segments and slots),
:mod:`jaxfeed.loading.workers.backends` (the three backends and the pools of worker processes) and
:mod:`jaxfeed.loading.workers.worker` (the worker processes' main function);
starting a process is :mod:`jaxfeed._base.spawn`'s, calling a user's function with a generator
:mod:`jaxfeed._base.calls`'. This package re-exports the names other modules import from it.
"""

from jaxfeed._base.calls import takes_rng
from jaxfeed._base.spawn import (
    NO_MAIN_GUARD_EXIT,
    Cancelled,
    MainGuardError,
    Spawned,
    WorkerError,
    in_spawn_bootstrap,
    main_guard_message,
)
from jaxfeed.loading.workers.backends import (
    SPAWN_DELAY,
    InlineBackend,
    ProcessBackend,
    ThreadBackend,
)
from jaxfeed.loading.workers.build import Job, Recipe, build, build_plan
from jaxfeed.loading.workers.shm import (
    JOBS_PER_WORKER,
    SHM_DIR,
    SHM_LIMIT_ENV,
    SharedMemoryRoomError,
    leftover_segments,
    shm_room,
)
from jaxfeed.loading.workers.worker import worker_main

__all__ = [
    "JOBS_PER_WORKER",
    "NO_MAIN_GUARD_EXIT",
    "SHM_DIR",
    "SHM_LIMIT_ENV",
    "SPAWN_DELAY",
    "Cancelled",
    "InlineBackend",
    "Job",
    "MainGuardError",
    "ProcessBackend",
    "Recipe",
    "SharedMemoryRoomError",
    "Spawned",
    "ThreadBackend",
    "WorkerError",
    "build",
    "build_plan",
    "in_spawn_bootstrap",
    "leftover_segments",
    "main_guard_message",
    "shm_room",
    "takes_rng",
    "worker_main",
]
