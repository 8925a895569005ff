"""Datasets to and from CSV, JSON and Parquet files, as `datasets`' ``to_*`` / ``from_*`` do.

Writers go batch by batch through pandas (CSV, JSON Lines) or Arrow (Parquet) with the options
`datasets` uses (no index column, a header on the first batch, JSON records one per line) and
return the number of bytes written. A path is written through a temporary file and a rename, so a
crash never leaves half a file; a file object is written in place. Readers keep the features
stored in a Parquet file's schema metadata (the `datasets` layout).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.json as pjson
import pyarrow.parquet as pq

from jaxfeed._base.extras import require
from jaxfeed._base.files import temporary_file
from jaxfeed._base.settings import progress
from jaxfeed.data.core import DEFAULT_BATCH_SIZE, arrow_batches, json_columns
from jaxfeed.data.core import DatasetCore as Dataset  # any dataset
from jaxfeed.data.features import Features
from jaxfeed.data.formats.files import read_in_blocks


def _to_pandas(table: pa.Table, json_columns: Sequence[str] = ()) -> Any:
    require("pandas", "pandas", "writing CSV or JSON")
    df = table.to_pandas(integer_object_nulls=True)
    for name in json_columns:
        df[name] = [None if v is None else json.loads(v) for v in table.column(name).to_pylist()]
    return df


def _write(path_or_buf: str | os.PathLike | BinaryIO, chunks: Iterator[bytes]) -> int:
    if hasattr(path_or_buf, "write"):
        return sum(path_or_buf.write(chunk) for chunk in chunks)
    path = Path(path_or_buf)
    tmp = temporary_file(path)
    written = 0
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                written += f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return written


def to_csv(
    ds: Dataset,
    path_or_buf: str | os.PathLike | BinaryIO,
    batch_size: int | None = None,
    encoding: str = "utf-8",
    **to_csv_kwargs: Any,
) -> int:
    header = to_csv_kwargs.pop("header", True)
    index = to_csv_kwargs.pop("index", False)
    json_names = json_columns(ds)

    def chunks() -> Iterator[bytes]:
        with progress(ds.num_rows, "Creating CSV from Arrow format") as bar:
            for i, table in enumerate(arrow_batches(ds, batch_size)):
                text = _to_pandas(table, json_names).to_csv(
                    path_or_buf=None,
                    header=header if i == 0 else False,
                    index=index,
                    **to_csv_kwargs,
                )
                bar.update(table.num_rows)
                yield text.encode(encoding)

    return _write(path_or_buf, chunks())


def to_json(
    ds: Dataset,
    path_or_buf: str | os.PathLike | BinaryIO,
    batch_size: int | None = None,
    encoding: str = "utf-8",
    **to_json_kwargs: Any,
) -> int:
    orient = to_json_kwargs.pop("orient", "records")
    lines = to_json_kwargs.pop("lines", orient == "records")
    if "index" not in to_json_kwargs and orient in ("split", "table"):
        to_json_kwargs["index"] = False
    size = batch_size or DEFAULT_BATCH_SIZE
    if not lines and size < ds.num_rows:
        raise ValueError(
            "to_json: lines=False needs the whole dataset in one batch; pass "
            f"batch_size >= {ds.num_rows} or keep lines=True"
        )
    json_names = json_columns(ds)

    def chunks() -> Iterator[bytes]:
        tables = list(arrow_batches(ds, size)) or [ds._internal.arrow().slice(0, 0)]
        with progress(ds.num_rows, "Creating json from Arrow format") as bar:
            for table in tables:
                text = _to_pandas(table, json_names).to_json(
                    path_or_buf=None, orient=orient, lines=lines, **to_json_kwargs
                )
                if not text.endswith("\n"):
                    text += "\n"
                bar.update(table.num_rows)
                yield text.encode(encoding)

    return _write(path_or_buf, chunks())


def to_parquet(
    ds: Dataset,
    path_or_buf: str | os.PathLike | BinaryIO,
    batch_size: int | None = None,
    **parquet_writer_kwargs: Any,
) -> int:
    schema = ds.features.arrow_schema
    sink = io.BytesIO()
    with (
        pq.ParquetWriter(sink, schema=schema, **parquet_writer_kwargs) as writer,
        progress(ds.num_rows, "Creating parquet from Arrow format") as bar,
    ):
        for table in arrow_batches(ds, batch_size):
            writer.write_table(table.cast(schema))
            bar.update(table.num_rows)
    data = sink.getvalue()
    return _write(path_or_buf, iter([data]))


def paths(path_or_paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The given file(s) as paths; ``FileNotFoundError`` names a missing one."""
    if isinstance(path_or_paths, str | os.PathLike):
        path_or_paths = [path_or_paths]
    paths = [Path(p) for p in path_or_paths]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"no such file: {p}")
    return paths


