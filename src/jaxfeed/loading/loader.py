"""`DataLoader`: shuffled, augmented, prefetched ``jax.Array`` batches, sharded across devices and
hosts, with exact resume.

One batch is built in stages; ``prefetch`` batches are kept ready on the device, by a background
thread when there is decoding or transforming to overlap, else placed ahead by the iterating
thread (a gather and a transfer are cheaper than a hand-over between threads under the GIL):

1. **order**: the epoch's rows come from a seeded permutation (:mod:`jaxfeed.loading.order`), O(1) memory;
2. **gather**: fixed-shape and numeric columns are gathered with one ``np.take`` from zero-copy
   views of the (memory-mapped) Arrow buffers; media columns are read still encoded;
3. **build** (:mod:`jaxfeed.loading.workers`), in ``num_workers`` spawned processes when there is work for
   them: ``Image``/``Audio`` values are decoded, ``row_transform`` runs on every row (its ``rng``
   seeded by ``(seed, epoch, position in the epoch)``), rows are stacked, ``transform`` runs on
   the batch (``rng`` seeded by ``(seed, epoch, step)``); finished batches come back in reused
   shared-memory slots, never pickled;
4. **transfer**: the whole batch moves in one call, to a device or split over a sharding; in
   multi-process JAX each process reads only its rows and global arrays are assembled with
   ``jax.make_array_from_process_local_data``.

Results depend only on ``seed``, epoch and position, never on ``num_workers`` or where a run was
resumed.
"""

from __future__ import annotations

import itertools
import math
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from jaxfeed.data.formatting import to_host
from jaxfeed.data.iterable import IterableDataset
from jaxfeed.loading.bucketing import LengthGroupedOrder
from jaxfeed.loading.epochs import Batch, _EpochIterator
from jaxfeed.loading.options import LoaderOptions, _BaseLoader
from jaxfeed.loading.order import EpochOrder
from jaxfeed.loading.packing import Packing, PackPlan, PackStep, batch_layout, best_fit
from jaxfeed.loading.padding import Padding, PadStep, variable_columns
from jaxfeed.loading.sources import _CANONICAL, _ArrowSource, _ItemSource, _make_source
from jaxfeed.loading.stream_loader import StreamingDataLoader
from jaxfeed.loading.workers import (
    InlineBackend,
    Job,
    ProcessBackend,
    Recipe,
    ThreadBackend,
    takes_rng,
)
from jaxfeed.runtime.devices import Placement, batch_divisor, put_tree, resolve_placement

STATE_VERSION = 1


