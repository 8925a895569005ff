"""`StreamingDataLoader`: ``jax.Array`` batches from an :class:`~jaxfeed.IterableDataset`.

``DataLoader(iterable_dataset, batch_size, ...)`` builds one of these. A read-ahead thread reads
the stream (Arrow tables of a few MB) and converts each table to numpy without per-row Python work
(media columns decode there too); the consuming thread cuts exact batches from those columns,
applies the optional ``transform`` and moves each batch to its device or sharding in one call,
``prefetch`` batches ahead. In multi-process JAX with a sharding that spans processes, each
process reads only its own files / row groups (:func:`jaxfeed.split_dataset_by_node`) and loads
only its block of every global batch.

``state_dict()`` records the stream's position after the last batch *handed out* (prefetched
batches are not counted): the source's file and row, each step's counters, and the rows held in
shuffle buffers and partial batches (as Arrow IPC, base64). ``load_state_dict`` continues with
exactly the batches an uninterrupted run would have produced.
"""

from __future__ import annotations

import collections
import copy
import itertools
import queue
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
import pyarrow as pa

from jaxfeed._base.calls import takes_rng
from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Features, List, Value
from jaxfeed.data.formatting import to_host
from jaxfeed.data.iterable import (
    IterableDataset,
    Lookahead,
    Stream,
    decode_state,
    encode_state,
    split_dataset_by_node,
)
from jaxfeed.data.ragged import is_ragged_type
from jaxfeed.data.reader import TableReader
from jaxfeed.loading.bucketing import MEGA_BATCHES, bucket_table
from jaxfeed.loading.options import LoaderOptions, _BaseLoader
from jaxfeed.loading.packing import POSITIONS, SEGMENT_IDS, Packing, pack_table
from jaxfeed.loading.padding import Padding, pad_batch
from jaxfeed.runtime.devices import Placement, put_tree, resolve_placement, row_placer

STATE_VERSION = 1
_CANONICAL = {
    np.dtype(t) for t in ("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float32")
}
_END = object()
_READ_AHEAD = 2  # decoded tables (a few MB each) read ahead of the batches, across epochs


