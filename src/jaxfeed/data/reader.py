"""Arrow -> numpy: read rows of a table as numpy arrays, without per-row Python work.

Fixed-shape numeric columns (numbers, class labels, ``ArrayND``, fixed-length ``Sequence``) are
exposed as zero-copy numpy views over each Arrow chunk. A contiguous read is a slice of that view;
a random read is one vectorised gather (``np.take``), optionally into a caller's buffer. Other
columns (ragged lists, strings, structs, media) are sliced or gathered with Arrow's ``take`` and
decoded by their feature, a whole column at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.features import DecodeError, Features
from jaxfeed.data.features.struct import decode_numpy, decode_python

Rows = slice | np.ndarray


class ChunkedView:
    """Numpy views of every chunk of one fixed-shape column, addressed by global row."""

    def __init__(self, chunks: Sequence[np.ndarray]) -> None:
        self.chunks = list(chunks)
        sizes = np.array([len(c) for c in self.chunks], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)])
        self.single = self.chunks[0] if len(self.chunks) == 1 else None
        first = self.chunks[0]
        self.row_shape: tuple[int, ...] = first.shape[1:]
        self.dtype: np.dtype = first.dtype

    def __len__(self) -> int:
        return int(self.starts[-1])

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop``; a view when they lie in one chunk."""
        if self.single is not None:
            return self.single[start:stop]
        first = int(np.searchsorted(self.starts, start, side="right") - 1)
        last = int(np.searchsorted(self.starts, max(stop - 1, start), side="right") - 1)
        if first == last or stop <= start:
            base = self.starts[first]
            return self.chunks[first][start - base : stop - base]
        parts = []
        for c in range(first, last + 1):
            lo = max(start, self.starts[c]) - self.starts[c]
            hi = min(stop, self.starts[c + 1]) - self.starts[c]
            parts.append(self.chunks[c][lo:hi])
        return np.concatenate(parts)

    def take(self, indices: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Rows at ``indices`` (already bounds-checked and non-negative), gathered in bulk."""
        if self.single is not None:  # the method: numpy's np.take wrapper costs ~20 us a call
            return self.single.take(indices, axis=0, out=out)
        if out is None:
            out = np.empty((len(indices), *self.row_shape), dtype=self.dtype)
        chunk_ids = np.searchsorted(self.starts, indices, side="right") - 1
        for c in np.unique(chunk_ids):
            where = np.nonzero(chunk_ids == c)[0]
            out[where] = self.chunks[c][indices[where] - self.starts[c]]
        return out


class TableReader:
    """Reads rows of an Arrow table as numpy (fast path) or Python values, column by column."""

    def __init__(self, table: pa.Table, features: Features) -> None:
        self.table = table
        self.features = features
        self._views: dict[str, ChunkedView | None] = {}

    def __len__(self) -> int:
        return self.table.num_rows

    def view(self, column: str) -> ChunkedView | None:
        """Zero-copy numpy views of a fixed-shape numeric column, or None for other columns."""
        if column not in self._views:
            self._views[column] = self._build_view(column)
        return self._views[column]

    def _build_view(self, column: str) -> ChunkedView | None:
        feature = self.features[column]
        if isinstance(feature, dict):
            return None
        chunks = self.table.column(column).chunks
        if not chunks:
            return None
        views = []
        for chunk in chunks:
            v = feature.numpy_view(chunk)
            if v is None:
                return None
            views.append(v)
        views = [v for v in views if len(v)] or views[:1]
        if len({(v.shape[1:], v.dtype) for v in views}) > 1:
            return None  # e.g. ragged lists uniform within each chunk but not across chunks
        return ChunkedView(views)

    def arrow_column(self, column: str, rows: Rows) -> pa.Array:
        col = self.table.column(column)
        if isinstance(rows, slice):
            part = col.slice(rows.start, rows.stop - rows.start)
        else:
            part = col.take(pa.array(rows, type=pa.int64()))
        return part.combine_chunks() if part.num_chunks != 1 else part.chunk(0)

    def numpy(self, column: str, rows: Rows, out: np.ndarray | None = None) -> np.ndarray | list:
        """Decoded values of ``column`` at ``rows``: an ndarray when shapes agree, else a list."""
        view = self.view(column)
        if view is not None:
            if isinstance(rows, slice):
                block = view.slice(rows.start, rows.stop)
                if out is not None:
                    out[...] = block
                    return out
                return block
            return view.take(rows, out=out)
        try:
            return decode_numpy(self.features[column], self.arrow_column(column, rows))
        except DecodeError as err:
            raise err.at(column, _global_row(rows, err.row)) from err.__cause__

    def python(self, column: str, rows: Rows) -> list:
        try:
            return decode_python(self.features[column], self.arrow_column(column, rows))
        except DecodeError as err:
            raise err.at(column, _global_row(rows, err.row)) from err.__cause__

    def arrow(self, rows: Rows, columns: Sequence[str] | None = None) -> pa.Table:
        table = self.table if columns is None else self.table.select(list(columns))
        if isinstance(rows, slice):
            return table.slice(rows.start, rows.stop - rows.start)
        return table.take(pa.array(rows, type=pa.int64()))


def _global_row(rows: Rows, position: int | None) -> int | None:
    if position is None:
        return None
    return rows.start + position if isinstance(rows, slice) else int(rows[position])


def normalize_rows(key: Any, num_rows: int) -> tuple[Rows, bool]:
    """Turn an index key into ``(rows, is_single_row)``.

    ``rows`` is a ``slice(start, stop)`` with step 1, or an int64 array of non-negative indices.
    Raises ``IndexError`` for out-of-range indices and ``TypeError`` for unsupported keys.
    """
    if isinstance(key, bool | np.bool_):
        raise TypeError(f"cannot index a dataset with a bool ({key!r})")
    if isinstance(key, int | np.integer):
        i = int(key)
        if not -num_rows <= i < num_rows:
            raise IndexError(f"row {i} is out of range for a dataset of {num_rows} rows")
        i = i + num_rows if i < 0 else i
        return slice(i, i + 1), True
    if isinstance(key, slice):
        start, stop, step = key.indices(num_rows)
        if step == 1:
            return slice(start, max(start, stop)), False
        return np.arange(start, stop, step, dtype=np.int64), False
    if isinstance(key, range):
        key = np.arange(key.start, key.stop, key.step, dtype=np.int64)
    if isinstance(key, pa.Array | pa.ChunkedArray):
        key = key.to_numpy(zero_copy_only=False)
    if isinstance(key, np.ndarray | list | tuple):
        idx = np.asarray(key)
        if idx.size == 0:
            return np.zeros(0, dtype=np.int64), False
        if idx.dtype == bool:
            if idx.shape != (num_rows,):
                raise IndexError(
                    f"boolean mask of shape {idx.shape} does not match {num_rows} rows"
                )
            return np.nonzero(idx)[0].astype(np.int64), False
        if idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise TypeError(
                f"row indices must be a 1-d sequence of ints, got dtype {idx.dtype} with shape {idx.shape}"
            )
        idx = idx.astype(np.int64, copy=False)
        bad = (idx < -num_rows) | (idx >= num_rows)
        if bad.any():
            raise IndexError(
                f"row {int(idx[np.argmax(bad)])} is out of range for a dataset of {num_rows} rows"
            )
        if (idx < 0).any():
            idx = np.where(idx < 0, idx + num_rows, idx)
        return idx, False
    raise TypeError(
        f"cannot index a dataset with {type(key).__name__}; use an int, a slice, a list or array of "
        "ints, or a column name"
    )
