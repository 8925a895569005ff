"""save_to_disk / load_from_disk: Arrow IPC files plus JSON, written atomically, read memory-mapped.

The layout is the one `datasets` uses, so either library reads the other's folders::

    path/data-00000-of-00001.arrow   Arrow IPC stream
    path/dataset_info.json           {"features": {...}, ...}
    path/state.json                  {"_data_files": [...], "_format_type": ..., ...}

A ``DatasetDict`` is a folder with ``dataset_dict.json`` ({"splits": [...]}) and one such folder
per split. Saving writes a hidden sibling folder and renames it into place, so a crash mid-save
leaves the previous dataset (or nothing) at ``path``, never a half-written one.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jaxfeed.features import Features

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
    }
    _write_json(folder / "state.json", {**state, **_format_state(ds)})


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
        return pa.ipc.open_stream(source).read_all()
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_file(source).read_all()


def load_from_disk(path: str | os.PathLike, keep_in_memory: bool = False) -> Dataset | DatasetDict:
    """Load a dataset saved with ``save_to_disk`` (by jaxfeed or `datasets`), memory-mapped.

    >>> import tempfile
    >>> from jaxfeed import Dataset, load_from_disk
    >>> folder = tempfile.mkdtemp()
    >>> Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(folder + "/ds")
    >>> load_from_disk(folder + "/ds")["x"]
    [1, 2, 3]
    """
    from jaxfeed.dataset import Dataset, DatasetDict

    path = Path(path)
    _recover(path)
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        return DatasetDict({name: load_from_disk(path / name, keep_in_memory) for name in splits})
    state_file = path / "state.json"
    if not state_file.is_file():
        raise FileNotFoundError(
            f"{path} is not a saved dataset: expected state.json (a Dataset) or dataset_dict.json "
            "(a DatasetDict), as written by save_to_disk"
        )
    state = json.loads(state_file.read_text())
    info = json.loads((path / "dataset_info.json").read_text())
    files = [path / f["filename"] for f in state["_data_files"]]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"saved dataset {path} is missing its data files {missing}")
    tables = [_read_arrow(f, keep_in_memory) for f in files]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    features = Features.from_dict(info["features"]) if info.get("features") else None
    ds = Dataset(table, features)
    if not keep_in_memory:
        ds._cache_dir = str(path)
    fmt_type = state.get("_format_type")
    if fmt_type is not None or state.get("_format_columns") is not None:
        kwargs = {k: v for k, v in (state.get("_format_kwargs") or {}).items() if v is not None}
        ds.set_format(
            fmt_type,
            state.get("_format_columns"),
            state.get("_output_all_columns", False),
            **kwargs,
        )
    return ds
