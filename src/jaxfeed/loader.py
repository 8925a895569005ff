"""`DataLoader`: shuffled, prefetched ``jax.Array`` batches, sharded across devices and hosts, with
exact resume.

One batch is built in stages, in a background thread so the training step never waits:

1. **order**: the epoch's rows come from a seeded permutation (:mod:`jaxfeed.order`), O(1) memory;
2. **gather**: fixed-shape and numeric columns are gathered with one ``np.take`` from zero-copy
   views of the (memory-mapped) Arrow buffers; other columns are read in bulk and decoded;
3. **decode**: ``Image``/``Audio`` columns decode in ``num_workers`` processes (spawned, never
   forked from a process that runs JAX) or threads;
4. **transform**: an optional function on the numpy batch, given a generator seeded by
   ``(seed, epoch, step)`` so a resumed run sees the same augmentation;
5. **transfer**: the whole batch moves in one call, to a device or split over a sharding; in
   multi-process JAX each process reads only its rows and global arrays are assembled with
   ``jax.make_array_from_process_local_data``.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import inspect
import itertools
import json
import math
import multiprocessing
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from jaxfeed.dataset import Dataset
from jaxfeed.devices import Placement, batch_divisor, put_tree, resolve_placement
from jaxfeed.features import DecodeError
from jaxfeed.features.media import MediaFeature
from jaxfeed.features.sequence import _stack_if_same
from jaxfeed.formatting import to_host
from jaxfeed.order import EpochOrder

STATE_VERSION = 1
_CANONICAL = {
    np.dtype(t) for t in ("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float32")
}
Batch = dict[str, Any]


# ---------------------------------------------------------------------------------- sources
class _ArrowSource:
    """A jaxfeed ``Dataset``: bulk gathers from Arrow views; media decoded (maybe in workers)."""

    def __init__(self, ds: Dataset, columns: Sequence[str] | None) -> None:
        self.ds = ds
        self.columns = list(columns) if columns is not None else ds.column_names
        unknown = [c for c in self.columns if c not in ds.column_names]
        if unknown:
            raise ValueError(
                f"columns {unknown} are not in the dataset; its columns are {ds.column_names}"
            )
        self.media = {
            c: ds.features[c]
            for c in self.columns
            if isinstance(ds.features[c], MediaFeature) and ds.features[c].decode
        }
        self._labels: dict[str, Any] = {}  # ClassLabel columns pre-cast to int32 (bounded ids)

    def __len__(self) -> int:
        return self.ds.num_rows

    def fingerprint(self) -> str:
        payload = json.dumps(
            {"features": self.ds.features.to_dict(), "rows": len(self)}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def _label_view(self, column: str) -> Any:
        """Class ids fit int32 whatever they are stored as: cast the column once, not every batch."""
        if column not in self._labels:
            from jaxfeed.features import ClassLabel
            from jaxfeed.formatting import jax_int_dtype
            from jaxfeed.reader import ChunkedView

            view = self.ds._internal.reader.view(column)
            ok = (
                isinstance(self.ds.features[column], ClassLabel)
                and view is not None
                and jax_int_dtype() == np.int32
            )
            self._labels[column] = (
                ChunkedView([c.astype(np.int32) for c in view.chunks]) if ok else None
            )
        return self._labels[column]

    def gather(self, rows: np.ndarray, pool: _Workers | None) -> dict[str, Any]:
        reader = self.ds._internal.reader
        table_rows = self.ds._internal.table_rows(rows)
        out: dict[str, Any] = {}
        for column in self.columns:
            view = self._label_view(column) or reader.view(column)
            if view is not None:
                out[column] = view.take(table_rows)
            elif column in self.media and pool is not None:
                stored = self.media[column].iter_stored(reader.arrow_column(column, table_rows))
                out[column] = pool.decode(self.media[column], column, stored, table_rows)
            else:
                out[column] = reader.numpy(column, table_rows)
        return out


class _ItemSource:
    """Any object with ``__len__`` and ``__getitem__`` (or a batched ``__getitems__``)."""

    def __init__(self, data: Any, columns: Sequence[str] | None) -> None:
        if not (
            hasattr(data, "__len__")
            and (hasattr(data, "__getitem__") or hasattr(data, "__getitems__"))
        ):
            raise TypeError(
                f"DataLoader needs a jaxfeed Dataset, a datasets.Dataset, or an object with __len__ and "
                f"__getitem__/__getitems__; got {type(data).__name__}"
            )
        self.data = data
        self.columns = list(columns) if columns is not None else None

    def __len__(self) -> int:
        return len(self.data)

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{type(self.data).__qualname__}:{len(self)}".encode()).hexdigest()[
            :16
        ]

    def gather(self, rows: np.ndarray, pool: _Workers | None) -> dict[str, Any]:
        ids = rows.tolist()
        items = (
            self.data.__getitems__(ids)
            if hasattr(self.data, "__getitems__")
            else [self.data[i] for i in ids]
        )
        if not items:
            return {}
        first = items[0]
        if isinstance(first, dict):
            keys = list(first)
        elif isinstance(first, tuple | list):
            keys = [str(i) for i in range(len(first))]
            items = [dict(zip(keys, item, strict=True)) for item in items]
        else:
            keys, items = ["data"], [{"data": item} for item in items]
        if self.columns is not None:
            missing = [c for c in self.columns if c not in keys]
            if missing:
                raise ValueError(
                    f"columns {missing} are not in the dataset's items; they have {keys}"
                )
            keys = self.columns
        out = {}
        for key in keys:
            values = [item[key] for item in items]
            if isinstance(values[0], str | bytes) or values[0] is None:
                out[key] = values
            else:
                out[key] = _stack_if_same([np.asarray(v) for v in values])
        return out


def _make_source(dataset: Any, columns: Sequence[str] | None) -> _ArrowSource | _ItemSource:
    if isinstance(dataset, Dataset):
        return _ArrowSource(dataset, columns)
    if (
        type(dataset).__module__.startswith("datasets.")
        and hasattr(dataset, "features")
        and hasattr(dataset, "data")
    ):
        return _ArrowSource(Dataset.from_hf(dataset), columns)
    return _ItemSource(dataset, columns)


# ---------------------------------------------------------------------------------- workers
def _decode_chunk(feature: MediaFeature, column: str, stored: list, rows: list[int]) -> list:
    out = []
    for i, value in enumerate(stored):
        try:
            out.append(feature.decode_value(value, i))
        except DecodeError as err:
            raise err.at(column, rows[i]) from None
    return out


class _Pending:
    """Decoded values still being produced by workers, in chunks."""

    def __init__(self, futures: list[cf.Future]) -> None:
        self.futures = futures

    def result(self) -> np.ndarray | list:
        values: list = []
        for future in self.futures:
            values.extend(future.result())
        return _stack_if_same(values)


class _Workers:
    """A pool that decodes media values in chunks, in processes (spawned) or threads."""

    def __init__(self, num_workers: int, mode: str) -> None:
        self.num_workers = num_workers
        if mode == "process":
            context = multiprocessing.get_context("spawn")  # never fork a process running JAX
            self.pool: cf.Executor = cf.ProcessPoolExecutor(num_workers, mp_context=context)
        else:
            self.pool = cf.ThreadPoolExecutor(num_workers, thread_name_prefix="jaxfeed-decode")

    def decode(
        self, feature: MediaFeature, column: str, stored: list, rows: np.ndarray
    ) -> _Pending:
        n = len(stored)
        size = max(1, math.ceil(n / self.num_workers))
        futures = [
            self.pool.submit(
                _decode_chunk, feature, column, stored[i : i + size], rows[i : i + size].tolist()
            )
            for i in range(0, n, size)
        ]
        return _Pending(futures)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------------------------- loader
class DataLoader:
    """Batches of ``jax.Array`` from a dataset, one epoch per iteration.

    Args:
        dataset: a jaxfeed ``Dataset``, a Hugging Face ``datasets.Dataset``, or any object with
            ``__len__`` and ``__getitem__`` / ``__getitems__`` returning dicts.
        batch_size: rows per batch (the global batch in multi-process JAX).
        shuffle: a new seeded order every epoch, derived from ``(seed, epoch)``.
        drop_last: drop the final short batch.
        columns: the columns to load (default: all).
        transform: ``fn(batch)`` or ``fn(batch, rng)`` on the numpy batch; ``rng`` is a
            ``numpy.random.Generator`` seeded by ``(seed, epoch, step)``.
        prefetch: batches kept ready on the device by a background thread (0: none).
        device: a device string or ``jax.Device`` (default: the first device).
        sharding: a ``jax.sharding.Sharding`` that splits the batch dimension, e.g.
            ``NamedSharding(mesh, P("data"))``.
        num_workers: processes (or threads, ``worker_mode="thread"``) decoding Image/Audio columns.

    Stored dtypes are kept where JAX has them (``uint8`` images stay ``uint8``: 4x less to move
    than int32); 64-bit ints become int32 (int64 with ``jax_enable_x64``, raising if a value does
    not fit) and float64 becomes float32.

    >>> import numpy as np
    >>> from jaxfeed import Dataset, DataLoader
    >>> ds = Dataset.from_dict({"x": np.arange(10, dtype=np.float32), "y": np.arange(10)})
    >>> loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0)
    >>> [b["x"].shape for b in loader], len(loader)
    ([(4,), (4,), (2,)], 3)
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        columns: Sequence[str] | None = None,
        transform: Callable | None = None,
        prefetch: int = 2,
        device: Any = None,
        sharding: Any = None,
        num_workers: int = 0,
        worker_mode: str = "process",
    ) -> None:
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int | np.integer)
            or batch_size <= 0
        ):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if worker_mode not in ("process", "thread"):
            raise ValueError(f"worker_mode must be 'process' or 'thread', got {worker_mode!r}")
        if device is not None and sharding is not None:
            raise ValueError("give device= or sharding=, not both")
        self.source = _make_source(dataset, columns)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.transform = transform
        self.prefetch = prefetch
        self.num_workers = num_workers
        self.worker_mode = worker_mode
        n = len(self.source)
        if drop_last and n < batch_size:
            raise ValueError(
                f"the dataset has {n} rows, fewer than one batch of {batch_size}, and drop_last=True "
                "would yield nothing; lower batch_size or set drop_last=False"
            )
        self.placement: Placement = sharding if sharding is not None else resolve_placement(device)
        if sharding is not None:
            from jax.sharding import Sharding

            if not isinstance(sharding, Sharding):
                raise ValueError(
                    f"sharding must be a jax.sharding.Sharding, got {type(sharding).__name__}"
                )
            divisor = batch_divisor(sharding)
            if self.batch_size % divisor:
                raise ValueError(
                    f"batch_size {self.batch_size} cannot be split over the {divisor} devices of the "
                    f"sharding; use a multiple of {divisor}"
                )
            if not self.drop_last and n % self.batch_size and (n % self.batch_size) % divisor:
                raise ValueError(
                    f"the last batch has {n % self.batch_size} rows, which cannot be split over the "
                    f"{divisor} devices of the sharding; set drop_last=True"
                )
        self._transform_rng = transform is not None and _takes_rng(transform)
        self._epoch = 0
        self._position = 0  # batches of the current epoch the consumer has received
        self._iterator: weakref.ref | None = None
        self._workers: _Workers | None = None

    # ------------------------------------------------------------------ sizes and state
    def __len__(self) -> int:
        n = len(self.source)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (0-based)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch``."""
        self._close_iterator()
        self._epoch, self._position = int(epoch), 0

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable position: the next batch is ``batches_consumed`` of ``epoch``.

        Batches prefetched but not yet handed to the consumer are not counted.
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
        }

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
        position = int(state["batches_consumed"])
        if not 0 <= position <= len(self):
            raise ValueError(f"batches_consumed={position} is outside [0, {len(self)}]")
        self._close_iterator()
        self._epoch, self._position = int(state["epoch"]), position
        if position == len(self):
            self._epoch, self._position = self._epoch + 1, 0

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Batch]:
        self._close_iterator()
        if self._position >= len(self):  # the last epoch was read to its last batch
            self._epoch, self._position = self._epoch + 1, 0
        if self.num_workers and self._needs_workers() and self._workers is None:
            self._workers = _Workers(self.num_workers, self.worker_mode)
        iterator = _EpochIterator(self, self._epoch, self._position)
        self._iterator = weakref.ref(iterator)
        return iterator

    def _needs_workers(self) -> bool:
        return isinstance(self.source, _ArrowSource) and bool(self.source.media)

    def _close_iterator(self) -> None:
        it = self._iterator() if self._iterator is not None else None
        if it is not None:
            it.close()
        self._iterator = None

    def close(self) -> None:
        """Stop the prefetch thread and the decode workers (also done on garbage collection)."""
        self._close_iterator()
        if self._workers is not None:
            self._workers.shutdown()
            self._workers = None

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may already be gone at interpreter shutdown
            self.close()
        except Exception:
            pass

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ one batch
    def _local_rows(self, rows: int) -> slice | None:
        """In multi-process JAX, which of a global batch's ``rows`` this process loads (else None)."""
        import jax

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

    def _start(
        self, order: EpochOrder, epoch: int, step: int
    ) -> tuple[int, int, np.ndarray, dict[str, Any]]:
        """Stage 1 (order, gather, start decoding) of batch ``step``."""
        start = step * self.batch_size
        stop = min(start + self.batch_size, len(self.source))
        rows = order.rows(start, stop)
        local = self._local_rows(stop - start)
        if local is not None:
            rows = rows[local]
        return epoch, step, rows, self.source.gather(rows, self._workers)

    def _finish(self, epoch: int, step: int, rows: np.ndarray, host: dict[str, Any]) -> Batch:
        """Stage 2 (finish decoding, transform, transfer) of batch ``step``."""
        batch = {k: v.result() if isinstance(v, _Pending) else v for k, v in host.items()}
        if self.transform is not None:
            if self._transform_rng:
                batch = self.transform(batch, np.random.default_rng([self.seed, epoch, step]))
            else:
                batch = self.transform(batch)
            if not isinstance(batch, dict):
                raise TypeError(
                    f"transform must return a dict of columns, got {type(batch).__name__}"
                )

        def row_of(position: int) -> int:
            return int(rows[position])

        host = {
            k: v
            if type(v) is np.ndarray and v.dtype in _CANONICAL
            else to_host(v, k, row_of, None, keep_ints=True)
            for k, v in batch.items()
        }
        return put_tree(host, self.placement, batched=True)


