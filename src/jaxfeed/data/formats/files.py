"""Read Parquet, CSV, JSON / JSON Lines, Arrow and text files into Arrow tables.

Parquet and Arrow files are memory-mapped; features stored in the schema metadata (as `datasets`
writes them, e.g. ``Image`` and ``ClassLabel`` of a Hub dataset) are kept.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from jaxfeed._base import remote
from jaxfeed._base.files import file_sha256
from jaxfeed.data.features import Features
from jaxfeed.data.features.features import METADATA_KEY
from jaxfeed.data.formats.text import is_text_format, read_text
from jaxfeed.data.formats.validate import (
    MAX_JSON_DEPTH,
    check_arrow_data,
    check_json_depth,
    check_table,
)

FORMATS = {
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".txt": "text",  # one row per line (load_dataset("text", sample_by=...) chooses otherwise)
}
# Arrow reads CSV and JSON Lines in blocks, and a row must fit in one: a row larger than the
# block is read again with a block 4x larger, up to this (Arrow's own limit is 2 GiB).
MAX_BLOCK_BYTES = 1 << 30
_T = TypeVar("_T")


def straddles(err: BaseException) -> bool:
    """Whether Arrow's CSV or JSON reader failed on a row larger than its block."""
    return isinstance(err, pa.ArrowInvalid) and "straddl" in str(err)


class RowTooLargeError(ValueError):
    """A CSV or JSON Lines row larger than ``MAX_BLOCK_BYTES`` (the message names the file)."""


def row_too_large(path: str | Path, fmt: str, after_row: int | None = None) -> RowTooLargeError:
    """The error for a row larger than ``MAX_BLOCK_BYTES``: names the file and, for a local
    file, the line where it is."""
    where = f"a row after row {after_row}" if after_row is not None else "a row"
    if not remote.is_remote(str(path)):
        line, size = _longest_line(Path(path))
        if size > MAX_BLOCK_BYTES:
            where = f"line {line} ({size / 1e6:,.0f} MB)"
    return RowTooLargeError(
        f"cannot read {fmt} file {path}: {where} is larger than {MAX_BLOCK_BYTES >> 20} MB, the "
        f"most one {fmt.upper()} row may hold; split that cell, or store it in a Parquet file"
    )


def _longest_line(path: Path, chunk: int = 1 << 20) -> tuple[int, int]:
    """The longest line of ``path`` (1-based) and its length in bytes, read in chunks."""
    line, size, best = 1, 0, (1, 0)
    try:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                start = 0
                while (end := block.find(b"\n", start)) != -1:
                    size += end - start
                    best = max(best, (line, size), key=lambda b: b[1])
                    line, size, start = line + 1, 0, end + 1
                size += len(block) - start
    except OSError:
        pass
    return max(best, (line, size), key=lambda b: b[1])


def read_in_blocks(
    read: Callable[[int], _T], path: str | Path, fmt: str, block: int = 1 << 20
) -> _T:
    """``read(block_size)`` of a whole CSV or JSON Lines file, again with a block 4x larger while
    a row is larger than the block; a row over ``MAX_BLOCK_BYTES`` is named
    (:func:`row_too_large`)."""
    while True:
        try:
            return read(block)
        except pa.ArrowInvalid as err:
            if not straddles(err):
                raise
            if block >= MAX_BLOCK_BYTES:
                raise row_too_large(path, fmt) from None
            block = min(4 * block, MAX_BLOCK_BYTES)


def file_format(path: str | Path) -> str | None:
    """The reader for a file name: parquet, csv, json or arrow (None when unknown)."""
    name = str(path).lower()
    for suffix in (".gz", ".bz2", ".zst", ".lz4"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return FORMATS.get(Path(name).suffix)


def read_table(path: str | Path, fmt: str | None = None) -> pa.Table:
    """One file as an Arrow table; raises ``ValueError`` naming the file when it cannot be read,
    and :class:`~jaxfeed.data.formats.validate.FeatureMismatchError` when features stored in its metadata
    contradict its data."""
    table = _read_table(Path(path), fmt)
    check_nesting(table.schema, path)
    names = table.column_names
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"{path}: column {dup!r} appears {names.count(dup)} times")
    check_stored_features(table, str(path))
    return table


def check_batch(batch: pa.RecordBatch, path: str, fmt: str | None) -> pa.RecordBatch:
    """The checks :func:`read_table` makes, for one record batch of ``path`` read batch by batch
    (the out-of-core cache and streaming): unique column names, valid buffers and UTF-8, text CSV
    columns, features in the metadata that fit the data. Returns ``batch``."""
    try:
        names = batch.schema.names
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: a column name is not valid UTF-8 ({err.reason})") from None
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"{path}: column {dup!r} appears {names.count(dup)} times")
    check_nesting(batch.schema, path)
    table = pa.Table.from_batches([batch])
    check_arrow_data(table, path)
    if fmt == "csv":
        for field in batch.schema:
            if pa.types.is_binary(field.type):  # Arrow's reader falls back on bytes
                raise ValueError(f"{path}: column {field.name!r} is not valid UTF-8 text")
    check_stored_features(table, path)
    return batch


