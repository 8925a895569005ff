"""``map(..., num_proc=N)`` and ``filter(..., num_proc=N)``: contiguous shards in spawned processes.

The rows are cut into ``N`` contiguous shards at multiples of the batch size (1,000 rows for
per-row functions), so every call of the user's function sees exactly the rows it would see with
``num_proc=1``; ``with_indices`` get their global positions. Each shard runs the ordinary
single-process ``map``/``filter`` in a process started with ``spawn`` (never ``fork``: the parent
may run JAX). The function and its arguments travel by value with cloudpickle, so functions
defined in a script's ``__main__`` or in a notebook work; the shard's rows travel as Arrow data.

``map`` shards of a dataset backed by files (``load_dataset``, ``load_from_disk``) are written by
the workers to Arrow files in the dataset's folder and memory-mapped by the parent; in-memory
datasets get their shards back through the pipe. ``filter`` workers send back row positions only:
the result is an index mapping, as with ``num_proc=1``. Output features are those of the first
shard (as ``num_proc=1`` decides them on the first batch); other shards are cast to them.
"""

from __future__ import annotations

import signal
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from jaxfeed._base.spawn import Spawned
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features


class ParallelWorkerError(RuntimeError):
    """A ``num_proc`` worker died, or raised an exception that cannot be sent back as is.

    A worker that died gives `datasets`' message; its cause names the worker, its pid and the
    signal or exit code.
    """


def abrupt_death_message(what: str) -> str:
    """`datasets`' words for a ``num_proc`` worker that died (code may compare them)."""
    return (
        f"One of the subprocesses has abruptly died during {what} operation."
        "To debug the error, disable multiprocessing."
    )


def check_num_proc(num_proc: Any) -> int:
    if num_proc is None:
        return 1
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be a positive int or None, got {num_proc!r}")
    return num_proc


