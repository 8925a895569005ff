"""load_from_disk: folders written by ``save_to_disk`` (see :mod:`jaxfeed.saved`), read memory-mapped.

Only files inside the folder are read; features are checked against the data; the sizes recorded
at save time are checked, and with ``verify=True`` the SHA-256 of every file too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from jaxfeed.dataset import Dataset, DatasetDict, register_disk_loader
from jaxfeed.features import Features
from jaxfeed.files import (
    ChecksumError,
    UnsafePathError,
    check_inside,
    file_sha256,
    resolve_inside,
)
from jaxfeed.io.cache import fetch_folder
from jaxfeed.io.validate import (
    FeatureMismatchError,
    check_arrow_data,
    check_json_depth,
    check_table,
    confine_media_paths,
    holds_media,
    short,
)
from jaxfeed.remote import is_remote
from jaxfeed.saved import CHECKSUMS, STATE_SHA, save_dataset, save_dataset_dict, state_digest

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


def load_from_disk(
    path: str | os.PathLike,
    keep_in_memory: bool = False,
    storage_options: dict | None = None,
    verify: bool = False,
    data_dir: str | os.PathLike | None = None,
) -> Dataset | DatasetDict:
    """Load a dataset saved with ``save_to_disk`` (by jaxfeed or `datasets`), memory-mapped.

    Only files inside ``path`` are read: a ``state.json`` or ``dataset_dict.json`` naming files
    or splits outside it is refused, as are features contradicted by the data (class ids out of
    range, wrong list lengths). The sizes recorded at save time are always checked;
    ``verify=True`` also checks every file's SHA-256 and raises :class:`ChecksumError` on any
    difference (or when the folder was saved without checksums, e.g. by `datasets`).

    Image and Audio cells stored as a path only (no bytes) may name files inside ``path``, or
    inside ``data_dir`` when you give one (e.g. the image folder an older save pointed into);
    others raise :class:`UnsafePathError`. ``save_to_disk`` embeds the files' bytes, so its
    folders need neither.

    >>> import tempfile
    >>> from jaxfeed import Dataset, load_from_disk
    >>> folder = tempfile.mkdtemp()
    >>> Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(folder + "/ds")
    >>> list(load_from_disk(folder + "/ds", verify=True)["x"])
    [1, 2, 3]

    A URL (``s3://bucket/ds``...) is copied once into the local cache (``$JAXFEED_CACHE``), then
    memory-mapped; ``storage_options`` go to fsspec.
    """
    if is_remote(path):
        path = fetch_folder(str(path), storage_options)
    path = Path(path)
    _recover(path)
    if (path / "dataset_dict.json").is_file():
        splits = _read_json(path / "dataset_dict.json", "the list of splits").get("splits")
        if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
            raise ValueError(
                f"{path / 'dataset_dict.json'}: field 'splits' must be a list of split names, "
                f"got {short(splits)}"
            )
        out = {}
        for name in splits:
            folder = _split_folder(path, name)
            if not (folder / "state.json").is_file():
                raise FileNotFoundError(
                    f"{path / 'dataset_dict.json'}: split {name!r} has no saved dataset "
                    f"(state.json) in {folder}"
                )
            if name in out:
                raise ValueError(
                    f"{path / 'dataset_dict.json'}: split {short(name)} is listed twice"
                )
            out[name] = _load_dataset(folder, keep_in_memory, verify, data_dir)
        return DatasetDict(out)
    if not (path / "state.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a saved dataset: expected state.json (a Dataset) or dataset_dict.json "
            "(a DatasetDict), as written by save_to_disk"
        )
    return _load_dataset(path, keep_in_memory, verify, data_dir)


def _split_folder(path: Path, name: str) -> Path:
    """The folder of split ``name``: one plain folder name directly inside ``path``."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or name != name.strip("\x00"):
        raise UnsafePathError(
            f"{path / 'dataset_dict.json'}: split {name!r} is not a plain folder name inside {path}"
        )
    return resolve_inside(path, name, f"split {name!r} of {path / 'dataset_dict.json'}")


def _load_dataset(
    path: Path, keep_in_memory: bool, verify: bool, data_dir: str | os.PathLike | None = None
) -> Dataset:
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
        ds = Dataset(table, features)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
        if isinstance(err, FeatureMismatchError):
            raise
        raise FeatureMismatchError(
            source, "*", None, f"field 'features' does not fit the data: {str(err)[:300]}"
        ) from None
    check_table(ds.data, ds.features, source)
    if any(holds_media(f) for f in ds.features.values()):
        root = os.path.abspath(data_dir if data_dir is not None else path)
        table = confine_media_paths(ds.data, ds.features, root, str(files[0]))
        if table is not ds.data:  # relative paths made absolute: no longer the files' table
            ds, keep_in_memory = Dataset(table, ds.features), True
    if not keep_in_memory:
        ds._internal.set_cache(path, [f.name for f in files])  # ds.cache_files, as `datasets`
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


register_disk_loader(load_from_disk)
