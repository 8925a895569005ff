"""`Column`: what ``ds["name"]`` returns, as in `datasets` 4+ (lazy, indexable, iterable)."""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence as SequenceABC
from typing import Any, Protocol

import numpy as np


class Columnar(Protocol):
    """What a :class:`Column` reads from: a dataset (:class:`~jaxfeed.Dataset`, or anything with
    its features, rows and format). Typing only: this module imports no dataset class."""

    @property
    def features(self) -> Any: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def format(self) -> dict[str, Any]: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __getitem__(self, key: Any) -> Any: ...

    def select_columns(self, column_names: Any) -> Columnar: ...

    def with_format(self, type: str | None = None, **format_kwargs: Any) -> Columnar: ...


class Column(SequenceABC):
    """One column of a dataset, read on access in the dataset's format.

    Indexing reads only the rows asked for (``col[0]``, ``col[:10]``, ``col[[3, 1]]``); iterating
    reads blocks of rows; ``col == [...]`` compares with the list of values; ``np.asarray(col)``
    reads the whole column at once in the numpy or jax format. A string key selects a field of a
    struct column: ``ds["meta"]["source"]``. Other attributes are those of the whole column read
    at once (``.shape``, ``.tolist()`` in the numpy format), so code written for `datasets` 3.x,
    where ``ds["x"]`` was that value, keeps working.

    >>> from jaxfeed import Dataset
    >>> col = Dataset.from_dict({"x": [1, 2, 3]})["x"]
    >>> col
    Column([1, 2, 3])
    >>> col[1], col[1:], col == [1, 2, 3]
    (2, [2, 3], True)
    """

    def __init__(self, source: Columnar | Column, column_name: str) -> None:
        features = source.features
        if not isinstance(features, dict) or column_name not in features:
            raise ValueError(f"Column '{column_name}' doesn't exist.")
        self.source = source
        self.column_name = column_name
        self.features = features[column_name]

    def _dataset(self) -> Columnar:
        """The source dataset restricted to this column (all columns for a custom transform)."""
        ds = self.source
        if ds.format["type"] == "custom":
            return ds
        return ds.select_columns([self.column_name]).with_format(
            ds.format["type"], **ds.format["format_kwargs"]
        )

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Iterator[Any]:
        for row in self.source if isinstance(self.source, Column) else self._dataset():
            yield row[self.column_name]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return Column(self, key)
        if isinstance(self.source, Column):
            if isinstance(key, int | np.integer):
                return self.source[key][self.column_name]
            return [item[self.column_name] for item in self.source[key]]
        return self._dataset()[key][self.column_name]

    def __getattr__(self, name: str) -> Any:
        # Code written for `datasets` 3.x got the whole column (an ndarray in the numpy format,
        # a jax.Array in the jax format): its attributes (.shape, .dtype, .tolist()) still work.
        if name.startswith("_") or name in ("source", "column_name", "features"):
            raise AttributeError(name)
        return getattr(self[:], name)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self[:])
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return "Column(" + repr(list(self[:5]))[:-1] + (", ...])" if len(self) > 5 else "])")

    def __str__(self) -> str:
        return "Column(" + str(list(self[:5]))[:-1] + (", ...])" if len(self) > 5 else "])")

    def __eq__(self, value: object) -> bool:
        if isinstance(value, Column):
            return list(self) == list(value)
        return value == list(self)

    __hash__ = None  # type: ignore[assignment]  # mutable-like: equal to lists