def shard_bounds(num_rows: int, num_proc: int, unit: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` row ranges, cut at multiples of ``unit``, at most ``num_proc``.

    >>> shard_bounds(10, 3, 2)
    [(0, 4), (4, 8), (8, 10)]
    """
    blocks = -(-num_rows // unit)
    per, extra = divmod(blocks, num_proc)
    bounds, start = [], 0
    for i in range(num_proc):
        count = per + (i < extra)
        if count:
            stop = min(num_rows, start + count * unit)
            bounds.append((start, stop))
            start = stop
    return bounds


def _unit(kwargs: dict[str, Any]) -> int:
    size = kwargs.get("batch_size")
    if kwargs.get("batched") and size is not None and size > 0:
        return int(size)
    if kwargs.get("batched"):  # batch_size=None: one batch of everything, one process
        return 1 << 62
    return 1  # rows one by one: num_proc shards of any size, one cache file each (as datasets)


def _shifted(function: Callable, offset: int, batched: bool) -> Callable:
    def shifted(*args: Any, **kwargs: Any) -> Any:
        *head, indices = args
        moved = [i + offset for i in indices] if batched else indices + offset
        return function(*head, moved, **kwargs)

    return shifted


def _ranked(function: Callable, rank: int) -> Callable:
    def ranked(*args: Any, **kwargs: Any) -> Any:
        return function(*args, rank, **kwargs)

    return ranked


# ---------------------------------------------------------------------------------- the worker
def _work(payload: bytes) -> tuple:
    """Run one shard (in the worker). Returns ``("ok", result)`` or ``("error", ...)``.

    ``kwargs["run"]`` is the function that maps or filters one dataset (``jaxfeed.data.ops.map`` /
    ``filter``, which call this module: passed in, so this module needs nothing above it)."""
    kind, table, features, fmt, offset, kwargs, out_file = cloudpickle.loads(payload)
    run = kwargs.pop("run")
    shard = DatasetCore(table, Features.from_dict(features))
    if fmt["_format_type"] is not None or fmt["_format_columns"] is not None:
        shard.set_format(
            fmt["_format_type"],
            fmt["_format_columns"],
            fmt["_output_all_columns"],
            **{k: v for k, v in fmt["_format_kwargs"].items() if v is not None},
        )
    function = kwargs.pop("function")
    returned = [False]

    def tracked(*args: Any, **kw: Any) -> Any:
        result = function(*args, **kw)
        if result is not None:
            returned[0] = True
        return result

    call = tracked if kind == "map" else function
    rank = kwargs.pop("rank")
    if kwargs.pop("with_rank", False):  # this shard's rank goes last, as `datasets` passes it
        call = _ranked(call, rank)
    if kwargs.get("with_indices") and offset:
        call = _shifted(call, offset, bool(kwargs.get("batched")))
    if kind == "filter":
        out = run(shard, call, **kwargs)
        return ("ok", np.asarray(out._internal.indices, dtype=np.int64))
    if out_file is not None:
        kwargs["cache_file_name"] = out_file
    out = run(shard, call, **kwargs)
    if not returned[0]:
        return ("ok", None)
    if out_file is not None and Path(out_file).is_file():
        return ("ok", ("file", out_file, out.features.to_dict()))
    return ("ok", ("table", out.data, out.features.to_dict()))


def _worker_main(conn: Any, payload: bytes) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
    try:
        result = _work(payload)
    except BaseException as err:  # sent back to the parent, which raises it
        text = traceback.format_exc()
        try:
            pickled = cloudpickle.dumps(err)
        except Exception:
            pickled = None
        result = ("error", pickled, text)
    try:
        conn.send_bytes(cloudpickle.dumps(result))
    finally:
        conn.close()


# ---------------------------------------------------------------------------------- the parent
def _run_shards(payloads: list[bytes], what: str) -> list[Any]:
    # Always spawned, even before anything initialised a JAX backend (where `datasets`'s fork
    # would be safe from JAX's threads): the parent already runs Arrow's and other libraries'
    # threads, which fork does not copy (Python 3.12 warns about forking such a process, 3.14 no
    # longer forks by default); whether a script then needed its main guard would depend on
    # whether some earlier line touched a device; and telling needs JAX's private state. A script
    # without the guard gets a MainGuardError within seconds instead (Spawned, tested).
    started: list[Spawned] = []
    try:
        for i, payload in enumerate(payloads):
            started.append(Spawned(_worker_main, (), f"jaxfeed-{what}-{i}", payload))
        results = []
        for i, worker in enumerate(started):
            try:
                data = worker.conn.recv_bytes()
            except (EOFError, OSError):
                data = None
            if data is None:  # raised outside the except: one traceback, not two
                worker.process.join(10)
                died = worker.failure(
                    f"{what} worker {i}", "before sending its result", ParallelWorkerError,
                    f"Dataset.{what}(num_proc=...)", "num_proc=None",
                )  # fmt: skip
                if not isinstance(died, ParallelWorkerError):
                    raise died  # a missing main guard: its own message
                raise ParallelWorkerError(abrupt_death_message(what)) from died
            worker.process.join()
            results.append(cloudpickle.loads(data))
    finally:
        for worker in started:
            worker.stop()
    for i, result in enumerate(results):
        if result[0] == "error":
            _, pickled, text = result
            cause = ParallelWorkerError(f"{what} worker {i} failed:\n{text}")
            if pickled is not None:
                try:
                    err = cloudpickle.loads(pickled)
                except Exception:
                    err = None
                if isinstance(err, BaseException):
                    raise err from cause
            raise cause
    return [r[1] for r in results]


def _payloads(
    ds: DatasetCore, kind: str, bounds: list[tuple[int, int]], kwargs: dict, out_files: list | None
) -> list[bytes]:
    features = ds.features.to_dict()
    fmt = ds._internal.format_state()
    out = []
    for i, (start, stop) in enumerate(bounds):
        table = ds._internal.arrow(slice(start, stop))
        item = (
            kind,
            table,
            features,
            fmt,
            start,
            dict(kwargs, rank=i),
            out_files[i] if out_files else None,
        )
        out.append(cloudpickle.dumps(item))
    return out


def parallel_filter(ds: DatasetCore, num_proc: int, kwargs: dict[str, Any]) -> DatasetCore:
    """``filter`` over ``num_proc`` processes (same result as one process)."""
    bounds = shard_bounds(ds.num_rows, num_proc, _unit(kwargs))
    kept = _run_shards(_payloads(ds, "filter", bounds, kwargs, None), "filter")
    positions = np.concatenate(
        [k + start for k, (start, _) in zip(kept, bounds, strict=True)] or [np.zeros(0, np.int64)]
    )
    inner = ds._internal
    return inner.derive(ds.data, indices=inner.table_rows(positions.astype(np.int64)))


def parallel_map(ds: DatasetCore, num_proc: int, kwargs: dict[str, Any]) -> DatasetCore | None:
    """``map`` over ``num_proc`` processes; None when the function returned nothing (the caller
    then answers as ``num_proc=1`` does)."""
    bounds = shard_bounds(ds.num_rows, num_proc, _unit(kwargs))
    out_files = _output_files(ds, kwargs, len(bounds))
    results = _run_shards(_payloads(ds, "map", bounds, kwargs, out_files), "map")
    if all(r is None for r in results):
        return None
    if any(r is None for r in results):
        raise ValueError("map: some shards returned None for every row and others returned values")
    features = Features.from_dict(results[0][2])
    tables, names = [], set()
    for i, (how, value, shard_features) in enumerate(results):
        if how == "file":
            table = pa.ipc.open_stream(pa.memory_map(value)).read_all()
            names.add(Path(value).name)
        else:
            table = value
        if Features.from_dict(shard_features) != features:
            try:
                table = DatasetCore(table, features).data  # each column converted, checked
            except (ValueError, TypeError, pa.ArrowException) as err:
                raise ValueError(
                    f"map: shard {i} of num_proc={num_proc} produced features {shard_features} "
                    f"that do not convert to the first shard's {results[0][2]}: {err}"
                ) from err
        tables.append(table.replace_schema_metadata(features.arrow_schema.metadata))
    table = pa.concat_tables(tables)
    out = ds._internal.derive(table, features=features, indices=None, source_files=names or None)
    if names:  # the shards' files, also when ``ds`` lives in memory (as `datasets` lists them)
        out._internal.set_cache(Path(next(iter(out_files))).parent, sorted(names))
    return out


def _output_files(ds: DatasetCore, kwargs: dict[str, Any], shards: int) -> list[str] | None:
    """Where each shard's ``map`` output goes: next to a file-backed dataset, else nowhere."""
    if kwargs.get("keep_in_memory"):
        return None
    name = kwargs.pop("cache_file_name", None)
    if name is not None:
        path = Path(name)
        stem, suffix = path.stem, path.suffix or ".arrow"
        return [
            str(path.with_name(f"{stem}_{i:05d}_of_{shards:05d}{suffix}")) for i in range(shards)
        ]
    folder = ds._internal.cache_dir
    if folder is None:
        return None
    tag = uuid.uuid4().hex[:16]
    return [
        str(Path(folder) / f"cache-map-{tag}_{i:05d}_of_{shards:05d}.arrow") for i in range(shards)
    ]