# ---------------------------------------------------------------------------------- loader
class DataLoader(_BaseLoader):
    """Batches of ``jax.Array`` from a dataset, one epoch per iteration.

    Args:
        dataset: a jaxfeed ``Dataset``, a Hugging Face ``datasets.Dataset``, or any object with
            ``__len__`` and ``__getitem__`` / ``__getitems__`` returning dicts.
        batch_size: rows per batch (the global batch in multi-process JAX).
        shuffle: a new seeded order every epoch, derived from ``(seed, epoch)``.
        drop_last: drop the final short batch.
        columns: the columns to load (default: all).
        row_transform: ``fn(row)`` or ``fn(row, rng)`` returning a dict; runs on every row after
            decoding and before batching, in the worker processes; ``row`` maps columns to numpy
            values (an ``Image`` is a ``uint8`` array (H, W, C)); ``rng`` is a
            ``numpy.random.Generator`` seeded by ``(seed, epoch, position of the row in the
            epoch)``, so results depend neither on ``num_workers`` nor on resuming. Ready-made
            ones are in :mod:`jaxfeed.loading.augment`.
        transform: ``fn(batch)`` or ``fn(batch, rng)`` on the numpy batch; ``rng`` is seeded by
            ``(seed, epoch, step)``. Runs in the workers too when there are any.
        prefetch: batches kept ready on the device (0: none), by a background thread; a
            dataset read in this process without decoding or transforms (numeric columns: a
            batch is a gather and a transfer) has them placed ahead by the iterating thread,
            which is faster under the GIL than handing them over from another thread.
        device: a device string or ``jax.Device`` (default: the first device).
        sharding: a ``jax.sharding.Sharding`` that splits the batch dimension, e.g.
            ``NamedSharding(mesh, P("data"))``.
        num_workers: processes (or threads, ``worker_mode="thread"``) that decode, run
            ``row_transform``/``transform`` and stack batches; ``"auto"``: one per available core.
            Processes are spawned when the loader is made, live as long as it does (not one
            start per epoch), and hand batches back through shared memory; a new loader over
            the same dataset and functions takes over the workers of one between epochs (one
            new loader per epoch starts workers once). A numeric Arrow dataset without transforms is read in this process
            (a gather is a memory copy: workers would only add one).
        worker_mode: ``"process"`` (default) or ``"thread"``.
        timeout: seconds to wait for one batch before raising ``TimeoutError`` naming its rows
            (None: wait forever). It cannot apply to batches built in the iterating thread:
            ``num_workers=0`` with ``prefetch=0``, or a dataset with nothing to decode or
            transform.
        decode_size: ``(height, width)``, or ``{column: (height, width)}``: decode JPEGs at the
            smallest scale (1, 1/2, 1/4 or 1/8, done by the decoder, much cheaper than decoding
            at full size and resizing) whose sides are still at least this big.
        padding: a :class:`jaxfeed.Padding`: variable-length columns (ragged lists of numbers)
            are padded to one of few lengths, with an ``attention_mask`` (see "Variable-length
            data" in the README); in the workers, after ``row_transform`` and before
            ``transform``.
        bucket_by_length: batches of rows of similar length (shuffled mega-batches sorted by
            length, as `transformers`' ``group_by_length``); every row once per epoch; pads with
            ``padding`` (default ``Padding()``, to the longest row).
        packing: a :class:`jaxfeed.Packing`: several rows per fixed-length row, with
            ``segment_ids`` and ``positions``; ``len()`` is then the epoch's packed batches.

    Given an :class:`~jaxfeed.IterableDataset`, ``DataLoader(...)`` returns a
    ``StreamingDataLoader`` (same arguments), which is a
    ``DataLoader`` too: ``isinstance(loader, DataLoader)`` holds for both.

    **Iteration.** Each ``for`` over the loader reads one epoch: the next one after the previous
    iteration, whether that one ran to its end or was left early (``break``). After
    :meth:`load_state_dict` (or :meth:`set_epoch`), the next iteration starts at the restored
    position instead. A loader has one iterator at a time: ``iter()`` again ends the previous one,
    which then raises ``RuntimeError`` if used (``zip(loader, loader)`` cannot silently yield
    nothing); use two loaders to read two streams.

    Stored dtypes are kept where JAX has them (``uint8`` images stay ``uint8``: 4x less to move
    than int32); 64-bit ints become int32 (int64 with ``jax_enable_x64``, raising if a value does
    not fit) and float64 becomes float32.

    Worker processes are spawned (never forked: this process may run JAX) and do not run the
    main script again: functions defined in the script or a notebook are sent to them by value
    (cloudpickle), so a script that imports torch or JAX at the top costs its workers nothing.
    They import numpy, the decoders and what your functions import, never JAX by themselves. A
    start slower than a few seconds is explained once, with what the functions imported.

    >>> import numpy as np
    >>> from jaxfeed import Dataset, DataLoader
    >>> ds = Dataset.from_dict({"x": np.arange(10, dtype=np.float32), "y": np.arange(10)})
    >>> loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0)
    >>> [b["x"].shape for b in loader], len(loader)
    ([(4,), (4,), (2,)], 3)
    >>> def jitter(row, rng):
    ...     return {"x": row["x"] + rng.normal(), "y": row["y"]}
    >>> next(iter(DataLoader(ds, batch_size=4, row_transform=jitter)))["x"].dtype
    dtype('float32')
    """

    def __new__(cls, dataset: Any = None, *args: Any, **kwargs: Any) -> Any:
        # streams have their own loader, a DataLoader too (registered below): Python calls
        # __init__ only on an instance of a real subclass, so it is built once, here
        if isinstance(dataset, IterableDataset):
            return StreamingDataLoader(dataset, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        columns: Sequence[str] | None = None,
        row_transform: Callable | None = None,
        transform: Callable | None = None,
        prefetch: int = 2,
        device: Any = None,
        sharding: Any = None,
        num_workers: int | str = 0,
        worker_mode: str = "process",
        timeout: float | None = None,
        decode_size: Any = None,
        padding: Padding | None = None,
        bucket_by_length: bool = False,
        packing: Packing | None = None,
    ) -> None:
        self.options = options = LoaderOptions(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            columns=columns,
            row_transform=row_transform,
            transform=transform,
            prefetch=prefetch,
            device=device,
            sharding=sharding,
            num_workers=num_workers,
            worker_mode=worker_mode,
            timeout=timeout,
            decode_size=decode_size,
            padding=padding,
            bucket_by_length=bucket_by_length,
            packing=packing,
        )
        self.padding, self.packing = options.padding, options.packing
        self.bucket_by_length = options.bucket_by_length
        self.source = _make_source(dataset, options.columns)
        self._collate = self._collate_step()
        self._plans: dict[int, PackPlan] = {}
        self._lengths: dict[str, np.ndarray] = {}
        self.batch_size = options.batch_size
        self.shuffle = options.shuffle
        self.seed = options.seed
        self.drop_last = options.drop_last
        self.row_transform = options.row_transform
        self.transform = options.transform
        self.prefetch = options.prefetch
        workers = options.num_workers
        self.num_workers = available_cores() if workers == "auto" else workers
        self.worker_mode = options.worker_mode
        self.timeout = options.timeout
        self.decode_size = self._decode_sizes(options.decode_size)
        n = len(self.source)
        if self.drop_last and n < self.batch_size:
            raise ValueError(
                f"the dataset has {n} rows, fewer than one batch of {self.batch_size}, and "
                "drop_last=True would yield nothing; lower batch_size or set drop_last=False"
            )
        self.placement: Placement = sharding if sharding is not None else resolve_placement(device)
        self._local_cache: dict[int, slice | None] = {}  # _local_rows by batch rows
        if sharding is not None:
            self._check_last_batch(sharding, n)
        self._transform_rng = transform is not None and takes_rng(transform)
        self._epoch = 0
        self._position = 0  # batches of the current epoch the consumer has received
        self._resume = True  # the next iteration starts at (_epoch, _position)
        self._iterator: weakref.ref | None = None
        self._backend: Any = None
        if self.num_workers and self.worker_mode == "process" and self._worker_work():
            # the workers start now, not at the first next(): a new loader over the same data
            # takes over the ready workers of one between epochs (see workers.ProcessBackend)
            self._get_backend().start_workers()

    def _check_last_batch(self, sharding: Any, n: int) -> None:
        """Refuse a last batch of ``n`` rows that ``sharding``'s devices cannot split evenly."""
        divisor = batch_divisor(sharding)  # LoaderOptions checked that it divides batch_size
        if (
            self.packing is None  # a last packed batch is completed with empty rows
            and not self.drop_last
            and n % self.batch_size
            and (n % self.batch_size) % divisor
        ):
            raise ValueError(
                f"the last batch has {n % self.batch_size} rows, which cannot be split over the "
                f"{divisor} devices of the sharding; set drop_last=True"
            )

    def _decode_sizes(self, decode_size: Any) -> dict[str, tuple[int, int]]:
        if decode_size is None:
            return {}
        media = self.source.media if isinstance(self.source, _ArrowSource) else {}
        if isinstance(decode_size, dict):
            unknown = [c for c in decode_size if c not in media]
            if unknown:
                raise ValueError(
                    f"decode_size names {unknown}, which are not decoded media columns of this "
                    f"loader ({sorted(media)})"
                )
            sizes = decode_size
        else:
            sizes = {c: decode_size for c in media}
        out = {}
        for column, size in sizes.items():
            if isinstance(size, int) and not isinstance(size, bool):
                size = (size, size)
            if not (
                isinstance(size, tuple | list)
                and len(size) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
            ):
                raise ValueError(
                    f"decode_size for column {column!r} must be (height, width) of positive ints, "
                    f"got {size!r}"
                )
            out[column] = (int(size[0]), int(size[1]))
        return out

    # ------------------------------------------------------------------ sizes and state
    def __len__(self) -> int:
        return self._num_batches(self._epoch)

    def _num_batches(self, epoch: int) -> int:
        n = len(self.source) if self.packing is None else self._plan(epoch).num_packed
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    # ------------------------------------------------------------------ variable-length rows
    def _collate_step(self) -> Any:
        """The padding or packing step of batch building (None without either)."""
        step = self.padding or self.packing
        if step is None:
            return None
        if isinstance(self.source, _ItemSource) and len(self.source):
            # generic items declare nothing: columns whose first rows differ in length are ragged
            sample = self.source.gather(np.arange(min(64, len(self.source)), dtype=np.int64))
            self.source.variable = tuple(variable_columns(sample))
        variable = self.source.variable
        if step.columns is not None and isinstance(self.source, _ArrowSource):
            unknown = [c for c in step.columns if c not in self.source.columns]
            if unknown:
                raise ValueError(
                    f"{type(step).__name__}(columns=...) names {unknown}, which are not columns "
                    f"of this loader ({self.source.columns})"
                )
        if isinstance(self.source, _ArrowSource):
            wanted = step.columns if step.columns is not None else variable
            self.source.ragged = tuple(c for c in wanted if c in variable)
        if self.packing is not None:
            return PackStep(self.packing, variable)
        return PadStep(self.padding, variable)

    def _length_column(self) -> str:
        """The column whose lengths order bucketing and plan packing."""
        step = self.padding or self.packing
        if step is not None and step.columns is not None:
            return step.columns[0]
        variable = self.source.variable
        if variable:
            return "input_ids" if "input_ids" in variable else variable[0]
        if isinstance(self.source, _ItemSource) and len(self.source):
            return self._item_column()
        raise ValueError(
            "bucket_by_length and packing need a variable-length column (a ragged list of "
            f"numbers); this loader's columns are {self.source.columns}"
        )

    def _item_column(self) -> str:
        first = self.source.gather(np.zeros(1, dtype=np.int64))
        if "input_ids" in first:
            return "input_ids"
        for column, value in first.items():
            if isinstance(value, list | np.ndarray) and np.ndim(value[0]) >= 1:
                return column
        raise ValueError(
            f"bucket_by_length and packing need a variable-length column; the items have {sorted(first)}"
        )

    def _row_lengths(self) -> np.ndarray:
        return self._column_lengths(self._length_column())

    def _column_lengths(self, column: str) -> np.ndarray:
        """Every row's stored length in ``column`` (read once, then kept)."""
        if column not in self._lengths:
            self._lengths[column] = self.source.lengths(column)
        return self._lengths[column]

    def _padded(self) -> tuple[str, ...]:
        """The columns padding pads whatever the batch (those a process's share alone may not
        show as variable-length)."""
        if self.padding.columns is not None:
            return self.padding.columns
        if self.source.variable or not isinstance(self.source, _ItemSource):
            return self.source.variable
        return (self._item_column(),)

    def _plan(self, epoch: int) -> PackPlan:
        """The packing of ``epoch`` (the same in every process and after a resume)."""
        plan = self._plans.get(epoch)
        if plan is None:
            n = len(self.source)
            order = EpochOrder(n, self.seed, epoch, self.shuffle).rows(0, n)
            bins = self.packing.num_bins or 2 * self.batch_size
            plan = best_fit(self._row_lengths()[order], order, self.packing, bins)
            self._plans = {k: v for k, v in self._plans.items() if k >= epoch - 1}
            self._plans[epoch] = plan
        return plan

    def _order(self, epoch: int) -> Any:
        """What says which rows each batch of ``epoch`` reads."""
        if self.packing is not None:
            return self._plan(epoch)
        if self.bucket_by_length:
            return LengthGroupedOrder(
                self._row_lengths(), self.batch_size, self.seed, epoch, self.shuffle
            )
        return EpochOrder(len(self.source), self.seed, epoch, self.shuffle)

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch``."""
        self._close_iterator()
        self._epoch, self._position, self._resume = int(epoch), 0, True

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable position: the next batch is ``batches_consumed`` of ``epoch``.

        It describes the latest iteration (also one left early with ``break``): a loader that
        loads it continues that epoch exactly there. Batches prefetched but not yet handed to the
        consumer are not counted.
        """
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self._epoch,
            "batches_consumed": self._position,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "num_rows": len(self.source),
            "dataset": self.source.fingerprint(),
            **self._variable_state(),
        }

    def _variable_state(self) -> dict[str, Any]:
        """Bucketing and packing change which rows each batch holds: a state records them."""
        out: dict[str, Any] = {}
        if self.bucket_by_length:
            out["bucket_by_length"] = True
        if self.packing is not None:
            p = self.packing
            out["packing"] = [p.length, p.long_rows, p.num_bins or 2 * self.batch_size]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next batch is exactly the one an uninterrupted run would get."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a DataLoader state (version {STATE_VERSION}): {state!r}"[:200])
        mine = self.state_dict()
        for key in ("num_rows", "dataset", "batch_size", "shuffle", "drop_last", "seed"):
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"the saved loader state does not match this loader: {key} is {state.get(key)!r} in the "
                    f"state but {mine[key]!r} here"
                )
        for key in ("bucket_by_length", "packing"):
            if state.get(key) != mine.get(key):
                raise ValueError(
                    f"the saved loader state does not match this loader: {key} is "
                    f"{state.get(key)!r} in the state but {mine.get(key)!r} here"
                )
        position = int(state["batches_consumed"])
        total = self._num_batches(int(state["epoch"]))
        if not 0 <= position <= total:
            raise ValueError(f"batches_consumed={position} is outside [0, {total}]")
        self._close_iterator()
        self._epoch, self._position, self._resume = int(state["epoch"]), position, True
        if position == total:
            self._epoch, self._position = self._epoch + 1, 0

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Batch]:
        self._close_iterator(superseded=True)
        if not self._resume or self._position >= len(self):
            self._epoch, self._position = self._epoch + 1, 0
        self._resume = False
        backend = self._get_backend()
        iterator = _EpochIterator(self, self._epoch, self._position, backend)
        self._iterator = weakref.ref(iterator)
        return iterator

    def _recipe(self) -> Recipe:
        arrow = isinstance(self.source, _ArrowSource)
        return Recipe(
            media=self.source.media if arrow else {},
            items=None if arrow else self.source,
            row_transform=self.row_transform,
            transform=self.transform,
            seed=self.seed,
            decode_size=self.decode_size,
            collate=self._collate,
        )

    def _worker_work(self) -> bool:
        """Whether workers have anything to do (decoding, transforms, reading a generic source)."""
        return (
            not isinstance(self.source, _ArrowSource)
            or bool(self.source.media)
            or self.row_transform is not None
            or self.transform is not None
            or self._collate is not None
        )

    def _get_backend(self) -> Any:
        if self._backend is None:
            recipe = self._recipe()
            if not self.num_workers or not self._worker_work():
                self._backend = InlineBackend(recipe)
            elif self.worker_mode == "thread":
                self._backend = ThreadBackend(recipe, self.num_workers)
            else:
                self._backend = ProcessBackend(recipe, self.num_workers)
        return self._backend

    # ------------------------------------------------------------------ what an epoch reports
    # (jaxfeed.loading.epochs.EpochHost: an epoch changes the loader's state only through these)
    def _consumed(self, position: int) -> None:
        self._position = position

    def _epoch_ended(self, iterator: object, epoch: int) -> None:
        if self._iterator is None or self._iterator() in (iterator, None):
            self._epoch, self._position = epoch + 1, 0
            self._resume = True

    def _epoch_closed(self, backend: Any, failed: bool, left_early: bool) -> None:
        if self._backend is None or self._backend is not backend:
            return
        if failed:
            self._drop_backend(kill=True)
        elif left_early:
            backend.discard()

    def _drop_backend(self, kill: bool) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close(kill=kill)

    def _close_iterator(self, superseded: bool = False) -> None:
        it = self._iterator() if self._iterator is not None else None
        if it is not None:
            it.close(superseded=superseded)
        self._iterator = None

    def close(self) -> None:
        """Stop the prefetch thread and the worker processes (also done on garbage collection)."""
        self._close_iterator()
        self._drop_backend(kill=False)

    # ------------------------------------------------------------------ one batch
    def _local_rows(self, rows: int) -> slice | None:
        """In multi-process JAX, which of a global batch's ``rows`` this process loads (else None).
        Worked out once per batch size (asking JAX had cost 12% of an in-memory batch)."""
        if rows not in self._local_cache:
            self._local_cache[rows] = self._find_local_rows(rows)
        return self._local_cache[rows]

    def _find_local_rows(self, rows: int) -> slice | None:
        if (
            jax.process_count() == 1
            or isinstance(self.placement, jax.Device)
            or self.placement.is_fully_addressable
        ):
            return None
        blocks = sorted(
            {
                (idx[0].start or 0, rows if idx[0].stop is None else idx[0].stop)
                for idx in self.placement.addressable_devices_indices_map((rows,)).values()
            }
        )
        lo, hi = blocks[0][0], blocks[-1][1]
        if any(b[0] != a[1] for a, b in itertools.pairwise(blocks)):
            raise ValueError(
                "this process's devices do not hold one contiguous block of the batch dimension; "
                "use a mesh whose data axis runs over processes in order (jax.make_mesh)"
            )
        return slice(lo, hi)

    def _job(self, order: Any, epoch: int, step: int) -> Job:
        """Order and gather of batch ``step`` (what a worker needs to build it)."""
        if isinstance(order, PackPlan):
            local = self._local_rows(self.batch_size) or slice(0, self.batch_size)
            first = step * self.batch_size + local.start
            rows, positions, layout = batch_layout(order, first, local.stop - local.start)
            columns = self.source.gather(rows) if isinstance(self.source, _ArrowSource) else None
            return Job(epoch, step, rows, positions, columns, layout)
        start = step * self.batch_size
        stop = min(start + self.batch_size, len(self.source))
        rows = order.rows(start, stop)
        positions = np.arange(start, stop, dtype=np.int64)
        local = self._local_rows(stop - start)
        longest = None
        if local is not None:
            if self.padding is not None:  # every process pads its share to the same length
                longest = {c: int(self._column_lengths(c)[rows].max()) for c in self._padded()}
            rows, positions = rows[local], positions[local]
        columns = self.source.gather(rows) if isinstance(self.source, _ArrowSource) else None
        return Job(epoch, step, np.asarray(rows), positions, columns, longest)

    def _place(self, batch: dict[str, Any], job: Job, shared: bool) -> tuple[Batch, list]:
        """Dtype rules, then one transfer to the device(s); with ``shared`` (the arrays live in a
        worker's shared-memory slot), also the device arrays that alias the slot (on a CPU device
        they are the slot's memory, no copy): the slot is reused once they are garbage."""
        rows = job.rows

        def row_of(position: int) -> int:
            return int(rows[position])

        host = {
            k: v
            if type(v) is np.ndarray and v.dtype in _CANONICAL
            else to_host(v, k, row_of, None, keep_ints=True)
            for k, v in batch.items()
        }
        alias = shared and isinstance(self.placement, jax.Device)
        placed = put_tree(host, self.placement, batched=True, copy=shared and not alias)
        keep: list = []
        if shared:
            arrays = [v for v in placed.values() if isinstance(v, jax.Array)]
            jax.block_until_ready(arrays)  # the host buffers may be reused after this
            if alias:
                keep = [
                    placed[k]
                    for k, v in host.items()
                    if type(v) is np.ndarray
                    and isinstance(placed.get(k), jax.Array)
                    and _aliases(placed[k], v)
                ]
        return placed, keep

    # ------------------------------------------------------------------ diagnostics
    def debug_info(self) -> dict[str, Any]:
        """What the loader runs at this moment, read-only, for diagnostics and tests (the keys
        are stable; the values change as it iterates):

        * ``backend``: ``"inline"``, ``"thread"``, ``"process"``, or None before the first
          epoch and after :meth:`close`;
        * ``shared_memory_prefix``: the name prefix of the worker processes' shared-memory
          slots (``/dev/shm`` names), None without worker processes;
        * ``worker_pids``: the worker processes' ids, empty without them;
        * ``worker_starts``: per worker, what its start cost once it said it was ready (an empty
          dict before): ``queued`` (seconds it waited for its turn to import: at most one fewer
          worker than the usable cores import at once), ``seconds`` (from then to ready),
          ``modules``, ``recipe`` (reading the functions and dataset), ``cpu`` (its CPU
          seconds), ``heavy`` (large libraries that reading the recipe imported), ``ready_at``;
        * ``read_ahead``: batches ready ahead of the consumer in the epoch being read;
          ``read_ahead_bound``: the most there can be (``prefetch``).

        >>> from jaxfeed import Dataset
        >>> loader = DataLoader(Dataset.from_dict({"x": list(range(8))}), batch_size=2)
        >>> _ = next(iter(loader))
        >>> info = loader.debug_info()
        >>> info["backend"], info["worker_pids"], info["read_ahead_bound"]
        ('inline', [], 2)
        """
        backend = self._backend
        kinds = {InlineBackend: "inline", ThreadBackend: "thread", ProcessBackend: "process"}
        workers = getattr(backend, "workers", None) if isinstance(backend, ProcessBackend) else []
        iterator = self._iterator() if self._iterator is not None else None
        ahead = 0
        if iterator is not None and iterator.producer is not None:
            ahead = iterator.producer.queue.qsize()
        elif iterator is not None and iterator.ahead is not None:
            ahead = len(iterator.ahead)
        return {
            "backend": None
            if backend is None
            else kinds.get(type(backend), type(backend).__name__),
            "shared_memory_prefix": getattr(backend, "prefix", None),
            "worker_pids": [w.process.pid for w in workers or []],
            "worker_starts": [dict(w.start) for w in workers or []],
            "read_ahead": ahead,
            "read_ahead_bound": self.prefetch,
        }


DataLoader.register(StreamingDataLoader)  # DataLoader(iterable_dataset, ...) is a DataLoader


def _aliases(array: Any, host: np.ndarray) -> bool:
    try:
        return array.unsafe_buffer_pointer() == host.ctypes.data
    except Exception:  # not a single-buffer array, or the backend cannot tell: assume it may
        return True


def available_cores() -> int:
    """The cores this process may run on (``num_workers="auto"``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)
