"""The folder format of ``save_to_disk``: Arrow IPC files plus JSON, written atomically.

The layout is the one `datasets` uses, so either library reads the other's folders::

    path/data-00000-of-00001.arrow   Arrow IPC stream
    path/dataset_info.json           {"features": {...}, ...}
    path/state.json                  {"_data_files": [...], "_format_type": ..., ...}

A ``DatasetDict`` is a folder with ``dataset_dict.json`` ({"splits": [...]}) and one such folder
per split. Saving writes a hidden sibling folder and renames it into place, so a crash mid-save
leaves the previous dataset (or nothing) at ``path``, never a half-written one. ``state.json``
also records each file's size and SHA-256 (and its own), which ``load_from_disk(verify=True)``
checks; `datasets` ignores these keys. Image and Audio cells stored as a path (an imagefolder's)
are saved with the file's bytes, as `datasets` does, so the folder is self-contained. This module sits
below ``dataset.py`` (it only uses a dataset's internal interface); ``io.disk`` reads the folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jaxfeed import remote
from jaxfeed.features.base import unwrap_storage
from jaxfeed.features.media import MediaFeature, embed_files
from jaxfeed.files import file_sha256
from jaxfeed.settings import progress

if TYPE_CHECKING:
    from collections.abc import Mapping

    from jaxfeed.core import DatasetCore as Dataset  # any dataset

    DatasetDict = Mapping[str, Dataset]

CHUNK_BYTES = 256 << 20  # record batches of about this size: few chunks, fast gathers


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json(path: Path, payload: Any) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _shard_count(table: pa.Table, num_shards: int | None, max_shard_size: Any) -> int:
    if num_shards is not None:
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        return min(num_shards, max(table.num_rows, 1)) if table.num_rows else 1
    if max_shard_size is None:
        return 1
    limit = _size_in_bytes(max_shard_size)
    return max(1, min(-(-table.nbytes // limit), max(table.num_rows, 1)))


def _size_in_bytes(size: Any) -> int:
    """``500MB`` / ``1GiB`` / an int, as `datasets` parses ``max_shard_size``."""
    if isinstance(size, int):
        return size
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KB": 10**3, "MB": 10**6}
    units |= {"GB": 10**9, "TB": 10**12, "B": 1}
    text = str(size).upper().strip()
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * units[unit])
    raise ValueError(f"cannot read the size {size!r}; use an int or e.g. '500MB'")


def _write_dataset(
    ds: Dataset, folder: Path, num_shards: int | None = None, max_shard_size: Any = None
) -> None:
    table = ds._internal.arrow()
    rows_per_chunk = None
    if table.num_rows and table.nbytes:
        rows_per_chunk = max(1, int(CHUNK_BYTES * table.num_rows // table.nbytes))
    schema = ds.features.arrow_schema
    embed = [  # media columns holding cells stored as a path only
        i
        for i, (name, feature) in enumerate(ds.features.items())
        if isinstance(feature, MediaFeature) and _has_path_only(table.column(name))
    ]
    shards = _shard_count(table, num_shards, max_shard_size)
    names = []
    with progress(table.num_rows, f"Saving the dataset ({shards} shards)") as bar:
        for i in range(shards):
            # Contiguous shards of near-equal size, as `datasets`' shard(contiguous=True) cuts them.
            div, mod = divmod(table.num_rows, shards)
            start = div * i + min(i, mod)
            part = table.slice(start, div + (1 if i < mod else 0))
            name = f"data-{i:05d}-of-{shards:05d}.arrow"
            names.append(name)
            with open(folder / name, "wb") as f:
                with pa.ipc.new_stream(f, schema) as writer:
                    part = part.cast(schema) if part.schema != schema else part
                    if embed:  # files read in a batch at a time: memory stays near one batch
                        for batch in part.to_batches(max_chunksize=EMBED_ROWS):
                            writer.write_batch(_embedded(batch, embed))
                    else:
                        writer.write_table(part, max_chunksize=rows_per_chunk)
                f.flush()
                os.fsync(f.fileno())
            bar.update(part.num_rows)
    _write_json(
        folder / "dataset_info.json",
        {"features": ds.features.to_dict(), "num_rows": table.num_rows},
    )
    state = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": uuid.uuid4().hex[:16],
        "_split": None if ds.split is None else str(ds.split),
        CHECKSUMS: {
            f: {"sha256": file_sha256(folder / f), "bytes": (folder / f).stat().st_size}
            for f in (*names, "dataset_info.json")
        },
        **ds._internal.format_state(),
    }
    state[STATE_SHA] = state_digest(state)
    _write_json(folder / "state.json", state)


EMBED_ROWS = 256  # rows whose media files are read in at a time when saving


def _has_path_only(column: pa.ChunkedArray) -> bool:
    for chunk in column.chunks:
        storage = unwrap_storage(chunk)
        if (
            pa.types.is_struct(storage.type)
            and storage.type.get_field_index("bytes") >= 0
            and storage.field("bytes").null_count > storage.null_count
        ):
            return True
    return False


def _embedded(batch: pa.RecordBatch, columns: list[int]) -> pa.RecordBatch:
    arrays = list(batch.columns)
    for i in columns:
        arrays[i] = embed_files(arrays[i])
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


# {file: {"sha256", "bytes"}} of the data files and dataset_info.json
CHECKSUMS = "_jaxfeed_checksums"
STATE_SHA = "_jaxfeed_state_sha256"  # of state.json's own content, this key left out


def state_digest(state: dict) -> str:
    """SHA-256 of ``state.json``'s content without its own checksum (canonical JSON)."""
    body = {k: v for k, v in state.items() if k != STATE_SHA}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _is_dataset_folder(path: Path) -> bool:
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _replace(tmp: Path, path: Path) -> None:
    """Move the finished folder ``tmp`` to ``path``, replacing a dataset saved there before."""
    if path.exists():
        if not path.is_dir() or (any(path.iterdir()) and not _is_dataset_folder(path)):
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(
                f"{path} exists and is not a saved dataset: refusing to overwrite it"
            )
        old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    _fsync_dir(path.parent)


