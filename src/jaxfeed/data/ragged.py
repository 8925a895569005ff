"""Ragged columns: the rows of a variable-length column as one flat array plus offsets.

A ``List(Value(...))`` column gathered from Arrow is already a flat values buffer and an offsets
buffer; keeping it that way lets padding (:mod:`jaxfeed.loading.padding`) and packing
(:mod:`jaxfeed.loading.packing`) scatter every token of a batch in one vectorised numpy call instead of
one Python step per row. Row ``i`` is ``values[offsets[i]:offsets[i + 1]]``; rows may have
trailing dimensions (``values`` of shape ``(total, d)``: audio frames).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Ragged:
    """Rows of different lengths: ``values`` (rows concatenated on axis 0) and ``offsets`` (n + 1).

    >>> import numpy as np
    >>> r = Ragged.from_rows([np.array([1, 2]), np.array([3, 4, 5])])
    >>> r.lengths.tolist(), r[1].tolist(), len(r)
    ([2, 3], [3, 4, 5], 2)
    """

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The trailing dimensions of every row (``()`` for token ids)."""
        return tuple(self.values.shape[1:])

    @staticmethod
    def from_rows(rows: Sequence[Any], column: str = "", row_ids: Any = None) -> Ragged:
        """Rows given one by one (arrays or lists of numbers); trailing dimensions must agree."""
        arrays = []
        for i, r in enumerate(rows):
            try:
                arrays.append(np.asarray(r))
            except ValueError:  # numpy: "an inhomogeneous shape" (lists of different lengths)
                row = i if row_ids is None else int(row_ids[i])
                inner = [len(x) if hasattr(x, "__len__") else None for x in list(r)[:8]]
                raise ValueError(
                    f"column {column!r}, row {row}: a list of lists of different lengths "
                    f"({inner}{'...' if len(r) > 8 else ''}), a nested ragged column: rows are "
                    "padded on their first axis only, so the inner lists of a row must have one "
                    "length; pad or cut them with map first, or leave the column out "
                    "(DataLoader(columns=[...]))"
                ) from None
        for i, a in enumerate(arrays):
            if a.ndim == 0 or a.dtype.hasobject or a.dtype.kind in "USV":
                row = i if row_ids is None else int(row_ids[i])
                raise ValueError(
                    f"column {column!r}, row {row}: expected a list of numbers (a variable-length "
                    f"row), got {rows[i]!r:.80}"
                )
        if arrays and len({a.shape[1:] for a in arrays}) > 1:
            first = arrays[0].shape[1:]
            i = next(i for i, a in enumerate(arrays) if a.shape[1:] != first)
            row = i if row_ids is None else int(row_ids[i])
            raise ValueError(
                f"column {column!r}, row {row}: rows are padded on their first axis only; its "
                f"other dimensions {arrays[i].shape[1:]} differ from {first} of the batch's first row"
            )
        lengths = np.array([len(a) for a in arrays], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        if arrays:
            dtype = np.result_type(*arrays)
            values = np.concatenate([a.astype(dtype, copy=False) for a in arrays])
        else:
            values = np.zeros(0, dtype=np.int64)
        return Ragged(values, offsets)

    @staticmethod
    def from_value(value: Any, column: str = "", row_ids: Any = None) -> Ragged:
        """A batch column as rows: a ``Ragged``, a stacked array (rows of one length), or a list."""
        if isinstance(value, Ragged):
            return value
        if isinstance(value, np.ndarray) and not value.dtype.hasobject:
            if value.ndim < 2:
                raise ValueError(
                    f"column {column!r} holds one number per row, not a variable-length row"
                )
            n, length = value.shape[0], value.shape[1]
            return Ragged(
                value.reshape(n * length, *value.shape[2:]),
                np.arange(n + 1, dtype=np.int64) * length,
            )
        return Ragged.from_rows(list(value), column, row_ids)


def arrow_ragged(array: pa.Array) -> Ragged | None:
    """A list array of numbers (or of fixed-size rows of numbers) as a :class:`Ragged`, without
    per-row work; None when it holds anything else (nulls, strings, nested ragged lists)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if not pa.types.is_list(array.type) and not pa.types.is_large_list(array.type):
        return None
    if array.null_count:
        return None
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.flatten()
    offsets = offsets - offsets[0]
    trailing: list[int] = []
    while pa.types.is_fixed_size_list(values.type) or pa.types.is_list(values.type):
        if values.null_count:
            return None
        if pa.types.is_fixed_size_list(values.type):
            width = values.type.list_size
        else:
            lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                return None  # rows of rows of different widths: not a padded tensor
            width = int(lengths[0]) if len(lengths) else 0
        trailing.append(width)
        values = values.flatten()
    if not (
        pa.types.is_integer(values.type)
        or pa.types.is_floating(values.type)
        or pa.types.is_boolean(values.type)
    ):
        return None
    if values.null_count:
        return None
    flat = values.to_numpy(zero_copy_only=False)
    if trailing:
        flat = flat.reshape(-1, *trailing)
    return Ragged(flat, offsets)


def arrow_lengths(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row lengths of a list column (0 for nulls), as int64, without per-row work."""
    lengths = pc.list_value_length(array)
    return np.asarray(pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def is_ragged_type(pa_type: pa.DataType) -> bool:
    """Whether a column of this Arrow type holds variable-length rows of numbers (a list, maybe of
    fixed-size or nested lists, of ints, floats or bools).

    >>> is_ragged_type(pa.list_(pa.int32())), is_ragged_type(pa.list_(pa.int32(), 4))
    (True, False)
    """
    if not (pa.types.is_list(pa_type) or pa.types.is_large_list(pa_type)):
        return False
    inner = pa_type.value_type
    while (
        pa.types.is_list(inner)
        or pa.types.is_large_list(inner)
        or pa.types.is_fixed_size_list(inner)
    ):
        inner = inner.value_type
    return pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_boolean(inner)
