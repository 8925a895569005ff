"""Building one batch: a :class:`Job` (rows to read) and a :class:`Recipe` (features and the
user's functions) become numpy columns, with the same code in every worker mode (see
:mod:`jaxfeed.loading.workers`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxfeed._base.calls import seeded_rng, takes_rng
from jaxfeed.data.features import DecodeError
from jaxfeed.data.features._nested import stack_if_same
from jaxfeed.data.features.media import MediaFeature


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
                out[key] = _stackable(values) or stack_if_same(values)
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
        keys = _transform_rows(recipe, job, columns, sink, progress)
        plan = sink.columns(keys or [])
    if progress is not None:
        progress.value = -1
    if recipe.collate is not None:
        plan = recipe.collate(_materialize(plan), job)
    if recipe.transform is not None:
        plan = _transform_batch(recipe, job, plan)
    return plan


def _transform_rows(
    recipe: Recipe, job: Job, columns: dict[str, Any], sink: _Rows, progress: Any
) -> list[str] | None:
    """Decode each row of ``job``, apply the ``row_transform`` and add the result to ``sink``:
    the keys every row returned (None: no rows)."""
    rows = job.rows
    fn = recipe.row_transform
    keys = None
    for i in range(len(rows)):
        row_id = int(rows[i])
        if progress is not None:
            progress.value = row_id
        row = {
            key: _decode(recipe, key, value[i], row_id, i) if key in recipe.media else value[i]
            for key, value in columns.items()
        }
        try:
            if recipe.row_rng:
                result = fn(row, seeded_rng(recipe.seed, job.epoch, job.positions[i]))
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
    return keys


def _transform_batch(recipe: Recipe, job: Job, plan: dict[str, Any]) -> dict[str, Any]:
    """The batch ``transform`` applied to the materialized batch, checked."""
    batch = _materialize(plan)
    try:
        if recipe.transform_rng:
            batch = recipe.transform(batch, seeded_rng(recipe.seed, job.epoch, job.step))
        else:
            batch = recipe.transform(batch)
    except Exception as err:
        raise _note(err, f"raised by transform on batch {job.step} of epoch {job.epoch}") from None
    if not isinstance(batch, dict):
        raise TypeError(f"transform must return a dict of columns, got {type(batch).__name__}")
    return batch


def build(recipe: Recipe, job: Job) -> dict[str, Any]:
    """The numpy batch of ``job`` (inline and thread modes)."""
    return _materialize(build_plan(recipe, job))
