"""save_to_disk / load_from_disk: Arrow IPC files plus JSON, written atomically, read memory-mapped.

The layout is the one `datasets` uses, so either library reads the other's folders::

    path/data-00000-of-00001.arrow   Arrow IPC stream
    path/dataset_info.json           {"features": {...}, ...}
    path/state.json                  {"_data_files": [...], "_format_type": ..., ...}

A ``DatasetDict`` is a folder with ``dataset_dict.json`` ({"splits": [...]}) and one such folder
per split. Saving writes a hidden sibling folder and renames it into place, so a crash mid-save
leaves the previous dataset (or nothing) at ``path``, never a half-written one. ``state.json``
also records each file's size and SHA-256 (and its own), which ``load_from_disk(verify=True)``
checks; `datasets` ignores these keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jaxfeed.features import Features
from jaxfeed.files import ChecksumError, UnsafePathError, file_sha256, resolve_inside
from jaxfeed.io.validate import FeatureMismatchError, check_table

if TYPE_CHECKING:
    from jaxfeed.dataset import Dataset, DatasetDict

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


def _format_state(ds: Dataset) -> dict[str, Any]:
    fmt = ds._format
    kwargs = {}
    for key, value in fmt["format_kwargs"].items():
        if isinstance(value, str | int | float | bool) or value is None:
            kwargs[key] = value
        elif key == "device" and hasattr(value, "platform"):
            kwargs[key] = str(value)  # a jax.Device: keep its name
        elif key == "dtype":
            kwargs[key] = str(getattr(value, "dtype", value))
    return {
        "_format_type": fmt["type"],
        "_format_columns": fmt["columns"],
        "_format_kwargs": kwargs,
        "_output_all_columns": fmt["output_all_columns"],
    }


def _write_dataset(ds: Dataset, folder: Path) -> None:
    table = ds._arrow_rows()
    rows_per_chunk = None
    if table.num_rows and table.nbytes:
        rows_per_chunk = max(1, int(CHUNK_BYTES * table.num_rows // table.nbytes))
    name = "data-00000-of-00001.arrow"
    schema = ds.features.arrow_schema
    with open(folder / name, "wb") as f:
        with pa.ipc.new_stream(f, schema) as writer:
            writer.write_table(
                table.cast(schema) if table.schema != schema else table,
                max_chunksize=rows_per_chunk,
            )
        f.flush()
        os.fsync(f.fileno())
    _write_json(
        folder / "dataset_info.json",
        {"features": ds.features.to_dict(), "num_rows": table.num_rows},
    )
    state = {
        "_data_files": [{"filename": name}],
        "_fingerprint": uuid.uuid4().hex[:16],
        "_split": None,
        CHECKSUMS: {
            f: {"sha256": file_sha256(folder / f), "bytes": (folder / f).stat().st_size}
            for f in (name, "dataset_info.json")
        },
        **_format_state(ds),
    }
    state[STATE_SHA] = _state_digest(state)
    _write_json(folder / "state.json", state)


CHECKSUMS = (
    "_jaxfeed_checksums"  # {file: {"sha256", "bytes"}}: the data files and dataset_info.json
)
STATE_SHA = "_jaxfeed_state_sha256"  # of state.json's own content, this key left out


def _state_digest(state: dict) -> str:
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


def save_dataset(ds: Dataset, path: str | os.PathLike) -> None:
    path = Path(path)
    tmp = _tmp_folder(path)
    try:
        _write_dataset(ds, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace(tmp, path)


def save_dataset_dict(dsd: DatasetDict, path: str | os.PathLike) -> None:
    path = Path(path)
    tmp = _tmp_folder(path)
    try:
        for name, split in dsd.items():
            (tmp / name).mkdir()
            _write_dataset(split, tmp / name)
        _write_json(tmp / "dataset_dict.json", {"splits": list(dsd)})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace(tmp, path)


def _recover(path: Path) -> None:
    """Finish a save that crashed between its two renames (the old folder is still beside it)."""
    if path.exists():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds:
        os.replace(olds[-1], path)


def _read_arrow(file: Path, keep_in_memory: bool) -> pa.Table:
    source = pa.memory_map(str(file)) if not keep_in_memory else pa.OSFile(str(file))
    try:
        try:
            table = pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            table = pa.ipc.open_file(source).read_all()
        table.validate()
        return table
    except (pa.ArrowException, OSError, ValueError) as err:
        raise ValueError(f"cannot read the Arrow data file {file}: {err}") from err


def _read_json(file: Path, what: str) -> dict:
    try:
        data = json.loads(file.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"saved dataset {file.parent} has no {file.name} ({what})"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} ({what}) is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file} ({what}) must hold a JSON object, got {type(data).__name__}")
    return data


def load_from_disk(
    path: str | os.PathLike, keep_in_memory: bool = False, verify: bool = False
) -> Dataset | DatasetDict:
    """Load a dataset saved with ``save_to_disk`` (by jaxfeed or `datasets`), memory-mapped.

    Only files inside ``path`` are read: a ``state.json`` or ``dataset_dict.json`` naming files
    or splits outside it is refused, as are features contradicted by the data (class ids out of
    range, wrong list lengths). The sizes recorded at save time are always checked;
    ``verify=True`` also checks every file's SHA-256 and raises :class:`ChecksumError` on any
    difference (or when the folder was saved without checksums, e.g. by `datasets`).

    >>> import tempfile
    >>> from jaxfeed import Dataset, load_from_disk
    >>> folder = tempfile.mkdtemp()
    >>> Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(folder + "/ds")
    >>> load_from_disk(folder + "/ds", verify=True)["x"]
    [1, 2, 3]
    """
    from jaxfeed.dataset import DatasetDict

    path = Path(path)
    _recover(path)
    if (path / "dataset_dict.json").is_file():
        splits = _read_json(path / "dataset_dict.json", "the list of splits").get("splits")
        if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
            raise ValueError(
                f"{path / 'dataset_dict.json'}: 'splits' must be a list of split names, got {splits!r}"
            )
        out = {}
        for name in splits:
            folder = _split_folder(path, name)
            if not (folder / "state.json").is_file():
                raise FileNotFoundError(
                    f"{path / 'dataset_dict.json'}: split {name!r} has no saved dataset "
                    f"(state.json) in {folder}"
                )
            out[name] = _load_dataset(folder, keep_in_memory, verify)
        return DatasetDict(out)
    if not (path / "state.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a saved dataset: expected state.json (a Dataset) or dataset_dict.json "
            "(a DatasetDict), as written by save_to_disk"
        )
    return _load_dataset(path, keep_in_memory, verify)


def _split_folder(path: Path, name: str) -> Path:
    """The folder of split ``name``: one plain folder name directly inside ``path``."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or name != name.strip("\x00"):
        raise UnsafePathError(
            f"{path / 'dataset_dict.json'}: split {name!r} is not a plain folder name inside {path}"
        )
    return resolve_inside(path, name, f"split {name!r} of {path / 'dataset_dict.json'}")


