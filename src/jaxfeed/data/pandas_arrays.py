"""A pandas column of n-d arrays (``ArrayND`` cells), as `datasets`' pandas format gives it.

``series.to_numpy()`` is the stacked ``(rows, *shape)`` array and each cell an ndarray of the
row's shape; rows of different shapes (a ``None`` first dimension) or missing rows keep one
object per row. Imported only by the pandas format (pandas is an optional dependency).

>>> import numpy as np
>>> from jaxfeed.data.pandas_arrays import ArrayColumn
>>> series = ArrayColumn.series(np.zeros((3, 2, 2), np.float32))
>>> series.to_numpy().shape, series[0].shape, str(series.dtype)
((3, 2, 2), (2, 2), 'array[float32]')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray, ExtensionDtype


class ArrayDtype(ExtensionDtype):
    """The dtype of an :class:`ArrayColumn`: ``array[<value dtype>]``."""

    _metadata = ("value_type",)

    def __init__(self, value_type: Any = np.float64) -> None:
        self.value_type = np.dtype(value_type)

    @property
    def type(self) -> type:
        return np.ndarray

    @property
    def kind(self) -> str:
        return "O"

    @property
    def name(self) -> str:
        return f"array[{self.value_type}]"

    @classmethod
    def construct_array_type(cls) -> type[ArrayColumn]:
        return ArrayColumn


class ArrayColumn(ExtensionArray):
    """Rows of n-d arrays: a ``(rows, *shape)`` ndarray, or an object array of per-row arrays."""

    def __init__(self, data: np.ndarray, value_type: Any = None) -> None:
        self._data = data
        if value_type is None:
            first = next((v for v in data if isinstance(v, np.ndarray)), None)
            value_type = data.dtype if data.dtype != object else getattr(first, "dtype", "O")
        self._dtype = ArrayDtype(value_type)

    @classmethod
    def series(cls, values: np.ndarray | Sequence[Any], index: Any = None) -> pd.Series:
        """A Series over ``values`` (a stacked ndarray, or one array or None per row)."""
        if not (isinstance(values, np.ndarray) and values.dtype != object):
            data = np.empty(len(values), dtype=object)
            data[:] = list(values)
            values = data
        return pd.Series(cls(values), index=index, copy=False)

    # ------------------------------------------------------------------ the ExtensionArray API
    @classmethod
    def _from_sequence(cls, scalars: Any, *, dtype: Any = None, copy: bool = False) -> ArrayColumn:
        items = list(scalars)
        shapes = {np.shape(v) for v in items if v is not None}
        if items and len(shapes) == 1 and all(v is not None for v in items):
            return cls(np.stack([np.asarray(v) for v in items]))
        data = np.empty(len(items), dtype=object)
        data[:] = items
        return cls(data)

    @classmethod
    def _concat_same_type(cls, to_concat: Sequence[ArrayColumn]) -> ArrayColumn:
        parts = [a._data for a in to_concat]
        if all(p.dtype != object for p in parts) and len({p.shape[1:] for p in parts}) == 1:
            return cls(np.concatenate(parts))
        return cls._from_sequence([v for p in parts for v in p])

    @property
    def dtype(self) -> ArrayDtype:
        return self._dtype

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, int | np.integer):
            return self._data[item]
        return type(self)(self._data[item], self._dtype.value_type)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if dtype is not None and np.dtype(dtype) == object:
            out = np.empty(len(self._data), dtype=object)
            out[:] = list(self._data)
            return out
        return self._data if dtype is None else self._data.astype(dtype)

    def to_numpy(self, dtype: Any = None, copy: bool = False, na_value: Any = None) -> np.ndarray:
        return self.__array__(dtype)

    def isna(self) -> np.ndarray:
        if self._data.dtype != object:
            return np.zeros(len(self._data), dtype=bool)
        return np.array([v is None for v in self._data], dtype=bool)

    def take(self, indices: Any, allow_fill: bool = False, fill_value: Any = None) -> ArrayColumn:
        indices = np.asarray(indices, dtype=np.intp)
        if allow_fill and (indices < 0).any():
            rows = [None if i < 0 else self._data[i] for i in indices]
            return self._from_sequence(rows)
        return type(self)(self._data[indices], self._dtype.value_type)

    def copy(self) -> ArrayColumn:
        return type(self)(self._data.copy(), self._dtype.value_type)
