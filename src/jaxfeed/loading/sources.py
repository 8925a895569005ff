"""Where the map-style :class:`~jaxfeed.DataLoader` reads rows from: a jaxfeed (or Hugging Face)
``Dataset`` gathered in bulk from its Arrow buffers (:class:`_ArrowSource`), or any object with
``__len__`` and ``__getitem__``/``__getitems__`` (:class:`_ItemSource`); :func:`_make_source` picks
one. ``_CANONICAL`` are the numpy dtypes a batch keeps as they are on the way to the device.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features._nested import stack_if_same
from jaxfeed.data.features.class_label import ClassLabel
from jaxfeed.data.features.media import MediaFeature
from jaxfeed.data.features.value import BFLOAT16, numpy_dtype
from jaxfeed.data.formatting import jax_int_dtype
from jaxfeed.data.ragged import Ragged, arrow_lengths, arrow_ragged, is_ragged_type
from jaxfeed.data.reader import ChunkedView

_CANONICAL = {
    np.dtype(t) for t in ("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float32")
}


class _ArrowSource:
    """A jaxfeed ``Dataset``: bulk gathers from Arrow views; media decoded (maybe in workers)."""

    def __init__(self, ds: Dataset, columns: Sequence[str] | None) -> None:
        self.ds = ds
        self.columns = list(columns) if columns is not None else ds.column_names
        names = set(ds.column_names)  # one list, not one per column (wide tables)
        unknown = [c for c in self.columns if c not in names]
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
        # ragged lists of numbers: every column that may be padded or packed
        self.variable = tuple(
            c
            for c in self.columns
            if not isinstance(ds.features[c], dict) and is_ragged_type(ds.features[c].pa_type)
        )
        self.ragged: tuple[str, ...] = ()  # gathered as flat values + offsets (set by the loader)
        # bfloat16 lists, stored as float32 (Arrow has no bfloat16): cast back when gathered
        self.bfloat16 = {c for c in self.variable if getattr(ds.features[c], "bfloat16", False)}

    def __len__(self) -> int:
        return self.ds.num_rows

    def fingerprint(self) -> str:
        """Features, row count and the stored values of up to 64 evenly spaced rows: a saved state
        is refused by another dataset of the same schema and size (another split, other files)."""
        payload = json.dumps(
            {"features": self.ds.features.to_dict(), "rows": len(self)}, sort_keys=True
        )
        digest = hashlib.sha256(payload.encode())
        n = len(self)
        if n:
            sample = np.unique(np.linspace(0, n - 1, num=min(n, 64)).round().astype(np.int64))
            table = self.ds.with_format("arrow")[sample].combine_chunks()
            table = table.replace_schema_metadata(None)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            digest.update(sink.getvalue().to_pybytes())
        return digest.hexdigest()[:16]

    def _label_view(self, column: str) -> Any:
        """Class ids fit int32 whatever they are stored as: cast the column once, not every batch."""
        if column not in self._labels:
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

    def gather(self, rows: np.ndarray) -> dict[str, Any]:
        """The columns of ``rows``; media columns as their stored (still encoded) values."""
        reader = self.ds._internal.reader
        table_rows = self.ds._internal.table_rows(rows)
        out: dict[str, Any] = {}
        for column in self.columns:
            if column in self.ragged:
                ragged = arrow_ragged(reader.arrow_column(column, table_rows))
                if ragged is not None and column in self.bfloat16:
                    ragged = Ragged(ragged.values.astype(numpy_dtype(BFLOAT16)), ragged.offsets)
                if ragged is not None:
                    out[column] = ragged
                    continue
            view = self._label_view(column) or reader.view(column)
            if view is not None:
                out[column] = view.take(table_rows)
            elif column in self.media:
                out[column] = self.media[column].iter_stored(
                    reader.arrow_column(column, table_rows)
                )
            else:
                out[column] = reader.numpy(column, table_rows)
        return out

    def lengths(self, column: str) -> np.ndarray:
        """Every row's length in ``column`` (a ragged list column), in dataset order."""
        reader = self.ds._internal.reader
        table_rows = self.ds._internal.table_rows(np.arange(len(self), dtype=np.int64))
        return arrow_lengths(reader.table.column(column))[table_rows]


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
        self.variable: tuple[str, ...] = ()  # unknown before reading: found batch by batch

    def __len__(self) -> int:
        return len(self.data)

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{type(self.data).__qualname__}:{len(self)}".encode()).hexdigest()[
            :16
        ]

    def gather(self, rows: np.ndarray, pool: Any = None) -> dict[str, Any]:
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
                out[key] = stack_if_same([np.asarray(v) for v in values])
        return out

    def lengths(self, column: str) -> np.ndarray:
        """Every row's length in ``column``, reading the whole dataset once (in blocks)."""
        out = []
        for lo in range(0, len(self), 1024):
            values = self.gather(np.arange(lo, min(lo + 1024, len(self)), dtype=np.int64))
            if column not in values:
                raise ValueError(f"the dataset's items have no column {column!r}")
            value = values[column]
            if isinstance(value, np.ndarray) and value.ndim >= 2:
                out.append(np.full(len(value), value.shape[1], dtype=np.int64))
            else:
                out.append(np.array([len(v) for v in value], dtype=np.int64))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


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
