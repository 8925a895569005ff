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
are saved with the file's bytes, as `datasets` does, so the folder is self-contained.

Reading (``load_from_disk``) reads only files inside the folder; features are checked against the
data; the sizes recorded at save time are checked, and with ``verify=True`` the SHA-256 of every
file too. This module sits below ``dataset.py``: it writes through a dataset's internal interface
and reads folders into tables (:func:`read_split`), which ``jaxfeed.data.dataset.load_from_disk`` wraps.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from jaxfeed._base import remote
from jaxfeed._base.files import (
    ChecksumError,
    LockedTemporary,
    UnsafePathError,
    check_inside,
    file_sha256,
    fsync_folder,
    remove_abandoned,
    remove_set_aside,
    resolve_inside,
    swap_in_progress,
    swap_into_place,
)
from jaxfeed._base.settings import progress
from jaxfeed.data.core import conform_table
from jaxfeed.data.features import Features
from jaxfeed.data.features.base import unwrap_storage
from jaxfeed.data.features.media import MediaFeature, embed_files
from jaxfeed.data.formats.cache import fetch_folder
from jaxfeed.data.formats.validate import (
    FeatureMismatchError,
    check_arrow_data,
    check_json_depth,
    check_table,
    confine_media_paths,
    holds_media,
    short,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from jaxfeed.data.core import DatasetCore as Dataset  # any dataset

    DatasetDict = Mapping[str, Dataset]

CHUNK_BYTES = 256 << 20  # record batches of about this size: few chunks, fast gathers


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
    if path.exists() and (
        not path.is_dir() or (any(path.iterdir()) and not _is_dataset_folder(path))
    ):
        shutil.rmtree(tmp, ignore_errors=True)
        raise FileExistsError(f"{path} exists and is not a saved dataset: refusing to overwrite it")
    swap_into_place(tmp, path)  # the old one set aside as .NAME.old-KEY, KEY that of tmp
    fsync_folder(path.parent)


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
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path.parent, f".{path.name}.tmp-")  # left by a crashed save, never a live one
    with LockedTemporary(path, "dataset being saved") as writing:
        write(writing.path)
        writing.publish(move=_replace)
    remove_set_aside(path)  # left by a save killed between its two renames, never a live one's


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


# Reading: the folders written above (or by `datasets`), as tables. ``load_from_disk`` (in
# jaxfeed.data.dataset) wraps each split as a Dataset and gives it back its state (restore_state).
# Only files inside the folder are read; features are checked against the data; the sizes
# recorded at save time are checked, and with ``verify=True`` the SHA-256 of every file too.


class SavedSplit(NamedTuple):
    """One saved dataset read back: its table (memory-mapped unless ``cache_dir`` is None) and
    features, and the state ``state.json`` records for it."""

    table: pa.Table
    features: Features
    cache_dir: Path | None  # the folder whose files ``table`` maps (None: read into memory)
    cache_files: list[str]  # those files' names inside it
    state: dict  # state.json
    state_file: Path


def open_saved(path: str | os.PathLike, storage_options: dict | None = None) -> tuple[Path, bool]:
    """The local folder of a saved dataset (a URL is copied once into the cache) and whether it
    holds a DatasetDict (``dataset_dict.json``) rather than a Dataset (``state.json``)."""
    if remote.is_remote(path):
        path = fetch_folder(str(path), storage_options)
    path = Path(path)
    _recover(path)
    if (path / "dataset_dict.json").is_file():
        return path, True
    if not (path / "state.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a saved dataset: expected state.json (a Dataset) or dataset_dict.json "
            "(a DatasetDict), as written by save_to_disk"
        )
    return path, False


def read_splits(
    path: Path, keep_in_memory: bool, verify: bool, data_dir: str | os.PathLike | None = None
) -> Iterator[tuple[str, SavedSplit]]:
    """The splits of the DatasetDict saved at ``path``, read one after the other (each split's
    folder is checked when its turn comes)."""
    splits = _read_json(path / "dataset_dict.json", "the list of splits").get("splits")
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise ValueError(
            f"{path / 'dataset_dict.json'}: field 'splits' must be a list of split names, "
            f"got {short(splits)}"
        )
    seen: set[str] = set()
    for name in splits:
        folder = _split_folder(path, name)
        if not (folder / "state.json").is_file():
            raise FileNotFoundError(
                f"{path / 'dataset_dict.json'}: split {name!r} has no saved dataset "
                f"(state.json) in {folder}"
            )
        if name in seen:
            raise ValueError(f"{path / 'dataset_dict.json'}: split {short(name)} is listed twice")
        seen.add(name)
        yield name, read_split(folder, keep_in_memory, verify, data_dir)