def check_nesting(schema: pa.Schema, path: str | Path) -> None:
    """Refuse a column nesting more than ``MAX_JSON_DEPTH`` lists or structs (a JSON value
    spread over many lines), naming it, before anything recurses into its type."""
    for field in schema:
        if _nesting(field.type) > MAX_JSON_DEPTH:
            raise ValueError(
                f"{path}: column {field.name!r} nests more than {MAX_JSON_DEPTH} levels deep"
            )


def _nesting(dtype: pa.DataType) -> int:
    """How many levels of lists and structs ``dtype`` nests (counted without recursion)."""
    deepest, todo = 0, [(dtype, 0)]
    while todo:
        t, depth = todo.pop()
        deepest = max(deepest, depth)
        todo.extend((t.field(i).type, depth + 1) for i in range(t.num_fields))
    return deepest


def check_stored_features(table: pa.Table, source: str) -> None:
    """Check the features stored in ``table``'s schema metadata (as `datasets` writes them in
    Parquet and Arrow files) against its data; ``source`` names the file in errors."""
    meta = table.schema.metadata or {}
    if METADATA_KEY not in meta:
        return
    try:
        features = Features.from_arrow_schema(table.schema)
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(
            f"{source}: the features stored in its metadata are invalid: {err}"
        ) from None
    check_table(table, features, source)


def _read_table(path: Path, fmt: str | None) -> pa.Table:
    fmt = fmt or file_format(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such data file: {path}")
    try:
        if fmt == "parquet":
            return pq.read_table(path, memory_map=True)
        if fmt == "csv":
            delimiter = "\t" if ".tsv" in path.name.lower() else ","
            table = read_in_blocks(
                lambda block: pcsv.read_csv(
                    path,
                    read_options=pcsv.ReadOptions(block_size=block),
                    parse_options=pcsv.ParseOptions(delimiter=delimiter),
                ),
                path,
                "csv",
            )
            check_arrow_data(table, str(path))
            for name, field in zip(table.column_names, table.schema, strict=True):
                if pa.types.is_binary(field.type):  # Arrow's reader falls back on bytes
                    raise ValueError(f"column {name!r} is not valid UTF-8 text")
            return table
        if fmt == "json":
            return _read_json(path)
        if is_text_format(fmt):
            with pa.input_stream(str(path), compression="detect") as stream:
                rows = [row for chunk in read_text(stream, str(path), fmt) for row in chunk]
            return pa.table({"text": pa.array(rows, pa.string())})
        if fmt == "arrow":
            source = pa.memory_map(str(path))
            try:
                table = pa.ipc.open_file(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                table = pa.ipc.open_stream(source).read_all()
            check_arrow_data(table, str(path))
            return table
    except (pa.ArrowException, OSError, ValueError, RecursionError) as err:
        if isinstance(err, FileNotFoundError | RowTooLargeError):
            raise
        raise ValueError(f"cannot read {fmt} file {path}: {err}") from err
    raise ValueError(
        f"cannot tell the format of {path}; expected one of {sorted(set(FORMATS))} (or pass the format "
        "as load_dataset's path, e.g. load_dataset('csv', data_files=...))"
    )


def _read_json(path: Path) -> pa.Table:
    with open(path, "rb") as f:
        head = f.read(1024).lstrip()
    if head.startswith(b"["):  # one JSON array of objects
        return pa.Table.from_pylist(json.loads(path.read_text()))
    if head.startswith(b"{") and path.suffix.lower() == ".json":
        data = json.loads(path.read_text()) if _single_object(path) else None
        if isinstance(data, dict):
            field = next((k for k, v in data.items() if isinstance(v, list)), None)
            if field is not None and all(isinstance(v, list) for v in data.values()):
                return pa.table(data)  # {"col": [...], ...}
    check_json_depth(path.read_bytes(), str(path))  # before Arrow's parser recurses into it
    table = read_in_blocks(
        lambda block: pjson.read_json(path, read_options=pjson.ReadOptions(block_size=block)),
        path,
        "json",
    )
    check_arrow_data(table, str(path))  # Arrow's JSON reader lets invalid UTF-8 into strings
    return table


def _single_object(path: Path) -> bool:
    try:
        json.loads(path.read_text())
        return True
    except (ValueError, RecursionError):
        return False  # JSON Lines (or too deep for one document: the depth check names it)


def read_tables(paths: Sequence[str | Path], fmt: str | None = None) -> pa.Table:
    """Several files of one split, concatenated (schemas must agree)."""
    tables = [read_table(p, fmt) for p in paths]
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    for path, table in zip(paths[1:], tables[1:], strict=True):
        if not table.schema.equals(first, check_metadata=False):
            raise ValueError(f"{path} has schema {table.schema} but {paths[0]} has {first}")
    return pa.concat_tables([t.replace_schema_metadata(first.metadata) for t in tables])


def source_identity(
    path: str, storage_options: dict | None = None, content: bool = False
) -> dict[str, Any]:
    """Path, size and modification time (or ETag) of one source file; with ``content`` the
    SHA-256 of a local file's bytes instead of its modification time."""
    if remote.is_remote(path):
        return remote.identity(path, storage_options)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such data file: {path}") from None
    version: Any = "sha256:" + file_sha256(path) if content else st.st_mtime_ns
    return {"path": os.path.realpath(path), "size": st.st_size, "version": version}
