"""`Packing`: several variable-length rows per fixed-length row, with ``segment_ids`` and ``positions``.

``DataLoader(..., packing=Packing(length=512))`` plans each epoch once, in every process alike, from
the rows' stored lengths in the epoch's order (seeded by ``(seed, epoch)``): each row goes into
the fullest of ``num_bins`` open bins of ``length`` slots that still holds it (best fit, which
Grain measured to pad about a quarter less than first fit); when a row fits none, the fullest bin is closed (it
becomes the next packed row) and a new one opened. A row longer than ``length`` is an error naming
it, or (``long_rows="split"``) is cut into pieces of ``length`` (each its own segment, positions
from 0). The plan depends only on the lengths, ``seed`` and epoch, so a run resumed mid-epoch gets
the same packed rows, with any number of workers or processes.

The packed columns (those with the lengths of the first packed column, row by row) are written in
the batch builder; ``segment_ids`` is 0 on padding and 1, 2, ... for the rows of each packed row,
``positions`` counts from 0 in each segment (the Grain and MaxText convention). A last batch short
of ``batch_size`` packed rows is completed with empty ones (``segment_ids`` all 0), so every batch
has one shape.

On a stream (``DataLoader(iterable_dataset, packing=...)``) :func:`pack_table` packs a bounded
buffer: the tables read until ``50 x batch_size`` rows are held, packed in read order.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.ragged import Ragged, arrow_ragged
from jaxfeed.loading.padding import Padding, check_fits, length_groups, variable_columns

SEGMENT_IDS = "segment_ids"
POSITIONS = "positions"


@dataclass(frozen=True)
class Packing:
    """How ``DataLoader`` packs variable-length rows into rows of ``length``.

    Args:
        length: the packed row length.
        long_rows: ``"error"`` (default) for a row longer than ``length``, or ``"split"`` to cut
            it into pieces of ``length`` (each packed as its own segment).
        num_bins: open bins of the best fit (default: 2 x the batch size); more bins, less
            padding, a slower plan (once per epoch: 0.5 s for 100,000 rows and 128 bins). Bins
            are opened as rows need them, so a huge value costs nothing for a few rows.
        pad_values: ``{column: value}``; default 0, -100 for ``labels``, the tokenizer's pad id
            for ``input_ids`` with ``tokenizer=``.
        tokenizer: a ``tokenizers.Tokenizer`` whose pad id pads ``input_ids``.
        columns: the columns to pack (default: every column of the dataset stored as ragged lists
            of numbers); they must have the same length row by row.

    >>> import numpy as np
    >>> from jaxfeed import DataLoader, Dataset
    >>> ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]})
    >>> batch = next(iter(DataLoader(ds, batch_size=2, packing=Packing(length=5))))
    >>> batch["input_ids"].tolist()
    [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    >>> batch["segment_ids"].tolist(), batch["positions"].tolist()
    ([[1, 1, 1, 2, 2], [1, 1, 1, 1, 2]], [[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]])
    """

    length: int
    long_rows: str = "error"
    num_bins: int | None = None
    pad_values: Mapping[str, Any] | None = None
    tokenizer: Any = field(default=None, repr=False, compare=False)
    columns: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length <= 0:
            raise ValueError(f"Packing(length=...) must be a positive int, got {self.length!r}")
        if self.long_rows not in ("error", "split"):
            raise ValueError(
                f"Packing(long_rows=...) must be 'error' or 'split', got {self.long_rows!r}"
            )
        if self.num_bins is not None and (
            isinstance(self.num_bins, bool)
            or not isinstance(self.num_bins, int)
            or self.num_bins < 1
        ):
            raise ValueError(f"Packing(num_bins=...) must be a positive int, got {self.num_bins!r}")
        if self.columns is not None:
            cols = (self.columns,) if isinstance(self.columns, str) else tuple(self.columns)
            if not cols:
                raise ValueError("Packing(columns=[]): name at least one column to pack")
            object.__setattr__(self, "columns", cols)
        # pad values checked (and the tokenizer's pad id found) now, not in a worker
        object.__setattr__(
            self, "_padding", Padding(pad_values=self.pad_values, tokenizer=self.tokenizer)
        )

    def pad_value(self, column: str) -> Any:
        return self._padding.pad_value(column)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PackPlan:
    """An epoch's packing: piece ``p`` is ``size[p]`` values of dataset row ``row[p]`` from
    ``start[p]``, written at ``offset[p]`` of packed row ``packed[p]`` as segment ``segment[p]``;
    ``position[p]`` is the row's position in the epoch's order. Pieces are sorted by packed row."""

    row: np.ndarray
    start: np.ndarray
    size: np.ndarray
    packed: np.ndarray
    offset: np.ndarray
    segment: np.ndarray
    position: np.ndarray
    num_packed: int

    def pieces(self, first: int, stop: int) -> slice:
        """The pieces of packed rows ``first:stop``."""
        lo, hi = np.searchsorted(self.packed, [first, stop])
        return slice(int(lo), int(hi))


def best_fit(lengths: np.ndarray, rows: np.ndarray, packing: Packing, num_bins: int) -> PackPlan:
    """Plan the packing of ``rows`` (dataset rows in epoch order) of ``lengths``.

    >>> p = best_fit(np.array([3, 2, 4, 1]), np.arange(4), Packing(length=5), num_bins=2)
    >>> p.packed.tolist(), p.row.tolist(), p.segment.tolist()
    ([0, 0, 1, 1], [0, 1, 2, 3], [1, 2, 1, 2])
    """
    length = packing.length
    # each piece: its row, start, size, packed row, offset, segment and position in the epoch
    outs: tuple[list[int], ...] = tuple([] for _ in range(7))
    out_row, out_start, out_size, out_packed, out_offset, out_segment, out_position = outs
    # Bins are opened as rows need them, never more than num_bins: memory follows the rows
    # present, not num_bins (10**9 bins for 4 rows is 4 bins). The plan is the one of num_bins
    # empty bins opened at once: an unopened bin (room ``length``, a higher index than every
    # opened one) is chosen only when no opened bin holds the row, and then always holds it.
    room: list[int] = []
    # (room left, bin) sorted: the best fit is one bisection away (no numpy call per row)
    by_room: list[tuple[int, int]] = []
    bins: list[list[tuple[int, int, int, int]]] = []
    closed = 0

    def close(j: int) -> None:
        nonlocal closed
        offset = 0
        for k, (row, start, size, position) in enumerate(bins[j]):
            out_row.append(row)
            out_start.append(start)
            out_size.append(size)
            out_packed.append(closed)
            out_offset.append(offset)
            out_segment.append(k + 1)
            out_position.append(position)
            offset += size
        closed += 1
        bins[j] = []
        set_room(j, length)

    def set_room(j: int, value: int) -> None:
        del by_room[bisect.bisect_left(by_room, (room[j], j))]
        room[j] = value
        bisect.insort(by_room, (value, j))

    for position, (row, size) in enumerate(zip(rows.tolist(), lengths.tolist(), strict=True)):
        start = 0
        if size > length:
            start, closed = _full_pieces(outs, row, size, position, packing, closed)
            size -= start
        if size == 0:
            continue
        k = bisect.bisect_left(by_room, (size, -1))
        if k < len(by_room):
            j = by_room[k][1]  # best fit: the fullest bin that holds the row
        elif len(bins) < num_bins:  # none does: open a new bin
            j = len(bins)
            room.append(length)
            by_room.append((length, j))  # the highest (room, bin) of all: stays sorted
            bins.append([])
        else:
            j = by_room[0][1]  # none does: close the fullest and start again there
            close(j)
        bins[j].append((row, start, size, position))
        set_room(j, room[j] - size)
        if room[j] == 0:
            close(j)
    for j in range(len(bins)):
        if bins[j]:
            close(j)
    return _plan(outs, closed)


def _full_pieces(
    outs: tuple[list[int], ...], row: int, size: int, position: int, packing: Packing, closed: int
) -> tuple[int, int]:
    """Cut a row longer than ``packing.length`` into full pieces, a packed row each, appended to
    ``outs`` at once (refused with ``long_rows="error"``): where the rest starts, and the count
    of packed rows closed so far."""
    length = packing.length
    if packing.long_rows == "error":
        raise ValueError(
            f"row {row} has {size} values, more than Packing(length={length}); use "
            "Packing(long_rows='split') to cut long rows into pieces, or a larger length"
        )
    out_row, out_start, out_size, out_packed, out_offset, out_segment, out_position = outs
    start = 0
    while size - start > length:  # full pieces: a packed row each, at once
        out_row.append(row)
        out_start.append(start)
        out_size.append(length)
        out_packed.append(closed)
        out_offset.append(0)
        out_segment.append(1)
        out_position.append(position)
        closed += 1
        start += length
    return start, closed


def _plan(outs: tuple[list[int], ...], closed: int) -> PackPlan:
    """The plan of the pieces in ``outs``, ordered by packed row (stable)."""
    row, start, size, packed, offset, segment, position = (
        np.asarray(values, dtype=np.int64) for values in outs
    )
    order = np.argsort(packed, kind="stable")
    return PackPlan(
        row=row[order],
        start=start[order],
        size=size[order],
        packed=packed[order],
        offset=offset[order],
        segment=segment[order],
        position=position[order],
        num_packed=closed,
    )


@dataclass
class PackLayout:
    """One batch's share of a plan: ``count`` packed rows; piece ``p`` comes from ``source[p]``
    (an index into the job's gathered rows)."""

    count: int
    packed: np.ndarray  # packed row within the batch
    offset: np.ndarray
    source: np.ndarray
    start: np.ndarray
    size: np.ndarray
    segment: np.ndarray


def batch_layout(
    plan: PackPlan, first: int, count: int
) -> tuple[np.ndarray, np.ndarray, PackLayout]:
    """``(dataset rows to gather, their epoch positions, layout)`` of packed rows
    ``first:first + count`` (rows past the plan's end stay empty)."""
    s = plan.pieces(first, first + count)
    piece_rows = plan.row[s]
    _, first_index, inverse = np.unique(piece_rows, return_index=True, return_inverse=True)
    order = np.argsort(first_index)  # gather rows in the order the plan first uses them
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    rows = piece_rows[first_index[order]]
    positions = plan.position[s][first_index[order]]
    source = rank[inverse.reshape(-1)]
    layout = PackLayout(
        count=count,
        packed=plan.packed[s] - first,
        offset=plan.offset[s],
        source=source,
        start=plan.start[s],
        size=plan.size[s],
        segment=plan.segment[s],
    )
    return rows, positions, layout


def pack_batch(
    batch: Mapping[str, Any],
    packing: Packing,
    layout: PackLayout,
    rows: Any = None,
    declared: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """The packed batch: the packed columns ``(count, length, ...)``, ``segment_ids`` and
    ``positions`` (int32, ``(count, length)``)."""
    names = (
        list(packing.columns) if packing.columns is not None else variable_columns(batch, declared)
    )
    missing = [c for c in names if c not in batch]
    if missing:
        raise ValueError(f"Packing(columns=...) names {missing}, which the batch does not have")
    others = [c for c in batch if c not in names]
    if others or not names:
        raise ValueError(
            f"packing puts several rows into one, so every column must be a variable-length "
            f"column packed with the others; {others or sorted(batch)} cannot be packed: leave "
            "them out with DataLoader(columns=[...]) (e.g. columns=['input_ids', 'labels'])"
        )
    ragged = {c: Ragged.from_value(batch[c], c, rows) for c in names}
    groups = length_groups(ragged, rows)
    if len(groups) > 1:
        first = groups[0][0][0]
        other = groups[1][0][0]
        i = int(np.argmax(groups[0][1] != groups[1][1]))
        raise ValueError(
            f"row {int(rows[i]) if rows is not None else i}: packed columns must have the same "
            f"lengths row by row, but {first!r} has {int(groups[0][1][i])} values and {other!r} "
            f"{int(groups[1][1][i])}"
        )
    lengths = groups[0][1]
    need = layout.start + layout.size
    short = need > lengths[layout.source]
    if short.any():
        p = int(np.argmax(short))
        row = layout.source[p] if rows is None else int(rows[layout.source[p]])
        raise ValueError(
            f"row {row} has {int(lengths[layout.source[p]])} values when built but was planned "
            "from its stored length: packing needs row_transform to keep row lengths"
        )
    length = packing.length
    total = int(layout.size.sum())
    piece = np.repeat(np.arange(len(layout.size)), layout.size)
    within = np.arange(total) - np.repeat(np.cumsum(layout.size) - layout.size, layout.size)
    dest_row = layout.packed[piece]
    dest_col = layout.offset[piece] + within
    out: dict[str, np.ndarray] = {}
    for column, r in ragged.items():
        fill = check_fits(packing.pad_value(column), r.dtype, column)
        values = np.full((layout.count, length, *r.row_shape), fill, dtype=r.dtype)
        src = r.offsets[layout.source][piece] + layout.start[piece] + within
        values[dest_row, dest_col] = r.values[src]
        out[column] = values
    segment_ids = np.zeros((layout.count, length), dtype=np.int32)
    positions = np.zeros((layout.count, length), dtype=np.int32)
    segment_ids[dest_row, dest_col] = layout.segment[piece]
    positions[dest_row, dest_col] = within
    out[SEGMENT_IDS] = segment_ids
    out[POSITIONS] = positions
    return out


@dataclass(frozen=True)
class PackStep:
    """The loader's collation step: :func:`pack_batch` with the job's layout (runs in the workers)."""

    packing: Packing
    declared: tuple[str, ...] = ()

    def __call__(self, batch: dict[str, Any], job: Any) -> dict[str, Any]:
        return pack_batch(batch, self.packing, job.layout, job.rows, self.declared)


def pack_table(table: pa.Table, packing: Packing, num_bins: int) -> pa.Table:
    """A stream's buffered rows packed: one row per packed row, the packed columns as fixed-size
    lists of ``length`` values, with ``segment_ids`` and ``positions`` (best fit in read order).

    >>> t = pa.table({"input_ids": [[1, 2, 3], [4, 5], [6]]})
    >>> pack_table(t, Packing(length=4), num_bins=2).to_pydict()["segment_ids"]
    [[1, 1, 1, 2], [1, 1, 0, 0]]
    """
    names = list(packing.columns) if packing.columns is not None else table.column_names
    ragged = {}
    for column in table.column_names:
        value = arrow_ragged(table.column(column)) if column in names else None
        if value is None:
            raise ValueError(
                f"packing puts several rows into one, so every column must be a variable-length "
                f"list of numbers packed with the others; {column!r} cannot be packed: leave it "
                "out (IterableDataset.select_columns or DataLoader(columns=[...]))"
            )
        ragged[column] = value
    first = "input_ids" if "input_ids" in ragged else names[0]
    lengths = ragged[first].lengths
    plan = best_fit(lengths, np.arange(len(lengths)), packing, num_bins)
    rows, _, layout = batch_layout(plan, 0, plan.num_packed)
    layout.source = rows[layout.source]  # index the table's rows directly
    packed = pack_batch(ragged, packing, layout)
    return pa.table({c: _fixed_lists(v) for c, v in packed.items()})


def _fixed_lists(values: np.ndarray) -> pa.Array:
    """An ``(n, d1, d2, ...)`` array as nested fixed-size Arrow lists (zero-copy numpy views)."""
    array = pa.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        array = pa.FixedSizeListArray.from_arrays(array, size)
    return array