RECOVER_WAIT_SECONDS = 10.0  # how long a reader waits for a live save between its two renames


def _recover(path: Path) -> None:
    """Finish a save that crashed between its two renames (the old folder is still beside it).
    A live save between them (its temporary folder still locked) is left to finish: the reader
    waits up to ``RECOVER_WAIT_SECONDS`` for it, never moving the old folder back under it."""
    deadline = time.monotonic() + RECOVER_WAIT_SECONDS
    while not path.exists():
        olds = [(_mtime(p), p) for p in path.parent.glob(f".{glob.escape(path.name)}.old-*")]
        olds = sorted((t, p) for t, p in olds if t is not None)
        if not olds:
            return
        if not any(swap_in_progress(p) for _, p in olds):
            try:
                os.replace(olds[-1][1], path)
            except OSError:  # another reader restored it first, or its writer finished
                if not path.exists():
                    raise
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None  # gone meanwhile (its writer finished and removed it)


def _read_arrow(file: Path, keep_in_memory: bool) -> pa.Table:
    source = pa.memory_map(str(file)) if not keep_in_memory else pa.OSFile(str(file))
    try:
        try:
            table = pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            table = pa.ipc.open_file(source).read_all()
        check_arrow_data(table, str(file))
        return table
    except (pa.ArrowException, OSError, ValueError) as err:
        raise ValueError(f"cannot read the Arrow data file {file}: {err}") from err


def _read_json(file: Path, what: str) -> dict:
    if file.exists():
        check_inside(file.parent, file, what)
    try:
        raw = file.read_bytes()
        check_json_depth(raw, f"{file} ({what})")
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"saved dataset {file.parent} has no {file.name} ({what})"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{file} ({what}) is not valid JSON: {str(err)[:200]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file} ({what}) must hold a JSON object, got {type(data).__name__}")
    return data


