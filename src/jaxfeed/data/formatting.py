"""Output formats: python, numpy, jax, arrow and pandas views of rows read from a table.

The jax format follows the rules `datasets` documents: integers become int32 (int64 with
``jax_enable_x64``), floats float32, bools stay bool, strings and bytes pass through, equal-shape
values stack into one array and ragged ones give a list of arrays. Unlike `datasets`, an integer
that does not fit the target type raises ``OverflowError`` instead of wrapping around, and every
batch is moved to its device in one ``jax.device_put`` call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxfeed._base.extras import require
from jaxfeed.data.features.array import ARRAY_TYPES
from jaxfeed.data.features.class_label import ClassLabel
from jaxfeed.data.features.struct import requires_decoding
from jaxfeed.data.reader import Rows, TableReader

FORMAT_TYPES = ("python", "numpy", "jax", "arrow", "pandas", "custom")
_ALIASES = {None: "python", "np": "numpy", "pa": "arrow", "pyarrow": "arrow", "pd": "pandas"}


def canonical_format(type: str | None) -> str:
    """The canonical name of a format type; raises ``ValueError`` for an unknown one."""
    name = _ALIASES.get(type, type)
    if name not in FORMAT_TYPES:
        raise ValueError(
            f"unknown format type {type!r}; valid types are None, {', '.join(map(repr, FORMAT_TYPES))}"
        )
    return name


class Formatter:
    """Turns rows of a table into one output format."""

    options: dict[str, Any] | None = None  # its keyword arguments (set by make_formatter)

    def serialize(self) -> dict[str, Any]:
        """Its options as JSON values (for ``state.json``); values JSON cannot hold are left out."""
        return {k: v for k, v in (self.options or {}).items() if _json_scalar(v)}

    def batch(self, reader: TableReader, rows: Rows, columns: Sequence[str]) -> Any:
        raise NotImplementedError

    def row(self, reader: TableReader, rows: Rows, columns: Sequence[str]) -> Any:
        return {k: v[0] for k, v in self.batch(reader, rows, columns).items()}

    def column(self, reader: TableReader, rows: Rows, column: str) -> Any:
        return self.batch(reader, rows, [column])[column]


class PythonFormatter(Formatter):
    def batch(self, reader, rows, columns):
        return {c: reader.python(c, rows) for c in columns}


class ArrowFormatter(Formatter):
    def batch(self, reader, rows, columns):
        return reader.arrow(rows, columns)

    row = batch

    def column(self, reader, rows, column):
        return reader.arrow(rows, [column]).column(column)


class PandasFormatter(Formatter):
    """A DataFrame, with media decoded (PIL images, audio dicts) and ``ArrayND`` cells kept as
    arrays of their full shape, as `datasets`' pandas format gives them."""

    def batch(self, reader, rows, columns):
        require("pandas", "pandas", 'the "pandas" format')
        df = reader.arrow(rows, columns).to_pandas()
        for c in columns:
            feature = reader.features[c]
            if requires_decoding(feature):
                df[c] = _object_series(reader.python(c, rows), df.index)
            elif isinstance(feature, tuple(ARRAY_TYPES.values())):
                from jaxfeed.data.pandas_arrays import (  # noqa: PLC0415 (optional: pandas extra)
                    ArrayColumn,
                )

                df[c] = ArrayColumn.series(reader.numpy(c, rows), df.index)
        return df

    row = batch

    def column(self, reader, rows, column):
        return self.batch(reader, rows, [column])[column]


def _object_series(values: list, index: Any) -> Any:
    import pandas as pd  # noqa: PLC0415 (optional: the pandas extra, only for the pandas format)

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return pd.Series(out, index=index)


class CustomFormatter(Formatter):
    """``set_transform``: Python batches passed through a user function on access."""

    def __init__(self, transform: Callable[[dict], dict]) -> None:
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self.transform = transform

    def serialize(self) -> dict[str, Any]:
        return {}  # a function cannot be saved

    def batch(self, reader, rows, columns):
        return self.transform({c: reader.python(c, rows) for c in columns})

    def row(self, reader, rows, columns):
        return {k: v[0] for k, v in self.batch(reader, rows, columns).items()}