class StreamingDataLoader(_BaseLoader):
    """Batches of a stream on the device, prefetched, resumable.

    Made by :class:`jaxfeed.DataLoader` when given an :class:`~jaxfeed.IterableDataset` (same
    arguments, checked by :class:`jaxfeed.loading.options.LoaderOptions`), and a ``DataLoader`` too
    (``isinstance`` holds; both derive from ``options._BaseLoader``). ``shuffle=True`` adds ``dataset.shuffle(seed=seed, buffer_size=shuffle_buffer)``;
    every new iteration is a new epoch (``set_epoch`` reseeds the shuffle). A stream has no
    length, so there is no ``len()``.

    ``padding=`` pads each batch as on a ``Dataset``. ``bucket_by_length=True`` and ``packing=``
    work on a bounded buffer: the tables read until ``50 x batch_size`` rows are held are
    reordered by length (:func:`jaxfeed.loading.bucketing.bucket_table`) or packed in read order
    (:func:`jaxfeed.loading.packing.pack_table`); the buffer's rows not yet handed out are part of
    ``state_dict()``, so a resumed stream gives the same batches.

    >>> import numpy as np
    >>> from jaxfeed import DataLoader, Dataset, IterableDataset
    >>> ids = IterableDataset.from_dataset(Dataset.from_dict({"x": np.arange(10)}))
    >>> loader = DataLoader(ids, batch_size=4)
    >>> [b["x"].tolist() for b in loader]
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    def __init__(
        self,
        dataset: IterableDataset,
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
        shuffle_buffer: int = 10_000,
        padding: Padding | None = None,
        bucket_by_length: bool = False,
        packing: Packing | None = None,
        **unsupported: Any,
    ) -> None:
        given = sorted(k for k, v in unsupported.items() if v is not None)
        if given:
            raise ValueError(
                f"{', '.join(given)} not supported for streams; transform= takes the whole numpy "
                "batch, and dataset.map(...) runs per-row work while the stream is read"
            )
        if not isinstance(dataset, IterableDataset):
            raise TypeError(f"expected an IterableDataset, got {type(dataset).__name__}")
        self.options = options = LoaderOptions(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            columns=columns,
            transform=transform,
            prefetch=prefetch,
            device=device,
            sharding=sharding,
            num_workers=num_workers,
            worker_mode=worker_mode,
            shuffle_buffer=shuffle_buffer,
            padding=padding,
            bucket_by_length=bucket_by_length,
            packing=packing,
        )
        if options.num_workers:
            raise ValueError(
                "num_workers is not supported for streams: media columns decode in the read-ahead "
                "thread; use dataset.map(..., batched=True) for heavy per-row work"
            )
        self.batch_size = batch_size = options.batch_size
        self.seed = options.seed
        self.drop_last = options.drop_last
        self.transform = transform = options.transform
        self.prefetch = options.prefetch
        self.placement: Placement = sharding if sharding is not None else resolve_placement(device)
        if options.columns is not None:
            dataset = dataset.select_columns(list(options.columns))
        if options.shuffle:
            dataset = dataset.shuffle(seed=self.seed, buffer_size=options.shuffle_buffer)
        self.local = _local_block(self.placement, batch_size)
        if self.local is not None:  # this process loads its block from its own files
            dataset = split_dataset_by_node(dataset, jax.process_index(), jax.process_count())
        self.rows_per_batch = batch_size if self.local is None else self.local
        self.dataset = dataset
        self._variable_options(options)
        self._transform_rng = transform is not None and takes_rng(transform)
        self._epoch = 0
        self._position = 0  # batches of this epoch handed out
        self._snapshot: dict | _After | None = None  # position after the last batch handed out
        # a weak reference: the iterator refers to the loader, and a loader nobody holds must go
        # at once (its read-ahead thread goes on into the next epoch until then)
        self._iterator: weakref.ref[_Iterator] | None = None
        self._reader = _Reader(self)
        self._ahead: _ReadAhead | None = None  # the read-ahead thread, kept across epochs
        self._read_aheads = 0  # read-ahead threads started (debug_info)

    def _variable_options(self, options: LoaderOptions) -> None:
        padding = options.padding  # checked with packing and bucket_by_length by LoaderOptions
        if (
            self.local is not None
            and padding is not None
            and (padding.lengths is None or len(padding.lengths) > 1)
        ):
            raise ValueError(
                "in a multi-process stream each process reads its own rows, so the processes "
                "cannot agree on a padded length batch by batch: use Padding(lengths=(n,)) "
                "(one length) or packing="
            )
        self.padding, self.packing = padding, options.packing
        self.bucket_by_length = options.bucket_by_length
        features = self.dataset.features
        self._declared = tuple(
            c
            for c, f in (features or {}).items()
            if not isinstance(f, dict) and is_ragged_type(f.pa_type)
        )

    # ------------------------------------------------------------------ state
    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch`` (a new shuffle)."""
        self._close()
        if self._ahead is not None and self._ahead.next_epoch != int(epoch):
            self._drop_ahead()  # it read ahead into another epoch
        self._epoch, self._position, self._snapshot = int(epoch), 0, None

    def state_dict(self) -> dict[str, Any]:
        """JSON values: the epoch, batches handed out, and the stream's exact position."""
        return {
            "version": STATE_VERSION,
            "kind": "stream",
            "epoch": self._epoch,
            "batches_consumed": self._position,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "drop_last": self.drop_last,
            **({"bucket_by_length": True} if self.bucket_by_length else {}),
            **({"packing": [self.packing.length, self.packing.long_rows]} if self.packing else {}),
            "stream": None if self._snapshot is None else encode_state(_as_dict(self._snapshot)),
            "source": self.dataset.source_identity(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next iteration continues exactly after the last batch recorded in ``state``."""
        if not isinstance(state, dict) or state.get("kind") != "stream":
            raise ValueError(
                "not a streaming DataLoader state (from StreamingDataLoader.state_dict)"
            )
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported streaming loader state version {state.get('version')}")
        mine = self.state_dict()
        for key in ("batch_size", "seed", "drop_last", "bucket_by_length", "packing"):
            if state.get(key) != mine.get(key):
                raise ValueError(
                    f"the saved loader state does not match this loader: {key} is "
                    f"{state.get(key)!r} in the state but {mine.get(key)!r} here"
                )
        self.dataset.check_source(state.get("source"), "StreamingDataLoader.load_state_dict")
        self._close()
        self._drop_ahead()
        self._epoch, self._position = int(state["epoch"]), int(state["batches_consumed"])
        self._snapshot = None if state["stream"] is None else decode_state(state["stream"])

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._close()
        if self._snapshot is not None and self._snapshot["last"]:  # the epoch was read to its end
            self._epoch, self._position, self._snapshot = self._epoch + 1, 0, None
        iterator = _Iterator(self, _as_dict(self._snapshot), self._epoch, self._position)
        self._iterator = weakref.ref(iterator)
        return iterator

    def _batches(self, tables: Iterator[tuple]) -> Iterator[tuple[Any, _After]]:
        """``(one batch, stream position after it)`` cut from ``tables`` (:meth:`_Reader.tables`);
        the position of the epoch's final batch says ``last`` (one batch is held back to know it).
        A batch is a dict of numpy columns for :meth:`_to_device`, or, for a loader that only
        places its batches on one device, ``(place, start, stop)``: rows of the table that
        ``place`` (:func:`jaxfeed.runtime.devices.row_placer`, made once a table) puts on the device.

        Fixed-shape columns are zero-copy views of the table, and batches are slices of them;
        only a batch spanning two tables is copied.
        """
        size = self.rows_per_batch
        plain = self.padding is None and self.packing is None and self.transform is None
        carry: dict[str, Any] | None = None  # rows short of a batch, decoded
        count = 0
        held: tuple[Any, _After] | None = None
        snap = None
        for table, cols, snap in tables:
            if table is None:
                break
            n = table.num_rows
            pos = 0
            if carry is not None:
                need = size - count
                if n < need:
                    carry, count = _join(carry, _cut(cols, 0, n)), count + n
                    continue
                batch, pos, carry, count = _join(carry, _cut(cols, 0, need)), need, None, 0
                if held is not None:
                    yield held
                held = (batch, _After(snap, table, pos))
            place = row_placer(cols, self.placement) if plain and n - pos >= size else None
            while n - pos >= size:
                batch = (place, pos, pos + size) if place else _cut(cols, pos, pos + size)
                pos += size
                if held is not None:
                    yield held
                held = (batch, _After(snap, table, pos))
            if pos < n:
                carry, count = _cut(cols, pos, n), n - pos
        if carry is not None and not self.drop_last:
            if held is not None:
                yield held
            held = (carry, _After(snap, None, 0))
        if held is not None:
            held[1].last = True
            yield held

    def _to_device(self, batch: Any, epoch: int, step: int) -> dict[str, Any]:
        if type(batch) is tuple:  # rows of a table, placed as they are
            place, start, stop = batch
            return place(start, stop)
        if self.padding is not None:
            batch = _host(pad_batch(batch, self.padding, declared=self._declared))
        if self.packing is not None:
            batch = _fill_packed(batch, self.rows_per_batch, self.packing)
        if self.transform is not None:
            if self._transform_rng:
                rng = np.random.default_rng([self.seed, epoch, step])
                batch = self.transform(batch, rng)
            else:
                batch = self.transform(batch)
            if not isinstance(batch, dict):
                raise TypeError(
                    f"transform must return a dict of columns, got {type(batch).__name__}"
                )
            batch = _host(batch)
        return put_tree(batch, self.placement, batched=True)

    def _close(self) -> None:
        """Close the current iterator (the read-ahead goes on if it ended its epoch)."""
        iterator = self._iterator() if self._iterator is not None else None
        if iterator is not None:
            iterator.close()
        self._iterator = None

    def _read_ahead(self, resume: dict | None, epoch: int) -> _ReadAhead:
        """The read-ahead positioned at ``resume`` in ``epoch``: the one that went on reading
        after the previous epoch when it is at this epoch's start, else a new one."""
        ahead = self._ahead
        if ahead is None or resume is not None or ahead.next_epoch != epoch:
            self._drop_ahead()
            ahead = self._ahead = _ReadAhead(self._reader, resume, epoch)
            self._read_aheads += 1
        return ahead

    def _tables(self, resume: dict | None, epoch: int) -> Iterator:
        """The epoch's tables read in the calling thread (no read-ahead: ``prefetch=0``)."""
        return self._reader.tables(resume, epoch)

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None

    def close(self) -> None:
        """Stop the read-ahead thread."""
        self._close()
        self._drop_ahead()

    # ------------------------------------------------------------------ diagnostics
    def debug_info(self) -> dict[str, Any]:
        """What the loader runs at this moment, read-only, for diagnostics and tests (the keys
        are those of :meth:`DataLoader.debug_info <jaxfeed.DataLoader.debug_info>`; a stream
        has no worker processes), plus ``read_ahead_threads``: how many read-ahead threads this
        loader has started (the same number after an epoch: the thread went on reading).
        ``read_ahead`` counts the decoded tables ready ahead (``read_ahead_bound`` of them at
        most), across epochs.

        >>> from jaxfeed import Dataset
        >>> stream = Dataset.from_dict({"x": list(range(8))}).to_iterable_dataset()
        >>> loader = StreamingDataLoader(stream, batch_size=4)
        >>> _ = list(loader)
        >>> info = loader.debug_info()
        >>> info["backend"], info["worker_pids"], info["read_ahead_threads"]
        ('inline', [], 1)
        """
        ahead = self._ahead
        return {
            "backend": "inline",
            "shared_memory_prefix": None,
            "worker_pids": [],
            "worker_starts": [],
            "read_ahead": 0 if ahead is None else ahead.queue.qsize(),
            "read_ahead_bound": _READ_AHEAD,
            "read_ahead_threads": self._read_aheads,
        }


class _Reader:
    """The reading half of a :class:`StreamingDataLoader` (Parquet decoding, ``map``, shuffle
    buffers, bucketing or packing buffers, media decoding), without a reference to the loader: the
    read-ahead thread holds this, so a loader nobody uses any more is collected (and its thread
    stopped) while that thread reads ahead."""

    def __init__(self, loader: StreamingDataLoader) -> None:
        self.dataset = loader.dataset
        self.batch_size = loader.batch_size
        self.seed = loader.seed
        self.padding, self.packing = loader.padding, loader.packing
        self.bucket_by_length = loader.bucket_by_length
        self.decode_to_jax_dtypes = loader.transform is None

    def tables(
        self, resume: dict | None, epoch: int, lookahead: Lookahead | None = None
    ) -> Iterator[tuple]:
        """``(table, its decoded numpy columns, stream position after it)`` for one epoch, the
        rows left pending by ``resume`` first, then ``(None, None, final position)``.

        This is the reading half (Parquet decoding, ``map``, shuffle buffers, media decoding):
        it runs in the read-ahead thread, one hand-over per table of a few MB.
        """
        # a copy with its own epoch: the read-ahead starts the next epoch while this one (or
        # another loader over the same dataset) may still be read
        ds = copy.copy(self.dataset)
        ds.set_epoch(epoch)
        stream = Stream(ds, resume["stream"] if resume else None, lookahead)
        features: dict[bytes, tuple[Features, bool]] = {}
        read: Iterator[pa.Table] = iter(stream)
        if self.bucket_by_length or self.packing is not None:
            read = self._regrouped(read, epoch)
        for table in itertools.chain(resume["pending"] if resume else [], read):
            if table.num_rows:
                cols = _decode(table, features)
                if self.decode_to_jax_dtypes:  # the jax dtypes now, once per table, not per batch
                    cols = _host(cols)
                yield table, cols, stream.snapshot()
        yield None, None, stream.snapshot()

    def _regrouped(self, tables: Iterator[pa.Table], epoch: int) -> Iterator[pa.Table]:
        """Bucketing or packing on a bounded buffer: tables are held until ``MEGA_BATCHES`` x
        ``batch_size`` rows, then reordered or packed as one table."""
        limit = MEGA_BATCHES * self.batch_size
        held: list[pa.Table] = []
        count = 0
        for table in itertools.chain(tables, [None]):
            if table is not None:
                if not table.num_rows:
                    continue
                held.append(table)
                count += table.num_rows
                if count < limit:
                    continue
            if not held:
                return
            group = pa.concat_tables(held).combine_chunks()
            held, count = [], 0
            if self.packing is not None:
                bins = self.packing.num_bins or 2 * self.batch_size
                yield _keep_bfloat16(group, pack_table(group, self.packing, bins))
            else:
                yield bucket_table(
                    group, self._length_column(group), self.batch_size, self.seed, epoch
                )

    def _length_column(self, table: pa.Table) -> str:
        if self.padding.columns is not None:
            return self.padding.columns[0]
        ragged = [c for c in table.column_names if is_ragged_type(table.schema.field(c).type)]
        if not ragged:
            raise ValueError(
                "bucket_by_length needs a variable-length column (a list of numbers); the stream "
                f"has {table.column_names}"
            )
        return "input_ids" if "input_ids" in ragged else ragged[0]


def _host(cols: dict[str, Any]) -> dict[str, Any]:
    """Columns in the dtypes the jax format gives (e.g. int64 -> int32 without x64)."""
    return {
        k: v
        if type(v) is np.ndarray and v.dtype in _CANONICAL
        else to_host(v, k, int, None, keep_ints=True)
        for k, v in cols.items()
    }


def _fill_packed(batch: dict[str, Any], rows: int, packing: Packing) -> dict[str, Any]:
    """A last packed batch completed with empty packed rows (``segment_ids`` 0): one shape."""
    n = len(batch[SEGMENT_IDS])
    if n >= rows:
        return batch
    out = {}
    for column, value in batch.items():
        value = np.asarray(value)
        fill = 0 if column in (SEGMENT_IDS, POSITIONS) else packing.pad_value(column)
        pad = np.full((rows - n, *value.shape[1:]), fill, dtype=value.dtype)
        out[column] = np.concatenate([value, pad])
    return out


class _After:
    """The stream position after a batch: the stream's state after ``table``, and the rows of
    ``table`` from ``pos`` on still pending. Made into a state dict only when one is asked for
    (slicing the table for every batch cost more than handing the batch over)."""

    __slots__ = ("last", "pos", "snap", "table")

    def __init__(self, snap: dict, table: pa.Table | None, pos: int) -> None:
        self.snap, self.table, self.pos, self.last = snap, table, pos, False

    def __getitem__(self, key: str) -> Any:
        return self.last if key == "last" else self.as_dict()[key]

    def as_dict(self) -> dict:
        rest = None if self.table is None else self.table.slice(self.pos)
        pending = [rest] if rest is not None and rest.num_rows else []
        return {"stream": self.snap, "pending": pending, "last": self.last}


def _keep_bfloat16(source: pa.Table, packed: pa.Table) -> pa.Table:
    """``packed`` with the bfloat16 features of ``source``'s columns (stored as float32, Arrow
    having no bfloat16), so its packed rows decode as bfloat16 too."""
    found = Features.from_arrow_schema(source.schema)
    names = [c for c, f in found.items() if getattr(f, "bfloat16", False)]
    names = [c for c in names if c in packed.column_names]
    if not names:
        return packed
    features = Features.from_arrow_schema(packed.schema)
    for c in names:
        size = packed.schema.field(c).type.list_size
        features[c] = List(Value("bfloat16"), length=size)
    return packed.replace_schema_metadata(features.arrow_schema.metadata)


def _as_dict(position: dict | _After | None) -> dict | None:
    return position.as_dict() if isinstance(position, _After) else position


def _decode(table: pa.Table, features: dict[bytes, tuple[Features, bool]]) -> dict[str, Any]:
    """Every column of ``table`` as numpy (zero-copy views where the feature allows).

    ``features`` caches, per schema, the features and whether the table's types already are their
    storage types (then no conforming :class:`~jaxfeed.Dataset` is built: that cost ~0.4 ms a
    table, as much as cutting and placing 30 batches).
    """
    key = table.schema.metadata.get(b"huggingface", b"") if table.schema.metadata else b""
    key += table.schema.to_string(show_schema_metadata=False).encode()
    if key not in features:
        found = Features.from_arrow_schema(table.schema)
        conforms = list(found) == table.column_names and table.schema.equals(
            found.arrow_schema, check_metadata=False
        )
        features[key] = (found, conforms)
    found, conforms = features[key]
    reader = TableReader(table, found) if conforms else Dataset(table, found)._internal.reader
    return {c: reader.numpy(c, slice(0, table.num_rows)) for c in table.column_names}


def _cut(cols: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    return {k: v[start:stop] for k, v in cols.items()}


def _join(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.shape[1:] == y.shape[1:]:
            out[k] = np.concatenate([x, y])
        else:
            out[k] = list(x) + list(y)
    return out


def _local_block(placement: Placement, rows: int) -> int | None:
    """In multi-process JAX with a sharding over processes: rows of a batch this process loads."""
    if (
        jax.process_count() == 1
        or isinstance(placement, jax.Device)
        or placement.is_fully_addressable
    ):
        return None
    indices = placement.addressable_devices_indices_map((rows,)).values()
    blocks = {(i[0].start or 0, rows if i[0].stop is None else i[0].stop) for i in indices}
    return sum(hi - lo for lo, hi in blocks)


class _ReadAhead:
    """A thread that reads and decodes the stream's tables (a few MB each) into a queue of
    ``_READ_AHEAD``: epoch ``epoch`` from ``resume``, then the next epochs from their start. So a
    new epoch's first tables are read while the previous epoch's last batches are consumed, within
    the same bounds (the queue, and the stream's decode-ahead of Parquet units, whose
    :class:`~jaxfeed.data.iterable.Lookahead` starts the next epoch's first units in its thread pool
    while this epoch's last ones decode): short epochs start neither from an empty read-ahead nor
    with a core idle. ``items()`` gives one epoch's items, up to and including its end marker
    ``(None, None, position)``.
    """

    def __init__(self, reader: _Reader, resume: dict | None, epoch: int) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=_READ_AHEAD)
        self.stop = threading.Event()
        self.next_epoch = epoch  # the epoch whose items come next out of the queue
        self.thread = threading.Thread(
            target=self._run, args=(reader, resume, epoch), name="jaxfeed-stream", daemon=True
        )
        self.thread.start()

    def _run(self, reader: _Reader, resume: dict | None, epoch: int) -> None:
        lookahead = Lookahead()  # Parquet units of the next epoch decode before this one ends
        try:
            while True:
                for item in reader.tables(resume, epoch, lookahead):
                    if not self._put(item):
                        return
                resume, epoch = None, epoch + 1
        except BaseException as err:
            self._put(err)
        finally:
            lookahead.close()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def items(self) -> Iterator[tuple]:
        while True:
            item = self.queue.get()
            if isinstance(item, BaseException):
                raise item
            if item[0] is None:
                self.next_epoch += 1
                yield item
                return
            yield item

    def close(self) -> None:
        self.stop.set()
        if self.thread is not threading.current_thread():
            while not self.queue.empty():
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break
            self.thread.join(timeout=30)


class _Iterator:
    """One epoch. A read-ahead thread (:class:`_ReadAhead`, which goes on into the next epoch)
    reads and decodes the stream's tables; this thread cuts batches and keeps ``prefetch`` of
    them on the device ahead of the consumer (``device_put`` is asynchronous on accelerators).

    Handing over whole tables rather than batches matters: a thread hand-over costs a GIL
    switch, which per 256-row batch cost more than the batch itself.
    """

    def __init__(
        self, loader: StreamingDataLoader, resume: dict | None, epoch: int, step: int
    ) -> None:
        self.loader = loader
        self.epoch = epoch
        self.step = step
        self.done = False
        self.ahead: _ReadAhead | None = None
        if loader.prefetch > 0:
            self.ahead = loader._read_ahead(resume, epoch)
            tables = self.ahead.items()
        else:
            tables = loader._tables(resume, epoch)
        self.batches = loader._batches(tables)
        self.ready: collections.deque = collections.deque()  # (device batch, position)

    def _fill(self) -> None:
        """Put batches on the device until ``prefetch`` wait beyond the one handed out next."""
        while len(self.ready) <= self.loader.prefetch:
            item = next(self.batches, _END)
            if item is _END:
                return
            batch, position = item
            step = self.step + len(self.ready)
            self.ready.append((self.loader._to_device(batch, self.epoch, step), position))

    def __iter__(self) -> _Iterator:
        return self

    def __next__(self) -> dict[str, Any]:
        if self.done:
            raise StopIteration
        try:
            self._fill()
        except BaseException:
            self.done = True
            self.close(failed=True)
            raise
        loader = self.loader
        if not self.ready:
            self.done = True
            self.close()
            if loader._snapshot is None or not loader._snapshot["last"]:  # an empty epoch
                loader._snapshot = {"stream": None, "pending": [], "last": True}
            raise StopIteration
        batch, position = self.ready.popleft()
        self.step += 1
        loader._position += 1
        loader._snapshot = position
        return batch

    def close(self, failed: bool = False) -> None:
        """Stop this epoch; the read-ahead goes on only if it has moved on to the next epoch."""
        self.done = True
        self.ready.clear()
        ahead, self.ahead = self.ahead, None
        if ahead is not None and (failed or ahead.next_epoch <= self.epoch):
            if self.loader._ahead is ahead:
                self.loader._drop_ahead()
            else:
                ahead.close()
