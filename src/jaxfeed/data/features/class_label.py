"""`ClassLabel`: integer class ids stored as int64, with names."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.features.base import Feature, bad_value, unwrap_storage


class ClassNames(Sequence[str]):
    """The names ``"0"``, ``"1"``, ... of a ``ClassLabel`` given only ``num_classes``, made when
    asked for: a file declaring ``num_classes=10**12`` costs nothing until a name is used (the
    names of a list would take 6 GB and 30 s).

    >>> names = ClassNames(10**12)
    >>> len(names), names[7], names[-1], names[:3], "42" in names
    (1000000000000, '7', '999999999999', ['0', '1', '2'], True)
    """

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [str(k) for k in range(*i.indices(self.n))]
        k = i + self.n if i < 0 else i
        if not 0 <= k < self.n:
            raise IndexError(f"class {i} outside {self.n} classes")
        return str(k)

    def __iter__(self) -> Iterator[str]:
        return (str(k) for k in range(self.n))

    def __contains__(self, name: object) -> bool:
        return self.index_of(name) is not None

    def index_of(self, name: object) -> int | None:
        """The id named ``name`` (a decimal without sign or leading zeros), else None."""
        if not isinstance(name, str) or not name.isdecimal() or (name != "0" and name[0] == "0"):
            return None
        k = int(name)
        return k if k < self.n else None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClassNames):
            return self.n == other.n
        if isinstance(other, list | tuple):
            return len(other) == self.n and all(v == str(k) for k, v in enumerate(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(("ClassNames", self.n))

    def __repr__(self) -> str:
        shown = ", ".join(repr(n) for n in self[:3])
        return f"[{shown}, ... ({self.n} names)]" if self.n > 3 else repr(list(self))


LAZY_NAMES = 4096  # num_classes without names above this: names made when asked for


@dataclass(frozen=True)
class ClassLabel(Feature):
    """Class labels: stored as int64 ids, ``-1`` meaning "no label".

    Give ``names``, ``num_classes`` (names become ``"0"``, ``"1"``, ...) or ``names_file`` (one name
    per line). Values may be ids or names.

    >>> from jaxfeed import ClassLabel
    >>> label = ClassLabel(names=["negative", "positive"])
    >>> label.str2int("positive"), label.int2str(0), label.num_classes
    (1, 'negative', 2)
    """

    num_classes: int | None = None
    names: list[str] | None = None
    names_file: str | None = field(default=None, repr=False)
    _type: ClassVar[str] = "ClassLabel"
    dtype: ClassVar[str] = "int64"

    def __post_init__(self) -> None:
        names = self.names
        if self.names_file is not None:
            if names is not None:
                raise ValueError("ClassLabel: give names or names_file, not both")
            names = [line.strip() for line in Path(self.names_file).read_text().splitlines()]
            names = [n for n in names if n]
        if names is None:
            if self.num_classes is None:
                raise ValueError("ClassLabel needs names=, num_classes= or names_file=")
            if (
                not isinstance(self.num_classes, int | np.integer)
                or isinstance(self.num_classes, bool)
                or self.num_classes < 0
            ):
                raise ValueError(
                    f"ClassLabel: num_classes must be an integer >= 0, got {str(self.num_classes)[:40]}"
                )
            if self.num_classes > LAZY_NAMES:
                n = int(self.num_classes)
                object.__setattr__(self, "names", ClassNames(n))
                object.__setattr__(self, "num_classes", n)
                object.__setattr__(self, "_index", None)
                return
            names = [str(i) for i in range(self.num_classes)]
        elif not isinstance(names, Sequence):  # e.g. a numpy array, refused as `datasets` does
            raise TypeError(f"ClassLabel: give names as a list, got {type(names).__name__}")
        if isinstance(names, ClassNames):
            object.__setattr__(self, "num_classes", names.n)
            object.__setattr__(self, "_index", None)
            return
        names = [str(n) for n in names]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"ClassLabel: duplicate class name {dup!r}")
        if self.num_classes is not None and self.num_classes != len(names):
            raise ValueError(
                f"ClassLabel: num_classes={self.num_classes} but {len(names)} names were given"
            )
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "num_classes", len(names))
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})

    def __repr__(self) -> str:
        if isinstance(self.names, ClassNames):
            return f"ClassLabel(num_classes={self.num_classes})"
        return f"ClassLabel(names={self.names!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClassLabel):
            return False
        if isinstance(other.names, ClassNames) and not isinstance(self.names, ClassNames):
            return other.names == self.names
        return self.names == other.names

    def __hash__(self) -> int:
        if isinstance(self.names, ClassNames) or self.names == ClassNames(len(self.names or ())):
            return hash(("ClassLabel", "range", self.num_classes))
        return hash(("ClassLabel", tuple(self.names or ())))

    @property
    def pa_type(self) -> pa.DataType:
        return pa.int64()

    def str2int(self, values: str | Iterable[str]) -> int | list[int]:
        """Class name(s) to id(s). Unknown names, and values that are neither a string nor an
        iterable of them, raise ``ValueError`` (as in `datasets`)."""
        if isinstance(values, str):
            return self._str2int_one(values)
        if not isinstance(values, Iterable):
            raise ValueError(f"str2int needs a string or an iterable of strings, got {values!r}")
        return [self._str2int_one(v) for v in values]

    def _str2int_one(self, name: str) -> int:
        index: dict[str, int] | None = self._index  # type: ignore[attr-defined]
        name = str(name)
        if index is None:  # lazy names "0", "1", ...
            for candidate in (name, name.strip()):
                k = self.names.index_of(candidate)  # type: ignore[union-attr]
                if k is not None:
                    return k
            raise ValueError(
                f"invalid class name {name[:40]!r}; expected one of {self.num_classes} names "
                "'0', '1', ..."
            )
        if name in index:
            return index[name]
        if name.strip() in index:
            return index[name.strip()]
        raise ValueError(f"invalid class name {name[:40]!r}; expected one of {self.names[:20]}")

    def int2str(self, values: int | Sequence[int] | np.ndarray) -> str | list[str]:
        """Class id(s) to name(s). Ids outside ``[0, num_classes)``, and values that are neither an
        int nor an iterable of ints, raise ``ValueError`` (as in `datasets`)."""
        if isinstance(values, bool) or not isinstance(values, int | np.integer | Iterable):
            raise ValueError(f"int2str needs an int or an iterable of ints, got {values!r}")
        if isinstance(values, int | np.integer):
            return self._int2str_one(int(values))
        return [self._int2str_one(int(v)) for v in np.asarray(values).ravel()]

    def _int2str_one(self, value: int) -> str:
        if not 0 <= value < self.num_classes:
            raise ValueError(f"invalid class id {value}; expected 0 <= id < {self.num_classes}")
        return self.names[value]

    def encode_example(self, value: int | str) -> int:
        """One label as its id: names are looked up; ids outside ``[-1, num_classes)`` raise."""
        if isinstance(value, str):
            value = self.str2int(value)
        if not -1 <= value < self.num_classes:
            raise ValueError(
                f"class label {value} is outside [-1, {self.num_classes}) for {self.num_classes} classes"
            )
        return int(value)

    def decode_example(self, value: Any) -> Any:
        return value

    def cast_storage(self, storage: pa.Array) -> pa.Array:
        """Cast an Arrow array of ids or names to this feature's storage (int64), checking ids."""
        if pa.types.is_string(storage.type) or pa.types.is_large_string(storage.type):
            return pa.array(
                [None if v is None else self._str2int_one(v) for v in storage.to_pylist()],
                type=pa.int64(),
            )
        if pa.types.is_integer(storage.type) and len(storage):
            top = pc.max(storage).as_py()
            if top is not None and top >= self.num_classes:
                raise ValueError(
                    f"class label {top} greater than configured num_classes {self.num_classes}"
                )
        return storage.cast(pa.int64())

    def encode(self, values: Any, column: str) -> pa.Array:
        expected = (
            f"a class id in [0, {self.num_classes}) or -1, or one of the names {self.names[:10]}"
        )
        if isinstance(values, pa.Array | pa.ChunkedArray):
            values = (
                values.to_numpy(zero_copy_only=False)
                if not values.null_count
                else values.to_pylist()
            )
        missing = None
        if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            ids = values.astype(np.int64, copy=False)
        else:
            values = list(values)
            ids = np.empty(len(values), dtype=np.int64)
            missing = np.zeros(len(values), dtype=bool)
            for row, value in enumerate(values):
                if value is None:  # stored as null, as `datasets` stores it
                    missing[row] = True
                    ids[row] = 0
                elif isinstance(value, str):
                    try:
                        ids[row] = self._str2int_one(value)
                    except ValueError:
                        raise bad_value(column, row, expected, value) from None
                elif isinstance(value, int | np.integer) and not isinstance(value, bool):
                    ids[row] = value
                else:
                    raise bad_value(column, row, expected, value)
        if ids.ndim != 1:
            raise bad_value(column, 0, expected, values[0])
        bad = (ids < -1) | (ids >= self.num_classes)
        if bad.any():
            row = int(np.argmax(bad))
            raise bad_value(column, row, expected, int(ids[row]))
        if missing is not None and missing.any():
            return pa.array(ids, type=pa.int64(), mask=missing)
        return pa.array(ids, type=pa.int64())

    def numpy_view(self, array: pa.Array) -> np.ndarray | None:
        array = unwrap_storage(array)
        if array.null_count or array.type != pa.int64():
            return None
        return array.to_numpy(zero_copy_only=True)

    def to_numpy(self, array: pa.Array) -> np.ndarray | list:
        view = self.numpy_view(array)
        if view is not None:
            return view
        array = unwrap_storage(array)
        if array.null_count:
            return array.to_numpy(zero_copy_only=False).astype(np.float64)
        return array.cast(pa.int64()).to_numpy(zero_copy_only=False)

    def to_dict(self) -> dict:
        if isinstance(self.names, ClassNames):  # `datasets` makes the same names from the count
            return {"_type": "ClassLabel", "num_classes": self.num_classes}
        return {"_type": "ClassLabel", "names": list(self.names)}
