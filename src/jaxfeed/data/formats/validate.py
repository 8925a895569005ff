"""Check features read from a file (Parquet/Arrow schema metadata, ``dataset_info.json``) against
the data they describe, so a file cannot make jaxfeed return values its features rule out.

The checks are cheap, vectorised passes over the columns: class ids within ``[-1, num_classes)``,
list lengths equal to a ``Sequence``'s ``length`` and an ``ArrayND``'s shape, numeric storage under
numeric features, struct fields present. A mismatch raises :class:`FeatureMismatchError`, naming
the file, the column and the first bad row.
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed._base.files import UnsafePathError
from jaxfeed.data.features import ClassLabel, Features, Sequence, Value
from jaxfeed.data.features.array import ARRAY_TYPES
from jaxfeed.data.features.base import unwrap_storage
from jaxfeed.data.features.media import MediaFeature

Rows = Callable[[int], int]


class FeatureMismatchError(ValueError):
    """The features a file declares do not describe its data."""

    def __init__(self, source: str, column: str, row: int | None, problem: str) -> None:
        self.source, self.column, self.row = source, column, row
        where = f"column {column!r}" + ("" if row is None else f", row {row}")
        super().__init__(f"{source}: {where}: {problem} (the features stored with the data)")

    def __reduce__(self):
        return (type(self), (self.source, self.column, self.row, str(self)))


def check_table(table: pa.Table, features: Features, source: str) -> None:
    """Raise :class:`FeatureMismatchError` when ``table``'s data contradicts ``features``.

    >>> import pyarrow as pa
    >>> from jaxfeed import ClassLabel, Features
    >>> check_table(pa.table({"y": [0, 1]}), Features({"y": ClassLabel(names=["a", "b"])}), "t")
    >>> check_table(pa.table({"y": [0, 7]}), Features({"y": ClassLabel(names=["a", "b"])}), "t")
    Traceback (most recent call last):
    ...
    jaxfeed.data.formats.validate.FeatureMismatchError: t: column 'y', row 1: class id 7 outside [-1, 2) ...
    """
    names = set(table.column_names)
    missing = [name for name in features if name not in names]
    if missing:
        raise FeatureMismatchError(
            source, missing[0], None, f"declared but absent from the data {table.column_names}"
        )
    for name, feature in features.items():
        start = 0
        for chunk in table.column(name).chunks:
            _check(feature, chunk, name, source, lambda i, s=start: s + i)
            start += len(chunk)


def _check(feature: Any, array: pa.Array, column: str, source: str, row: Rows) -> None:
    array = unwrap_storage(array)
    if len(array) == 0 or array.null_count == len(array):
        return
    if isinstance(feature, ClassLabel):
        _check_class_ids(feature, array, column, source, row)
    elif isinstance(feature, Mapping):
        if not pa.types.is_struct(array.type):
            _refuse(source, column, None, f"declared as a struct but stored as {array.type}")
        names = {array.type.field(i).name for i in range(array.type.num_fields)}
        for key, sub in feature.items():
            if key not in names:
                _refuse(source, f"{column}.{key}", None, f"field absent from the data {names}")
            _check(sub, array.field(key), f"{column}.{key}", source, row)
    elif type(feature).__name__ in ARRAY_TYPES:
        shape = feature.shape
        if shape[0] is None:
            values, inner_row = _lists(array, None, column, source, row, "an array")
            _check_dims(values, shape[1:], feature.dtype, column, source, inner_row)
        else:
            _check_dims(array, shape, feature.dtype, column, source, row)
    elif (
        isinstance(feature, Sequence)
        and isinstance(feature.feature, Mapping)
        and pa.types.is_struct(array.type)
    ):  # `datasets` stores Sequence({...}) as a struct of lists
        inner = {k: Sequence(v, length=feature.length) for k, v in feature.feature.items()}
        _check(inner, array, column, source, row)
    elif isinstance(feature, Sequence):
        length = None if feature.length == -1 else feature.length
        values, inner_row = _lists(array, length, column, source, row, "a list")
        _check(feature.feature, values, column, source, inner_row)
    elif isinstance(feature, Value):
        _check_value(feature, array, column, source)


def _refuse(source: str, column: str, row: int | None, problem: str) -> None:
    raise FeatureMismatchError(source, column, row, problem)


def _check_class_ids(
    feature: ClassLabel, array: pa.Array, column: str, source: str, row: Rows
) -> None:
    if not pa.types.is_integer(array.type):
        _refuse(source, column, None, f"a ClassLabel stored as {array.type}, not integers")
    n = feature.num_classes
    low, high = pc.min_max(array).values()
    if low.as_py() >= -1 and high.as_py() < n:
        return
    bad = pc.or_(pc.less(array, -1), pc.greater_equal(array, n)).fill_null(False)
    i = int(np.argmax(bad.to_numpy(zero_copy_only=False)))
    _refuse(
        source,
        column,
        row(i),
        f"class id {array[i].as_py()} outside [-1, {n}) of ClassLabel(names={feature.names[:5]}"
        f"{'...' if n > 5 else ''})",
    )


def _lists(
    array: pa.Array, length: int | None, column: str, source: str, row: Rows, what: str
) -> tuple[pa.Array, Rows]:
    """The values of a list column, after checking every row holds ``length`` items."""
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        if length is not None and size != length:
            _refuse(source, column, row(0), f"{what} of {length} items declared, rows hold {size}")
        return array.flatten(), lambda i: row(i // size if size else 0)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        _refuse(source, column, None, f"{what} declared but stored as {array.type}")
    if length is not None:
        lengths = pc.list_value_length(array)
        bad = pc.not_equal(lengths, length).fill_null(False)
        if pc.any(bad).as_py():
            i = int(np.argmax(bad.to_numpy(zero_copy_only=False)))
            _refuse(
                source,
                column,
                row(i),
                f"{what} of {length} items declared, the row holds {lengths[i].as_py()}",
            )
    offsets = array.offsets.to_numpy(zero_copy_only=False)
    offsets = offsets - offsets[0]
    return array.flatten(), lambda i: row(int(np.searchsorted(offsets, i, side="right")) - 1)


def _check_dims(
    array: pa.Array, shape: tuple, dtype: str, column: str, source: str, row: Rows
) -> None:
    expected = f"an array of shape {tuple(shape)}"
    for dim in shape:
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) and not (
            pa.types.is_fixed_size_list(array.type)
        ):
            _refuse(source, column, row(0), f"{expected} declared, stored as {array.type}")
        array, row = _lists(array, dim, column, source, row, expected)
    _check_value(Value(dtype), array, column, source)


def _check_value(feature: Value, array: pa.Array, column: str, source: str) -> None:
    t = array.type
    if t == feature.pa_type or pa.types.is_null(t):
        return
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if feature.is_numeric and not numeric:
        _refuse(source, column, None, f"declared {feature!r} but stored as {t}")
    if pa.types.is_nested(t) and not pa.types.is_nested(feature.pa_type):
        _refuse(source, column, None, f"declared {feature!r} but stored as {t}")


UTF8_CHECK_BYTES = 1 << 30  # string columns larger than this get their offsets checked, not UTF-8


def check_arrow_data(table: pa.Table, source: str) -> None:
    """Validate the buffers of an Arrow table read from ``source`` (an IPC file or stream, or a
    JSON file), so corrupt offsets or lengths raise here instead of crashing a later read.

    Offsets, sizes and nested layouts are checked in full; string data is checked for valid UTF-8
    unless a column holds more than ``UTF8_CHECK_BYTES`` (then decoding a bad value raises at read
    time, naming the column and row).
    """
    try:
        names = table.column_names  # field names are bytes in the file: may not be UTF-8
    except UnicodeDecodeError as err:
        raise ValueError(f"{source}: a column name is not valid UTF-8 ({err.reason})") from None
    for name, column in zip(names, table.columns, strict=True):
        for chunk in column.chunks:
            if chunk.nbytes > UTF8_CHECK_BYTES:
                if pa.types.is_string(chunk.type):
                    chunk = chunk.view(pa.binary())
                elif pa.types.is_large_string(chunk.type):
                    chunk = chunk.view(pa.large_binary())
            try:
                chunk.validate(full=True)
            except pa.ArrowException as err:
                raise ValueError(f"{source}: column {name!r} holds corrupt data: {err}") from None


MAX_JSON_DEPTH = 100  # nesting levels of one JSON value read from a dataset's own files


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: untrusted values are never formatted whole
    into a message (a 472-byte YAML alias bomb expands to gigabytes).

    >>> short("x" * 1000, 12)
    "'xxxxxxxxxxx... (1000 characters)"
    """
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{repr(value[:limit])[:limit]}... ({len(value)} characters)"
    if isinstance(value, list | tuple | dict | set) and len(value) > 8:
        return f"<a {type(value).__name__} of {len(value)} items>"
    try:
        text = reprlib_repr(value)
    except RecursionError:
        return f"<a deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def reprlib_repr(value: Any) -> str:
    """A bounded ``repr``: at most a few items per container and levels of nesting."""
    r = reprlib.Repr()
    r.maxlevel, r.maxdict, r.maxlist, r.maxstring, r.maxother = 3, 4, 4, 60, 60
    return r.repr(value)


