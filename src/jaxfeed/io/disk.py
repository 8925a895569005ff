"""load_from_disk: folders written by ``save_to_disk`` (see :mod:`jaxfeed.saved`), read memory-mapped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from jaxfeed.dataset import Dataset, DatasetDict, register_disk_loader
from jaxfeed.features import Features
from jaxfeed.io.cache import fetch_folder
from jaxfeed.remote import is_remote
from jaxfeed.saved import save_dataset, save_dataset_dict

__all__ = ["load_from_disk", "save_dataset", "save_dataset_dict"]


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


def load_from_disk(
    path: str | os.PathLike, keep_in_memory: bool = False, storage_options: dict | None = None
) -> Dataset | DatasetDict:
    """Load a dataset saved with ``save_to_disk`` (by jaxfeed or `datasets`), memory-mapped.

    >>> import tempfile
    >>> from jaxfeed import Dataset, load_from_disk
    >>> folder = tempfile.mkdtemp()
    >>> Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(folder + "/ds")
    >>> load_from_disk(folder + "/ds")["x"][:]
    [1, 2, 3]

    A URL (``s3://bucket/ds``...) is copied once into the local cache (``$JAXFEED_CACHE``), then
    memory-mapped; ``storage_options`` go to fsspec.
    """
    if is_remote(path):
        path = fetch_folder(str(path), storage_options)
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
    if features is not None and set(features) == set(table.column_names):
        features = Features({c: features[c] for c in table.column_names})  # the table's order
    ds = Dataset(table, features)
    if not keep_in_memory:
        ds._internal.set_cache(path)
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


register_disk_loader(load_from_disk)