def _takes_rng(fn: Callable) -> bool:
    try:
        params = [
            p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]  # fmt: skip
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


# ---------------------------------------------------------------------------------- epochs
_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Producer:
    """Builds batches ``start..`` of one epoch in a background thread, ``depth`` ahead."""

    def __init__(self, loader: DataLoader, epoch: int, start: int, depth: int) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.slots = threading.Semaphore(depth)  # at most `depth` batches ready and unconsumed
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(loader, epoch, start), name="jaxfeed-prefetch", daemon=True
        )
        self.thread.start()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            if self.slots.acquire(timeout=0.05):
                self.queue.put(item)
                return True
        return False

    def _run(self, loader: DataLoader, epoch: int, start: int) -> None:
        try:
            order = EpochOrder(len(loader.source), loader.seed, epoch, loader.shuffle)
            pending: deque = deque()
            ahead = 1 + (loader.num_workers if loader._workers is not None else 0)
            step = start
            total = len(loader)
            while (step < total or pending) and not self.stop.is_set():
                while step < total and len(pending) < ahead:
                    pending.append(loader._start(order, epoch, step))
                    step += 1
                if not self._put(loader._finish(*pending.popleft())):
                    return
            self._put(_END)
        except BaseException as err:
            self._put(_Failure(err))

    def get(self) -> Any:
        while True:
            try:
                item = self.queue.get(timeout=0.1)
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    return _Failure(RuntimeError("the prefetch thread stopped without a result"))
                continue
            self.slots.release()
            return item

    def close(self) -> None:
        self.stop.set()
        while True:  # drop ready batches (their device buffers) now
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=30)