def _tmp_folder(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a crashed save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp


def save_dataset(
    ds: Dataset,
    path: str | os.PathLike,
    num_shards: int | None = None,
    max_shard_size: Any = None,
    storage_options: dict | None = None,
) -> None:
    _save(
        lambda folder: _write_dataset(ds, folder, num_shards, max_shard_size), path, storage_options
    )


def save_dataset_dict(
    dsd: DatasetDict,
    path: str | os.PathLike,
    num_shards: dict[str, int] | None = None,
    max_shard_size: Any = None,
    storage_options: dict | None = None,
) -> None:
    _save(
        lambda folder: _write_dict(dsd, folder, num_shards, max_shard_size), path, storage_options
    )


def _save(
    write: Callable[[Path], None], path: str | os.PathLike, storage_options: dict | None
) -> None:
    """Write a folder with ``write``: atomically (a temporary sibling, then a rename) on a local
    disk, object by object (data first, JSON last) in object storage."""
    if remote.is_remote(path):
        _save_remote(write, str(path), storage_options)
        return
    path = Path(path)
    tmp = _tmp_folder(path)
    try:
        write(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace(tmp, path)


def _write_dict(
    dsd: DatasetDict,
    folder: Path,
    num_shards: dict[str, int] | None = None,
    max_shard_size: Any = None,
) -> None:
    for name, split in dsd.items():
        (folder / name).mkdir()
        _write_dataset(split, folder / name, (num_shards or {}).get(name), max_shard_size)
    _write_json(folder / "dataset_dict.json", {"splits": list(dsd)})


MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")  # uploaded last, in this order


def _save_remote(write: Any, url: str, storage_options: dict | None) -> None:
    """Write the folder locally, then upload it: data files first, the JSON that points at them
    last. Each object is replaced atomically, so a crash mid-upload leaves the previous save's
    ``state.json`` in place (object stores have no atomic folder rename)."""
    fs, inner = remote.writable_filesystem(url, storage_options)
    inner = inner.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="jaxfeed-save-") as tmp:
        local = Path(tmp)
        write(local)
        files = sorted(p for p in local.rglob("*") if p.is_file())
        order = {name: i for i, name in enumerate(MARKERS)}
        files.sort(key=lambda p: (p.name in order, order.get(p.name, -1), str(p)))
        for p in files:
            fs.put_file(str(p), f"{inner}/{p.relative_to(local).as_posix()}")