def _load_dataset(path: Path, keep_in_memory: bool, verify: bool) -> Dataset:
    from jaxfeed.dataset import Dataset

    state = _read_json(path / "state.json", "the saved dataset's state")
    entries = state.get("_data_files")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path / 'state.json'}: '_data_files' must be a non-empty list")
    files = []
    for entry in entries:
        if not isinstance(entry, dict) or "filename" not in entry:
            raise ValueError(
                f"{path / 'state.json'}: a '_data_files' entry needs a 'filename', got {entry!r}"
            )
        files.append(resolve_inside(path, entry["filename"], f"data file of {path / 'state.json'}"))
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"saved dataset {path} is missing its data files {missing}")
    _check_files(path, state, [f.name for f in files], verify)
    info = _read_json(path / "dataset_info.json", "the saved dataset's features")
    tables = [_read_arrow(f, keep_in_memory) for f in files]
    try:
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as err:
        raise ValueError(f"saved dataset {path}: its data files do not agree: {err}") from err
    source = str(path / "dataset_info.json")
    try:
        features = Features.from_dict(info["features"]) if info.get("features") else None
        ds = Dataset(table, features)
    except (ValueError, TypeError, KeyError) as err:
        if isinstance(err, FeatureMismatchError):
            raise
        raise FeatureMismatchError(
            source, "*", None, f"features do not fit the data: {err}"
        ) from err
    check_table(ds.data, ds.features, source)
    if not keep_in_memory:
        ds._cache_dir = str(path)
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
        except (ValueError, TypeError, KeyError) as err:
            raise ValueError(f"{path / 'state.json'}: bad format settings: {err}") from err
    return ds


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
    if verify and state.get(STATE_SHA) != _state_digest(state):
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