class _EpochIterator:
    """One epoch of batches; closing it (``break``, garbage collection, errors) stops its thread."""

    def __init__(self, loader: DataLoader, epoch: int, start: int) -> None:
        self.loader = loader
        self.epoch = epoch
        self.step = start
        self.done = False
        self.producer: _Producer | None = None
        self.order: EpochOrder | None = None
        if start >= len(loader):
            self._end()
        elif loader.prefetch > 0:
            self.producer = _Producer(loader, epoch, start, loader.prefetch)
        else:
            self.order = EpochOrder(len(loader.source), loader.seed, epoch, loader.shuffle)

    def __iter__(self) -> _EpochIterator:
        return self

    def __len__(self) -> int:
        return max(0, len(self.loader) - self.step)

    def _end(self) -> None:
        self.done = True
        if self.loader._iterator is None or self.loader._iterator() in (self, None):
            self.loader._epoch, self.loader._position = self.epoch + 1, 0

    def __next__(self) -> Batch:
        if self.done:
            raise StopIteration
        if self.producer is None:
            if self.step >= len(self.loader):
                self._end()
                raise StopIteration
            try:
                batch = self.loader._finish(*self.loader._start(self.order, self.epoch, self.step))
            except BaseException:
                self.close(failed=True)
                raise
        else:
            item = self.producer.get()
            if item is _END:
                self._end()
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close(failed=True)
                raise item.error
            batch = item
        self.step += 1
        self.loader._position = self.step
        return batch

    def close(self, failed: bool = False) -> None:
        """Stop the prefetch thread; an epoch left early (break, error) also stops the workers."""
        if self.producer is not None:
            self.producer.close()
            self.producer = None
        interrupted = failed or not self.done
        self.done = True
        if interrupted and self.loader._workers is not None:
            self.loader._workers.shutdown()
            self.loader._workers = None

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may already be gone at interpreter shutdown
            self.close()
        except Exception:
            pass