class NumpyFormatter(Formatter):
    """Numpy arrays in their stored dtype (read-only views where Arrow allows); ``dtype=`` casts
    every numeric array (strings and objects are left as they are)."""

    def __init__(self, dtype: Any = None) -> None:
        self.dtype = None if dtype is None else np.dtype(dtype)

    def serialize(self) -> dict[str, Any]:
        return {} if self.dtype is None else {"dtype": self.dtype.name}

    def _cast(self, value: Any) -> Any:
        if self.dtype is None:
            return value
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            return value.astype(self.dtype)
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            return value.astype(self.dtype)
        if isinstance(value, np.ndarray) and value.dtype == object:
            out = np.empty(len(value), dtype=object)
            out[:] = [self._cast(v) for v in value]
            return out
        return value

    def batch(self, reader, rows, columns):
        return {c: self._cast(_numpy_column(reader.numpy(c, rows))) for c in columns}

    def row(self, reader, rows, columns):
        return {c: self._cast(_numpy_scalar(_first(reader.numpy(c, rows)))) for c in columns}


def _numpy_column(values: np.ndarray | list) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values
    if values and all(isinstance(v, str) for v in values):
        return np.array(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _numpy_scalar(value: Any) -> Any:
    """A string of a numpy row is ``np.str_``, as `datasets`' numpy format gives it."""
    return np.str_(value) if isinstance(value, str) else value


def _first(values: np.ndarray | list) -> Any:
    return values[0]


class JaxFormatter(Formatter):
    """``jax.Array`` outputs, placed on one device or sharded along the batch dimension."""

    def __init__(self, device: Any = None, dtype: Any = None) -> None:
        from jaxfeed.runtime.devices import (  # noqa: PLC0415 (jax-free: non-jax formats, workers)
            resolve_placement,
        )

        self.placement = resolve_placement(device)
        self.dtype = None if dtype is None else np.dtype(dtype)

    def serialize(self) -> dict[str, Any]:
        """``device`` as its name (a sharding cannot be saved), ``dtype`` as a dtype name."""
        out = {}
        for key, value in (self.options or {}).items():
            if _json_scalar(value):
                out[key] = value
            elif key == "device" and hasattr(value, "platform"):
                out[key] = str(value)  # a jax.Device: keep its name
            elif key == "dtype":
                out[key] = np.dtype(value).name
        return out

    def batch(self, reader, rows, columns):
        _refuse_missing(reader, rows, columns)
        decoded = {c: reader.numpy(c, rows) for c in columns}
        return self.to_device(decoded, rows, batched=True, native=_native_columns(reader, columns))

    def row(self, reader, rows, columns):
        _refuse_missing(reader, rows, columns)
        decoded = {c: _first(reader.numpy(c, rows)) for c in columns}
        return self.to_device(decoded, rows, batched=False, native=_native_columns(reader, columns))

    def to_device(
        self,
        decoded: dict[str, Any],
        rows: Rows,
        batched: bool,
        native: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Cast numeric leaves on the host, then move them with one transfer call."""
        from jaxfeed.runtime.devices import (  # noqa: PLC0415 (jax-free: see __init__)
            check_divisible,
            put_tree,
        )

        def row_of(position: int) -> int:
            return rows.start + position if isinstance(rows, slice) else int(rows[position])

        host = {
            c: to_host(v, c, row_of, self.dtype, keep_ints=c in native) for c, v in decoded.items()
        }
        if batched:
            check_divisible(
                rows.stop - rows.start if isinstance(rows, slice) else len(rows), self.placement
            )
        return put_tree(host, self.placement, batched)


def _refuse_missing(reader: TableReader, rows: Rows, columns: Sequence[str]) -> None:
    """A missing class label or array (a null) cannot become a ``jax.Array``: name its row."""
    strict = (ClassLabel, *ARRAY_TYPES.values())
    for c in columns:
        if not isinstance(reader.features[c], strict) or not reader.table.column(c).null_count:
            continue
        valid = reader.arrow_column(c, rows).is_valid().to_numpy(zero_copy_only=False)
        if not valid.all():
            pos = int(np.argmin(valid))
            row = rows.start + pos if isinstance(rows, slice) else int(rows[pos])
            raise ValueError(
                f"column {c!r}, row {row}: the value is missing (None), which the jax format cannot "
                "turn into an array; fill or filter the missing rows, or use the numpy format"
            )


def _json_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def jax_int_dtype() -> np.dtype:
    import jax  # noqa: PLC0415 (jax-free: only the jax format starts JAX)

    return np.dtype(np.int64 if jax.config.jax_enable_x64 else np.int32)


def _native_columns(reader: TableReader, columns: Sequence[str]) -> frozenset[str]:
    """Columns whose integers keep their dtype in the jax format (images stay uint8)."""
    return frozenset(c for c in columns if getattr(reader.features[c], "keeps_dtype", False))


def to_host(
    value: Any,
    column: str,
    row_of: Callable[[int], int],
    dtype: np.dtype | None,
    keep_ints: bool = False,
) -> Any:
    """Apply the jax format's dtype rules to a decoded value, on the host (numpy)."""
    if isinstance(value, np.ndarray):
        kind = value.dtype.kind
        if kind == "O":
            return [to_host(v, column, row_of, dtype, keep_ints) for v in value]
        if kind in "US":
            return value.tolist()
        if kind in "mM":
            raise TypeError(
                f"column {column!r} holds {value.dtype} values, which JAX cannot represent; cast it "
                "to int64 (e.g. ds.cast_column) or use the numpy format"
            )
        return _cast(value, column, row_of, dtype, keep_ints)
    if isinstance(value, list):
        return [to_host(v, column, row_of, dtype, keep_ints) for v in value]
    if isinstance(value, dict):
        return {k: to_host(v, f"{column}.{k}", row_of, dtype, keep_ints) for k, v in value.items()}
    if isinstance(value, bool | int | float | np.generic) and not isinstance(
        value, np.str_ | np.bytes_
    ):
        return _cast(np.asarray(value), column, row_of, dtype)
    return value  # str, bytes, None and other objects pass through unchanged


def _cast(
    x: np.ndarray,
    column: str,
    row_of: Callable[[int], int],
    dtype: np.dtype | None,
    keep_ints: bool = False,
) -> np.ndarray:
    kind = x.dtype.kind
    if kind == "b" or (keep_ints and kind in "iu" and dtype is None and x.dtype.itemsize <= 4):
        return x
    if kind in "iu":
        target = dtype if dtype is not None else jax_int_dtype()
        if target.kind in "iu" and not np.can_cast(x.dtype, target, casting="safe") and x.size:
            info = np.iinfo(target)
            bad = (x < info.min) | (x > info.max)
            if bad.any():
                flat = bad.reshape(len(x), -1).any(axis=1) if x.ndim else bad.reshape(1)
                pos = int(np.argmax(flat))
                value = x.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
                where = f"row {row_of(pos)}" if x.ndim else "this row"
                raise OverflowError(
                    f"column {column!r}, {where}: value {value} does not fit {target.name}, the jax "
                    f"format's integer type; set jax.config.update('jax_enable_x64', True) or cast "
                    "the column to a float type"
                )
        return x.astype(target, copy=False)
    if kind == "f":
        return x.astype(dtype if dtype is not None else np.float32, copy=False)
    if kind == "c":
        return x.astype(np.complex64, copy=False)
    if x.dtype.name == "bfloat16":  # JAX's own dtype (ml_dtypes): kept unless a dtype is asked
        return x if dtype is None else x.astype(dtype, copy=False)
    raise TypeError(f"column {column!r}: cannot convert numpy dtype {x.dtype} to a jax.Array")


def make_formatter(type: str | None, **kwargs: Any) -> Formatter:
    """Build the formatter for a format type (validating its arguments)."""
    name = canonical_format(type)
    if name == "jax":
        unknown = set(kwargs) - {"device", "dtype"}
        if unknown:
            raise TypeError(
                f"unexpected arguments for the jax format: {sorted(unknown)}; accepted: device, dtype"
            )
        formatter: Formatter = JaxFormatter(**kwargs)
    elif name == "numpy":
        unknown = {k for k, v in kwargs.items() if v is not None} - {"dtype"}
        if unknown:
            raise TypeError(f"the numpy format takes only dtype=, got {sorted(unknown)}")
        formatter = NumpyFormatter(dtype=kwargs.get("dtype"))
    elif name == "custom":
        if set(kwargs) != {"transform"}:
            raise TypeError(f"the custom format takes transform=, got {sorted(kwargs)}")
        formatter = CustomFormatter(kwargs["transform"])
    else:
        extra = {k: v for k, v in kwargs.items() if v is not None}
        if extra:
            raise TypeError(f"the {name} format takes no arguments, got {sorted(extra)}")
        formatter = {
            "python": PythonFormatter,
            "numpy": NumpyFormatter,
            "arrow": ArrowFormatter,
            "pandas": PandasFormatter,
        }[name]()
    formatter.options = dict(kwargs)
    return formatter