def _split_folder(path: Path, name: str) -> Path:
    """The folder of split ``name``: one plain folder name directly inside ``path``."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or name != name.strip("\x00"):
        raise UnsafePathError(
            f"{path / 'dataset_dict.json'}: split {name!r} is not a plain folder name inside {path}"
        )
    return resolve_inside(path, name, f"split {name!r} of {path / 'dataset_dict.json'}")


def read_split(
    path: Path, keep_in_memory: bool, verify: bool, data_dir: str | os.PathLike | None = None
) -> SavedSplit:
    """The Dataset saved in the folder ``path``, checked and read (memory-mapped unless
    ``keep_in_memory``); :func:`restore_state` gives the dataset made of it its saved state."""
    state = _read_json(path / "state.json", "the saved dataset's state")
    state_file = path / "state.json"
    entries = state.get("_data_files")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{state_file}: field '_data_files' must be a non-empty list")
    files: list[Path] = []
    for entry in entries:
        if not isinstance(entry, dict) or "filename" not in entry:
            raise ValueError(
                f"{state_file}: a '_data_files' entry needs a 'filename', got {short(entry)}"
            )
        file = resolve_inside(path, entry["filename"], f"data file of {state_file}")
        if file in files:  # the same rows twice or more: refused, verify or not
            raise ValueError(
                f"{state_file}: field '_data_files' lists {short(entry['filename'])} more than once"
            )
        files.append(file)
    _check_state_fields(state, state_file)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"saved dataset {path} is missing its data files {missing}")
    _check_files(path, state, [f.name for f in files], verify)
    info = _read_json(path / "dataset_info.json", "the saved dataset's features")
    if info.get("features") is not None and not isinstance(info["features"], dict):
        raise ValueError(
            f"{path / 'dataset_info.json'}: field 'features' must be an object of columns, got "
            f"{short(info['features'])}"
        )
    tables = [_read_arrow(f, keep_in_memory) for f in files]
    try:
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as err:
        raise ValueError(f"saved dataset {path}: its data files do not agree: {err}") from err
    source = str(path / "dataset_info.json")
    try:
        features = Features.from_dict(info["features"]) if info.get("features") else None
        if features is not None and set(features) == set(table.column_names):
            features = Features({c: features[c] for c in table.column_names})  # the table's order
        if features is None:  # as Dataset(table, features) reads them
            features = Features.from_arrow_schema(table.schema)
        else:
            table = conform_table(table, features)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
        if isinstance(err, FeatureMismatchError):
            raise
        raise FeatureMismatchError(
            source, "*", None, f"field 'features' does not fit the data: {str(err)[:300]}"
        ) from None
    check_table(table, features, source)
    if any(holds_media(f) for f in features.values()):
        root = os.path.abspath(data_dir if data_dir is not None else path)
        confined = confine_media_paths(table, features, root, str(files[0]))
        if confined is not table:  # relative paths made absolute: no longer the files' table
            table, keep_in_memory = conform_table(confined, features), True
    return SavedSplit(
        table,
        features,
        None if keep_in_memory else path,  # ds.cache_files, as `datasets`
        [] if keep_in_memory else [f.name for f in files],
        state,
        state_file,
    )


def restore_state(ds: Dataset, saved: SavedSplit) -> Dataset:
    """Give ``ds``, a dataset just made of ``saved``'s table and features, the rest of what was
    saved: the files it maps, its split and its output format."""
    path, state = saved.state_file.parent, saved.state
    if saved.cache_dir is not None:
        ds._internal.set_cache(saved.cache_dir, saved.cache_files)
    split = state.get("_split")
    if split is not None and not isinstance(split, str):
        raise ValueError(f"{path / 'state.json'}: '_split' must be a string or null, got {split!r}")
    ds._internal.set_split(split)
    fmt_type = state.get("_format_type")
    if fmt_type is not None or state.get("_format_columns") is not None:
        kwargs = {k: v for k, v in (state.get("_format_kwargs") or {}).items() if v is not None}
        try:
            ds.set_format(
                fmt_type,
                state.get("_format_columns"),
                state.get("_output_all_columns", False),
                **kwargs,
            )
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise ValueError(
                f"{path / 'state.json'}: bad format settings: {str(err)[:300]}"
            ) from None
    return ds


_STATE_TYPES = {
    "_format_type": (str, type(None)),
    "_format_columns": (list, type(None)),
    "_format_kwargs": (dict, type(None)),
    "_output_all_columns": (bool, type(None)),
    "_fingerprint": (str, type(None)),
    "_split": (str, type(None)),
}


def _check_state_fields(state: dict, state_file: Path) -> None:
    """The types of ``state.json``'s fields (a hostile file gets an error naming the field)."""
    for field, types in _STATE_TYPES.items():
        if field in state and not isinstance(state[field], types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ValueError(
                f"{state_file}: field {field!r} must be {names}, got {short(state[field])}"
            )
    columns = state.get("_format_columns")
    if columns is not None and not all(isinstance(c, str) for c in columns):
        raise ValueError(
            f"{state_file}: field '_format_columns' must list column names, got {short(columns)}"
        )


def _check_files(path: Path, state: dict, names: list[str], verify: bool) -> None:
    """Sizes recorded at save time always; SHA-256 of every file too when ``verify``."""
    recorded = state.get(CHECKSUMS)
    if recorded is None:
        if verify:
            raise ChecksumError(
                f"saved dataset {path} has no checksums (saved by `datasets` or an older jaxfeed): "
                "cannot verify it; save it again with jaxfeed to record them"
            )
        return
    if not isinstance(recorded, dict):
        raise ValueError(f"{path / 'state.json'}: {CHECKSUMS!r} must be an object")
    if verify and state.get(STATE_SHA) != state_digest(state):
        raise ChecksumError(
            f"{path / 'state.json'} differs from what was saved (checksum mismatch)"
        )
    for name in [*names, "dataset_info.json"] if verify else names:
        expected = recorded.get(name)
        if not isinstance(expected, dict):
            if verify:
                raise ChecksumError(f"saved dataset {path}: no checksum recorded for {name}")
            continue
        file = path / name
        size = file.stat().st_size if file.is_file() else None
        if size != expected.get("bytes"):
            raise ChecksumError(
                f"{file} has {size} bytes but {expected.get('bytes')} were saved: "
                "the file is truncated or was changed"
            )
        if verify and file_sha256(file) != expected.get("sha256"):
            raise ChecksumError(f"{file} differs from what was saved (SHA-256 mismatch)")