def read_parquet(
    path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
    columns: Sequence[str] | None = None,
) -> pa.Table:
    tables = []
    for path in paths(path_or_paths):
        try:
            tables.append(pq.read_table(path, columns=columns, memory_map=True))
        except (pa.ArrowInvalid, OSError) as err:
            raise ValueError(f"cannot read Parquet file {path}: {err}") from None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def read_csv(
    path_or_paths: str | os.PathLike | Sequence[str | os.PathLike], **read_csv_kwargs: Any
) -> pa.Table:
    """CSV through ``pandas.read_csv``, as `datasets` reads it (same type inference)."""
    pd = require("pandas", "pandas", "Dataset.from_csv")  # lazy: pandas costs ~0.3 s to import

    tables = []
    for path in paths(path_or_paths):
        try:
            df = pd.read_csv(path, **read_csv_kwargs)
        except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as err:
            raise ValueError(f"cannot read CSV file {path}: {err}") from None
        tables.append(pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None))
    # pandas >= 3 reads text as large_string, and `datasets` keeps that type: so does jaxfeed.
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


def in_arrow_memory(table: pa.Table) -> pa.Table:
    """``table`` copied into buffers of Arrow's memory pool (one IPC round trip), as `datasets`
    holds a ``keep_in_memory=True`` dataset: ``pyarrow.total_allocated_bytes()`` counts it.

    >>> import pyarrow as pa
    >>> in_arrow_memory(pa.table({"x": [1, 2]}))["x"].to_pylist()
    [1, 2]
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


def _small_strings(table: pa.Table) -> pa.Table:
    """pandas >= 3 gives large_string columns; `datasets` stores string."""
    schema = pa.schema(
        [f.with_type(pa.string()) if pa.types.is_large_string(f.type) else f for f in table.schema]
    )
    return table.cast(schema)


def read_json(
    path_or_paths: str | os.PathLike | Sequence[str | os.PathLike], field: str | None = None
) -> pa.Table:
    """JSON Lines, or one JSON document (a list of rows, a dict of columns, or ``field`` of it)."""
    tables = []
    for path in paths(path_or_paths):
        table = None
        if field is None:
            try:
                table = read_in_blocks(
                    lambda block, path=path: pjson.read_json(
                        path, read_options=pjson.ReadOptions(block_size=block)
                    ),
                    path,
                    "json",
                )
            except pa.ArrowInvalid:
                table = None
        if table is None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError) as err:
                raise ValueError(f"cannot read JSON file {path}: {err}") from None
            if field is not None:
                if not isinstance(data, dict) or field not in data:
                    raise ValueError(f"JSON file {path} has no top-level field {field!r}")
                data = data[field]
            if isinstance(data, list):
                table = pa.Table.from_pylist(data)
            elif isinstance(data, dict):
                table = pa.Table.from_pydict(data)
            else:
                raise ValueError(
                    f"JSON file {path} holds a {type(data).__name__}; expected rows (a list of "
                    "objects, or one object per line) or a dict of columns"
                )
        tables.append(table)
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    return _small_strings(table)


def with_features(table: pa.Table, features: Features | None) -> tuple[pa.Table, Features | None]:
    """Apply given features by name (columns reordered to the table's)."""
    if features is None:
        return table, None
    features = Features(features)
    return table, Features({k: features[k] for k in table.column_names if k in features})