def check_json_depth(raw: bytes, source: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON (or JSON Lines) text nesting deeper than ``max_depth`` levels, before a parser
    recurses into it (deep nesting crashes Arrow's JSON reader and exhausts Python's stack).

    One vectorised pass: brackets inside strings (quotes not escaped by an odd run of
    backslashes) are not counted, and each line is counted on its own (as JSON Lines are read).

    >>> check_json_depth(b'{"a": [[1], "[[[["]}', "f.json", max_depth=3)
    >>> check_json_depth(b'{"a": 1}\\n' + b"[" * 5 + b"]" * 5, "f.jsonl", max_depth=3)
    Traceback (most recent call last):
    ...
    ValueError: f.jsonl: line 2 nests 5 levels deep; at most 3 are read
    """
    guard = JsonDepthGuard(source, max_depth)
    guard.feed(raw)
    guard.finish()


class JsonDepthGuard:
    """:func:`check_json_depth` over a text read in chunks: each chunk's complete lines are
    checked, and an unfinished last line waits for the rest (:meth:`finish` checks it at the end).

    Lines whose opening brackets number at most ``max_depth`` are safe whatever their strings
    hold, which one pass over the bytes shows for typical data (about 5x faster than Arrow's
    JSON parser on 15 MB of JSON Lines here); only lines with more get the exact, string-aware
    count.

    >>> guard = JsonDepthGuard("f.jsonl", max_depth=3)
    >>> guard.feed(b'{"a": "[[[[[["}\\n{"b": [[')
    >>> guard.feed(b"[[]]]]}\\n")
    Traceback (most recent call last):
    ...
    ValueError: f.jsonl: line 2 nests 5 levels deep; at most 3 are read
    """

    def __init__(self, source: str, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.source, self.max_depth = source, max_depth
        self.pending = b""  # the start of a line not finished yet
        self.lines = 0  # complete lines checked so far

    def feed(self, raw: bytes) -> None:
        cut = raw.rfind(b"\n") + 1
        if not cut:
            self.pending += raw
            return
        text, self.pending = self.pending + raw[:cut], raw[cut:]
        self._check(text)

    def finish(self) -> None:
        """Check the last line (text that ended without a newline)."""
        text, self.pending = self.pending, b""
        if text:
            self._check(text)

    def _check(self, text: bytes) -> None:
        """``text``: whole lines (each starts outside any string, at depth 0)."""
        arr = np.frombuffer(text, dtype=np.uint8)
        newlines = np.flatnonzero(arr == ord("\n"))
        opens = np.flatnonzero((arr == ord("[")) | (arr == ord("{")))
        if opens.size > self.max_depth:
            ends = np.append(newlines, arr.size)
            per_line = np.diff(np.searchsorted(opens, ends), prepend=0)
            if per_line.max() > self.max_depth:
                self._exact(arr)
        self.lines += newlines.size

    def _exact(self, arr: np.ndarray) -> None:
        special = np.zeros(256, dtype=bool)
        special[[ord(c) for c in '"[]{}\n']] = True
        where = np.flatnonzero(special[arr])  # the few bytes that matter, in order
        chars = arr[where]
        real = np.ones(len(chars), dtype=bool)  # quotes not escaped by an odd backslash run
        quote_at = np.flatnonzero(chars == ord('"'))
        slashes = np.flatnonzero(arr == ord("\\"))
        if quote_at.size and slashes.size:
            q = where[quote_at]
            breaks = np.flatnonzero(np.diff(slashes) != 1) + 1
            starts = np.concatenate([[0], breaks])
            counts = np.diff(np.concatenate([starts, [slashes.size]]))
            run_start = np.repeat(slashes[starts], counts)
            k = np.searchsorted(slashes, q) - 1
            ok = k >= 0
            ends_before = np.zeros(q.size, dtype=bool)
            ends_before[ok] = slashes[k[ok]] == q[ok] - 1
            run = np.zeros(q.size, dtype=np.int64)
            run[ends_before] = q[ends_before] - run_start[k[ends_before]]
            real[quote_at[run % 2 == 1]] = False
        newline = chars == ord("\n")
        count = np.cumsum((chars == ord('"')) & real)
        at_line_start = np.maximum.accumulate(np.where(newline, count, 0))  # count never falls
        inside = (count - at_line_start) % 2 == 1
        opening = (chars == ord("[")) | (chars == ord("{"))
        closing = (chars == ord("]")) | (chars == ord("}"))
        depth = np.cumsum(np.where(opening & ~inside, 1, 0) - np.where(closing & ~inside, 1, 0))
        line_of = np.cumsum(newline) - newline  # a newline belongs to the line it ends
        relative = depth - np.concatenate([[0], depth[newline]])[line_of]
        worst = int(np.argmax(relative))
        if relative[worst] > self.max_depth:
            line = self.lines + int(line_of[worst]) + 1
            raise ValueError(
                f"{self.source}: line {line} nests {int(relative[worst])} levels deep; "
                f"at most {self.max_depth} are read"
            )


class DepthCheckedStream:
    """A binary file object passing what it reads through a :class:`JsonDepthGuard` (for Arrow's
    block-by-block JSON reader, which would otherwise recurse into any nesting)."""

    def __init__(self, stream: Any, source: str, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.stream, self.guard = stream, JsonDepthGuard(source, max_depth)
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        data = data if isinstance(data, bytes) else bytes(data)
        if data:
            self.guard.feed(data)
        else:  # the end: the last line before the reader sees it
            self.guard.finish()
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def confine_media_paths(
    table: pa.Table, features: Features, root: str | os.PathLike | None, source: str
) -> pa.Table:
    """Image and Audio cells stored as a path only (no bytes) in a file: resolve relative paths
    against ``root`` (the dataset's own folder, or a ``data_dir=`` the user gave) and refuse, with
    :class:`~jaxfeed._base.files.UnsafePathError` naming the file, column and row, a path that leads
    outside it (absolute, ``..``, a sibling such as ``/d/ds-evil`` of ``/d/ds``, a symlink out, a
    URL). Returns the table with relative paths made absolute; cells holding bytes are decoded
    from their bytes and never read from their path. With ``root`` None every path-only cell is
    refused.

    >>> import tempfile, os, pyarrow as pa
    >>> from jaxfeed import Features, Image
    >>> from jaxfeed.data.features.media import MEDIA_TYPE
    >>> root = tempfile.mkdtemp()
    >>> cells = pa.array([{"bytes": None, "path": "a.png"}], MEDIA_TYPE)
    >>> out = confine_media_paths(pa.table({"i": cells}), Features({"i": Image()}), root, "t")
    >>> out.column("i")[0]["path"].as_py() == os.path.join(root, "a.png")
    True
    >>> cells = pa.array([{"bytes": None, "path": "../x.png"}], MEDIA_TYPE)
    >>> confine_media_paths(pa.table({"i": cells}), Features({"i": Image()}), root, "t")
    Traceback (most recent call last):
    ...
    jaxfeed._base.files.UnsafePathError: t: column 'i', row 0: image path '../x.png' points outside ...
    """
    columns = {}
    for name, feature in features.items():
        if name not in table.column_names:
            continue
        if isinstance(feature, MediaFeature):
            column = table.column(name)
            fixed = [_confine_cells(c, root, source, name, feature, s) for c, s in _chunks(column)]
            if any(f is not c for f, c in zip(fixed, column.chunks, strict=True)):
                columns[name] = pa.chunked_array(fixed, type=column.type)
        elif holds_media(feature):
            start = 0
            for chunk in table.column(name).chunks:
                _check_nested(feature, chunk, root, source, name, start)
                start += len(chunk)
    for name, column in columns.items():
        table = table.set_column(table.column_names.index(name), name, column)
    return table


def _chunks(column: pa.ChunkedArray) -> list[tuple[pa.Array, int]]:
    out, start = [], 0
    for chunk in column.chunks:
        out.append((chunk, start))
        start += len(chunk)
    return out


def holds_media(feature: Any) -> bool:
    """Whether ``feature`` is, or holds, an Image or Audio feature."""
    if isinstance(feature, MediaFeature):
        return True
    if isinstance(feature, Mapping):
        return any(holds_media(f) for f in feature.values())
    if isinstance(feature, Sequence | list):
        inner = feature.feature if isinstance(feature, Sequence) else feature[0]
        return holds_media(inner)
    return False


def _check_nested(feature: Any, array: pa.Array, root: Any, source: str, column: str, row: int):
    """Media inside lists or structs: checked, never rewritten (a relative path there is refused)."""
    array = unwrap_storage(array)
    if isinstance(feature, MediaFeature):
        _confine_cells(array, root, source, column, feature, row, rewrite=False)
    elif isinstance(feature, Mapping) and pa.types.is_struct(array.type):
        for key, sub in feature.items():
            if array.type.get_field_index(key) >= 0:
                _check_nested(sub, array.field(key), root, source, f"{column}.{key}", row)
    elif isinstance(feature, Sequence | list) and (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or pa.types.is_fixed_size_list(array.type)
    ):
        inner = feature.feature if isinstance(feature, Sequence) else feature[0]
        if isinstance(inner, Mapping) and pa.types.is_struct(array.type):
            return
        _check_nested(inner, array.flatten(), root, source, column, row)


def _confine_cells(
    array: pa.Array,
    root: Any,
    source: str,
    column: str,
    feature: Any,
    start: int,
    rewrite: bool = True,
) -> pa.Array:
    storage = unwrap_storage(array)
    if not pa.types.is_struct(storage.type) or storage.type.get_field_index("path") < 0:
        return array
    paths = storage.field("path")
    if storage.type.get_field_index("bytes") >= 0:
        only_path = pc.and_(pc.is_null(storage.field("bytes")), pc.is_valid(paths))
    else:
        only_path = pc.is_valid(paths)
    only_path = pc.and_(only_path, storage.is_valid())
    if not pc.any(only_path).as_py():
        return array
    what = "audio path" if type(feature).__name__ == "Audio" else "image path"
    rows = np.flatnonzero(only_path.to_numpy(zero_copy_only=False))
    values = paths.to_pylist()
    real_root = None if root is None else os.path.realpath(root)
    resolved: dict[str, str] = {}
    for i in rows.tolist():
        text = values[i]
        if text in resolved:
            values[i] = resolved[text]
            continue
        where = f"{source}: column {column!r}, row {start + i}: {what} {short(text, 120)}"
        if root is None:
            raise UnsafePathError(
                f"{where} is read from a file with no local folder to resolve it in; pass "
                "data_dir= (a folder you trust) to read such paths"
            )
        if "\x00" in text or "://" in text or text.startswith("~"):
            raise UnsafePathError(f"{where} is not a local path inside {root}")
        if not os.path.isabs(text) and not rewrite:
            raise UnsafePathError(
                f"{where} is relative inside a list or struct; only top-level columns' "
                "relative paths are resolved"
            )
        lexical = os.path.normpath(os.path.join(os.path.abspath(root), text))
        real = os.path.realpath(lexical)
        inside_lexical = _inside(lexical, os.path.abspath(root)) or _inside(lexical, real_root)
        if not (inside_lexical and _inside(real, real_root)):
            raise UnsafePathError(
                f"{where} points outside {root} (to {short(real, 120)}); only files inside the "
                "dataset's folder, or a data_dir= you give, are read"
            )
        resolved[text] = values[i] = lexical
    if not rewrite or all(
        values[i] == p for i, p in zip(rows.tolist(), paths.take(rows).to_pylist(), strict=True)
    ):
        return array
    new_paths = pa.array(values, type=paths.type)
    fields = [
        storage.field(k) if k != "path" else new_paths for k in (f.name for f in storage.type)
    ]
    rebuilt = pa.StructArray.from_arrays(
        fields, fields=list(storage.type), mask=pc.invert(storage.is_valid())
    )
    return (
        rebuilt
        if rebuilt.type == array.type
        else pa.ExtensionArray.from_storage(array.type, rebuilt)
    )


def _inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it, compared by path components (``/d/ds-evil`` is not in
    ``/d/ds``)."""
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:
        return False


def media_root(files: Any, data_dir: str | os.PathLike | None = None) -> str | None:
    """The folder whose files a dataset's path-only Image/Audio cells may name: ``data_dir`` when
    given, else the deepest folder holding every local data file (None for remote files).

    >>> media_root(["/d/ds/data/a.parquet", "/d/ds/b.parquet"])
    '/d/ds'
    """
    if data_dir is not None:
        return os.path.abspath(data_dir)
    paths = [str(f) for f in files]
    if not paths or any("://" in p for p in paths):
        return None
    return os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
