"""``load_dataset``: one entry point for files, folders, the Hub and built-in datasets."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from jaxfeed._base.files import check_inside
from jaxfeed._base.remote import expand, filesystem, is_remote, with_hub_token
from jaxfeed._base.remote import info as remote_info
from jaxfeed.data.dataset import Dataset, DatasetDict, load_from_disk
from jaxfeed.data.features import Features
from jaxfeed.data.formats.batches import file_batches
from jaxfeed.data.formats.cache import load_cached, needs_conversion
from jaxfeed.data.formats.files import file_format, read_tables
from jaxfeed.data.formats.text import is_text_format, text_format
from jaxfeed.data.formats.validate import confine_media_paths, holds_media, media_root
from jaxfeed.data.iterable import IterableDataset, IterableDatasetDict
from jaxfeed.data.load.builtin import BUILTIN, load_builtin
from jaxfeed.data.load.folder import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS, SPLIT_NAMES, load_folder
from jaxfeed.data.load.hub import (
    DatasetNotCachedError,
    choose_config,
    download,
    expand_inside,
    looks_like_repo_id,
    readme_configs,
)
from jaxfeed.data.ops import concatenate_datasets

PACKAGED = {"parquet": "parquet", "csv": "csv", "json": "json", "arrow": "arrow", "text": "text"}
DataFiles = str | Sequence[str] | Mapping[str, str | Sequence[str]]


def load_dataset(
    path: str,
    name: str | None = None,
    split: str | None = None,
    data_files: DataFiles | None = None,
    data_dir: str | None = None,
    features: Features | None = None,
    streaming: bool = False,
    cache_dir: str | None = None,
    revision: str | None = None,
    token: str | bool | None = None,
    keep_in_memory: bool = False,
    storage_options: dict | None = None,
    verification_mode: str | None = None,
    **config_kwargs: Any,
) -> Any:
    """Load a dataset: a ``DatasetDict`` of splits, or one ``Dataset`` when ``split`` is given.

    ``path`` is a built-in name (``"digits"``, ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"``), a
    format (``"parquet"``, ``"csv"``, ``"json"``, ``"arrow"``, ``"text"`` with ``data_files``), ``"imagefolder"``
    or ``"audiofolder"`` (with ``data_dir``), a local file or folder (Hub layout, or a folder
    written by ``save_to_disk``), or a Hub repo id such as ``"ylecun/mnist"``. ``split`` may be
    ``"train"``, ``"train+test"``, ``"train[:10%]"`` or ``"test[100:200]"``. With
    ``streaming=True`` an :class:`IterableDataset` reads the files batch by batch.

    Parquet, CSV, JSON and remote files, ``imagefolder`` / ``audiofolder`` splits and the
    ``mnist`` / ``fashion_mnist`` / ``cifar10`` files are converted once, batch by batch, into a
    memory-mapped Arrow file under ``cache_dir`` (default ``$JAXFEED_CACHE`` or
    ``~/.cache/jaxfeed``), so peak memory does not grow with the data; later loads of unchanged
    files reuse it (a file added, changed or removed makes a new one). Local Arrow files are
    memory-mapped in place. ``keep_in_memory=True`` builds the dataset in RAM instead. Paths
    may be URLs (``s3://``, ``gs://``, ``hf://``, ``https://``) with ``storage_options=`` for
    fsspec (see :mod:`jaxfeed._base.remote`). The cache is keyed by each file's size and modification
    time; ``verification_mode="all_checks"`` keys it by the SHA-256 of the files' bytes (read once
    per load), for files rewritten with the same size and their modification time restored.

    Text files (``"text"``, or ``.txt`` files) become a ``text`` column, as in `datasets`:
    ``sample_by="line"`` (default), ``"paragraph"`` or ``"document"``, and ``keep_linebreaks``,
    ``encoding``, ``encoding_errors`` (see :mod:`jaxfeed.data.formats.text`).

    >>> from jaxfeed import load_dataset
    >>> ds = load_dataset("digits", split="train").with_format("jax")
    >>> ds[0]["image"].shape, ds.features["label"].num_classes
    ((8, 8), 10)
    """
    text_options = dict(config_kwargs)
    if text_options:
        text_format(**text_options)  # refuse an unknown option or value before any work
    media = _media_folder(path, name, data_files, data_dir)
    if media is not None:  # a local folder of images or audio (with its metadata file)
        path, data_dir = media
    if text_options and (path in BUILTIN or path in ("imagefolder", "audiofolder")):
        _refuse_text_options(path, text_options)
    if path in BUILTIN:
        splits: Any = load_builtin(
            path, name, data_dir, cache_dir=cache_dir, keep_in_memory=keep_in_memory
        )
    elif path in ("imagefolder", "audiofolder"):
        folder = data_dir or (data_files if isinstance(data_files, str) else None)
        if folder is None:
            raise ValueError(f"load_dataset({path!r}) needs data_dir= (the folder of files)")
        splits = load_folder(
            path, folder, features, cache_dir=cache_dir, keep_in_memory=keep_in_memory
        )
    else:
        options = (cache_dir, revision, token, keep_in_memory, storage_options, verification_mode)
        splits, features, streamed = _file_splits(
            path, name, data_files, data_dir, features, streaming, options, text_options
        )
        if streamed:
            return pick_split(splits, split, streaming=True)
    if path in ("imagefolder", "audiofolder"):
        features = None  # applied by load_folder
    return _picked(DatasetDict(dict(splits)), features, split, streaming)


def _picked(
    splits: DatasetDict, features: Features | None, split: str | None, streaming: bool
) -> Any:
    """``split`` of ``splits`` (all of them without one), cast to ``features`` when given, as
    streams when ``streaming``."""
    if features is not None:
        splits = DatasetDict({k: _with_features(v, Features(features)) for k, v in splits.items()})
    if streaming:
        return pick_split(
            {k: IterableDataset.from_dataset(v) for k, v in splits.items()},
            split,
            streaming=True,
        )
    return pick_split(splits, split)


def _file_splits(
    path: str,
    name: str | None,
    data_files: DataFiles | None,
    data_dir: str | None,
    features: Features | None,
    streaming: bool,
    options: tuple,
    text_options: dict[str, Any],
) -> tuple[Any, Features | None, bool]:
    """The splits of data files (or of a folder written by ``save_to_disk``) for
    :func:`load_dataset`; ``options``: cache_dir, revision, token, keep_in_memory,
    storage_options, verification_mode. Returns the splits, the features still to apply (None
    once applied while converting), and whether the splits are streams."""
    cache_dir, revision, token, keep_in_memory, storage_options, verification_mode = options
    storage_options = with_hub_token(storage_options, token)  # hf:// URLs get token=
    files, fmt = _resolve_files(
        path, name, data_files, data_dir, cache_dir, revision, token, storage_options
    )
    if is_text_format(fmt):
        fmt = text_format(**text_options)
    elif text_options:
        _refuse_text_options(path, text_options)
    if isinstance(files, Dataset | DatasetDict):  # a folder written by save_to_disk
        return (files if isinstance(files, DatasetDict) else {"train": files}), features, False
    root = _media_root(path, files, data_dir)
    if streaming:
        streams = {
            k: IterableDataset.from_files(
                v, fmt, features, storage_options=storage_options, data_dir=root
            )
            for k, v in files.items()
        }
        return streams, features, True
    loading = (cache_dir, keep_in_memory, storage_options, verification_mode)
    splits = {
        k: _confine(_load_files(v, fmt, features, *loading), root, v) for k, v in files.items()
    }
    return splits, None, False  # features: applied while converting


def _refuse_text_options(path: str, text_options: dict[str, Any]) -> None:
    """Refuse text-file options given to a load of something else."""
    raise TypeError(
        f"load_dataset({path!r}) does not take {', '.join(sorted(text_options))}: those "
        "options are for text files (load_dataset('text', data_files=...))"
    )


def _load_files(
    files: list[str],
    fmt: str | None,
    features: Features | None,
    cache_dir: str | None,
    keep_in_memory: bool,
    storage_options: dict | None,
    verification_mode: str | None = None,
) -> Dataset:
    """One split: in RAM (``keep_in_memory``), memory-mapped in place (local Arrow files), or
    converted batch by batch into the memory-mapped cache."""
    if keep_in_memory:
        if any(is_remote(f) for f in files):
            table = pa.Table.from_batches(
                [b for f in files for b in file_batches(f, fmt, storage_options=storage_options)]
            )
        else:
            table = read_tables(files, fmt)
        return _apply_features(Dataset(table), features)
    if needs_conversion(files, fmt) or features is not None:
        return Dataset._from_cached(
            load_cached(files, fmt, cache_dir, features, storage_options, verification_mode)
        )
    return Dataset(read_tables(files, fmt))


def _media_root(path: str, files: Mapping[str, list[str]], data_dir: str | None) -> str | None:
    """The folder path-only Image/Audio cells of these files may name (see
    :func:`~jaxfeed.data.formats.validate.confine_media_paths`): ``data_dir`` given with a format, the
    dataset's folder (a local folder, a Hub snapshot), else the folder holding every data file."""
    every = [f for v in files.values() for f in v]
    if path in PACKAGED:
        return media_root(every, None if data_dir is None or is_remote(data_dir) else data_dir)
    if not is_remote(path) and Path(path).is_dir():
        return os.path.abspath(path)
    root = media_root(every)
    if root is not None:  # a Hub snapshot: the whole snapshot is the dataset's folder
        parts = Path(root).parts
        if "snapshots" in parts[:-1]:
            at = len(parts) - 1 - parts[::-1].index("snapshots")
            root = str(Path(*parts[: at + 2]))
    return root


def _confine(ds: Dataset, root: str | None, files: list[str]) -> Dataset:
    """``ds`` with its path-only media cells resolved inside ``root`` (others refused)."""
    if not any(holds_media(f) for f in ds.features.values()):
        return ds
    source = files[0] if len(files) == 1 else f"{files[0]} (+{len(files) - 1} files)"
    table = confine_media_paths(ds.data, ds.features, root, source)
    return ds if table is ds.data else Dataset(table, ds.features)


def _apply_features(ds: Dataset, features: Features | None) -> Dataset:
    return ds if features is None else _with_features(ds, Features(features))


def _with_features(ds: Dataset, features: Features) -> Dataset:
    if set(features) != set(ds.column_names):
        raise ValueError(
            f"features {list(features)} do not match the dataset's columns {ds.column_names}"
        )
    return ds.cast(features)


SPLIT_SPEC = re.compile(r"^\s*([\w.-]+)\s*(?:\[\s*(-?\d*)\s*(%?)\s*:\s*(-?\d*)\s*(%?)\s*\])?\s*$")


def pick_split(splits: Mapping[str, Any], split: str | None, streaming: bool = False) -> Any:
    """The dataset ``split`` names among ``splits`` (a DatasetDict / IterableDatasetDict of all of
    them when None): ``"train"``, ``"train+test"``, ``"train[:10%]"``, ``"test[5:50]"``, ``"all"``.
    Each map-style split is named (``ds.split``), as in `datasets`."""
    if not streaming:  # each split knows its name (``ds.split``), as in `datasets`
        splits = {k: _named(v, k) for k, v in splits.items()}
    if split is None:
        if streaming:
            return IterableDatasetDict(splits)
        return DatasetDict(splits)
    parts = []
    for spec in split.split("+"):
        m = SPLIT_SPEC.match(spec)
        if m is None:
            raise ValueError(
                f"bad split {split!r}; expected e.g. 'train', 'train+test', 'train[:10%]' or 'test[5:50]'"
            )
        key = m.group(1)
        if key == "all" and "all" not in splits and not m.group(0).count("["):
            parts += list(splits.values())  # Split.ALL: every split, in order (as `datasets`)
            continue
        if key not in splits:
            raise ValueError(f"unknown split {key!r}; this dataset has {sorted(splits)}")
        ds = splits[key]
        if m.group(0).count("["):
            if streaming:
                raise ValueError(
                    "split slices ('train[:10%]') are not supported with streaming=True"
                )
            ds = ds.select(range(*_bounds(m, ds.num_rows)))
        parts.append(ds)
    if len(parts) == 1:
        return parts[0] if streaming else _named(parts[0], split)
    if streaming:
        raise ValueError("split sums ('train+test') are not supported with streaming=True")
    return _named(concatenate_datasets(parts), split)


def _named(ds: Dataset, split: str) -> Dataset:
    ds._internal.set_split(split)
    return ds


def _bounds(m: re.Match, n: int) -> tuple[int, int]:
    def value(text: str, percent: str, default: int) -> int:
        if text in ("", "-"):
            return default
        v = int(text)
        if percent:
            v = round(v * n / 100)
        return max(0, min(n, v if v >= 0 else n + v))

    return value(m.group(2), m.group(3), 0), value(m.group(4), m.group(5), n)


def _resolve_files(
    path: str,
    name: str | None,
    data_files: DataFiles | None,
    data_dir: str | None,
    cache_dir: str | None,
    revision: str | None,
    token: str | bool | None,
    storage_options: dict | None = None,
) -> tuple[Any, str | None]:
    """``({split: [files]}, format)``, or a loaded dataset for a ``save_to_disk`` folder."""
    if path in PACKAGED:
        if data_files is None and data_dir is None:
            raise ValueError(
                f"load_dataset({path!r}) needs data_files= (a path, a list, or {{split: paths}})"
            )
        if data_dir is not None and is_remote(data_dir):
            if data_files is None:
                return _remote_layout(data_dir, storage_options), PACKAGED[path]
            return _expand(data_files, data_dir, storage_options), PACKAGED[path]
        base = Path(data_dir) if data_dir else Path.cwd()
        if data_files is None:
            return _layout(base, None), PACKAGED[path]
        return _expand(data_files, base, storage_options), PACKAGED[path]
    if is_remote(path):
        return _remote(path, data_files, data_dir, storage_options)
    local = Path(path)
    if local.is_file():
        if data_files is not None:
            raise ValueError("give either a file as path or data_files=, not both")
        return {"train": [str(local)]}, file_format(local)
    if local.is_dir():
        return _local_folder(local, name, data_files, data_dir)
    if looks_like_repo_id(path):
        try:
            folder = download(path, revision, cache_dir, token)
        except DatasetNotCachedError as err:
            if "/" in path:
                raise
            raise DatasetNotCachedError(
                f"{path!r} is not a built-in dataset ({', '.join(BUILTIN)}), a format ({', '.join(PACKAGED)}), "
                f"imagefolder/audiofolder or an existing path; as a Hub id: {err}"
            ) from err
        return _local_folder(folder, name, data_files, data_dir)
    raise FileNotFoundError(
        f"cannot find dataset {path!r}: not a built-in name ({', '.join(BUILTIN)}), a format "
        f"({', '.join(PACKAGED)}), imagefolder/audiofolder, an existing file or folder, or a Hub repo id"
    )


def _local_folder(
    folder: Path, name: str | None, data_files: DataFiles | None, data_dir: str | None
) -> tuple[Any, str | None]:
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        return load_from_disk(folder), None
    base = folder / data_dir if data_dir else folder
    if data_files is not None:
        return _expand(data_files, base), None
    configs = readme_configs(folder)
    if configs:
        chosen = choose_config(configs, name)
        return expand_inside(chosen["data_files"], folder), None
    if name and (folder / name).is_dir():
        base = folder / name
    return _layout(base, folder), None


def _remote(
    url: str, data_files: DataFiles | None, data_dir: str | None, storage_options: dict | None
) -> tuple[Any, str | None]:
    """A remote file, a remote ``save_to_disk`` folder, or a remote folder of data files."""
    fs, inner = filesystem(url, storage_options)
    found = remote_info(fs, inner, url)  # one request; raises if the server is unreachable
    if found is None:
        raise FileNotFoundError(f"cannot find dataset {url!r}: no such remote file or folder")
    if found.get("type") != "directory":
        if data_files is not None:
            raise ValueError("give either a file as path or data_files=, not both")
        return {"train": [url]}, file_format(url)
    if fs.isfile(f"{inner}/state.json") or fs.isfile(f"{inner}/dataset_dict.json"):
        return load_from_disk(url, storage_options=storage_options), None
    base = url.rstrip("/") + ("/" + data_dir.strip("/") if data_dir else "")
    if data_files is not None:
        return _expand(data_files, base, storage_options), None
    return _remote_layout(base, storage_options), None


def _remote_layout(base: str, storage_options: dict | None) -> dict[str, list[str]]:
    prefix = base.rstrip("/") + "/"
    files = [f for f in expand(base, storage_options) if file_format(f)]
    if not files:
        raise FileNotFoundError(f"no Parquet, CSV, JSON or Arrow files under {base}")
    return _assign_splits([(f[len(prefix) :] if f.startswith(prefix) else f, f) for f in files])


def _assign_splits(files: list[tuple[str, str]]) -> dict[str, list[str]]:
    """``{split: [full paths]}`` from ``(relative path, full path)`` pairs, by the names in paths."""
    splits: dict[str, list[str]] = {}
    for rel, full in files:
        m = SPLIT_IN_NAME.search(rel.lower())
        key = _ALIASES.get(m.group(1), m.group(1)) if m else "train"
        splits.setdefault(key, []).append(full)
    order = {name: i for i, name in enumerate(("train", "validation", "test"))}  # as `datasets`
    return dict(sorted(splits.items(), key=lambda kv: order.get(kv[0], len(order))))


def _expand(
    data_files: DataFiles, base: Path | str, storage_options: dict | None = None
) -> dict[str, list[str]]:
    if isinstance(data_files, str | os.PathLike):
        data_files = {"train": [data_files]}
    elif not isinstance(data_files, Mapping):
        data_files = {"train": list(data_files)}
    out = {}
    for split, patterns in data_files.items():
        patterns = [patterns] if isinstance(patterns, str | os.PathLike) else list(patterns)
        files: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str | os.PathLike):
                raise ValueError(
                    f"data_files for split {split!r}: entries are paths or globs, got {pattern!r}"
                )
            if not str(pattern).strip():
                raise ValueError(
                    f"data_files for split {split!r}: an empty path ({str(pattern)!r}); give a "
                    "file, a list of files or a glob such as 'data/*.txt'"
                )
            if is_remote(str(pattern)) or isinstance(base, str):
                url = str(pattern)
                if not is_remote(url):
                    url = f"{str(base).rstrip('/')}/{url.lstrip('/')}"
                matches = expand(url, storage_options)
                if not matches:
                    raise FileNotFoundError(
                        f"data_files for split {split!r}: nothing matches {url!r}"
                    )
                files += matches
                continue
            full = Path(pattern) if Path(pattern).is_absolute() else base / pattern
            literal = full.is_file()  # a real file named like a glob, e.g. a[1].csv
            matches = [str(full)] if literal else sorted(glob.glob(str(full), recursive=True))
            if not matches:
                raise FileNotFoundError(
                    f"data_files for split {split!r}: nothing matches {str(full)!r}"
                )
            found = [m for m in matches if Path(m).is_file()]
            if not found:  # a folder, or a glob matching only folders
                raise FileNotFoundError(
                    f"data_files for split {split!r}: {str(full)!r} matches only folders, no "
                    f"file; give the files inside (e.g. {str(Path(full) / '*')!r}) or the folder "
                    "as load_dataset's path"
                )
            files += found
        if not files:
            raise ValueError(f"data_files for split {split!r} is an empty list; give files")
        out[str(split)] = files
    return out


SPLIT_IN_NAME = re.compile(
    r"(?:^|[-._/ ])(train|training|test|testing|eval|validation|valid|val|dev)(?:$|[-._/ 0-9])"
)
_ALIASES = {"training": "train", "testing": "test", "eval": "validation", **SPLIT_NAMES}


def _layout(base: Path, root: Path | None) -> dict[str, list[str]]:
    """Assign a folder's data files to splits by the split names in their paths, as the Hub does."""
    if not base.is_dir():
        raise FileNotFoundError(f"data_dir {str(base)!r} is not a folder")
    files = sorted(
        p for p in base.rglob("*")
        if p.is_file() and file_format(p) and not any(part.startswith(".") for part in p.relative_to(base).parts)
    )  # fmt: skip
    files = [check_inside(root or base, p, "data file") for p in files]
    if not files:
        raise FileNotFoundError(f"no Parquet, CSV, JSON or Arrow files under {base}")
    return _assign_splits([(str(f.relative_to(base)), str(f)) for f in files])


_METADATA_NAMES = {"metadata.csv", "metadata.jsonl"}


def _media_folder(
    path: str, name: str | None, data_files: DataFiles | None, data_dir: str | None
) -> tuple[str, str] | None:
    """``("imagefolder" | "audiofolder", folder)`` for a local folder whose files are mostly
    images or audio (``metadata.csv`` / ``metadata.jsonl`` not counted), as `datasets` picks the
    loader by the most common kind of file; None otherwise."""
    if data_files is not None or path in BUILTIN or path in PACKAGED or is_remote(path):
        return None
    folder = Path(path)
    if not folder.is_dir() or path in ("imagefolder", "audiofolder"):
        return None
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        return None
    if readme_configs(folder):
        return None
    base = folder / data_dir if data_dir else folder
    if not base.is_dir():
        return None
    counts = {"data": 0, "imagefolder": 0, "audiofolder": 0}
    for p in base.rglob("*"):
        if not p.is_file() or any(part.startswith(".") for part in p.relative_to(base).parts):
            continue
        suffix = p.suffix.lower()
        if suffix in IMAGE_EXTENSIONS:
            counts["imagefolder"] += 1
        elif suffix in AUDIO_EXTENSIONS:
            counts["audiofolder"] += 1
        elif file_format(p) and p.name not in _METADATA_NAMES:
            counts["data"] += 1
    kind = max(counts, key=lambda k: counts[k])
    if kind == "data" or counts[kind] == 0:
        return None
    return kind, str(base)


def get_dataset_split_names(
    path: str,
    config_name: str | None = None,
    data_files: DataFiles | None = None,
    **kwargs: Any,
) -> list[str]:
    """The split names :func:`load_dataset` would give for these arguments, without converting
    any data (a built-in dataset or a media folder is loaded to find them).

    >>> from jaxfeed import get_dataset_split_names
    >>> get_dataset_split_names("digits")
    ['train', 'test']
    """
    data_dir = kwargs.get("data_dir")
    media = _media_folder(path, config_name, data_files, data_dir)
    if path in BUILTIN or path in ("imagefolder", "audiofolder") or media is not None:
        loaded = load_dataset(path, config_name, data_files=data_files, **kwargs)
        return list(loaded)
    files, _ = _resolve_files(
        path,
        config_name,
        data_files,
        data_dir,
        kwargs.get("cache_dir"),
        kwargs.get("revision"),
        kwargs.get("token"),
        with_hub_token(kwargs.get("storage_options"), kwargs.get("token")),
    )
    if isinstance(files, Dataset):
        return ["train"]
    return list(files)


def get_dataset_config_names(
    path: str, data_files: DataFiles | None = None, **kwargs: Any
) -> list[str]:
    """The config names of a dataset: those of its ``README.md`` header (a Hub-layout folder or
    repo), else ``["default"]``.

    >>> from jaxfeed import get_dataset_config_names
    >>> get_dataset_config_names("digits")
    ['default']
    """
    folder: Path | None = None
    local = Path(path)
    if path in BUILTIN or path in PACKAGED or path in ("imagefolder", "audiofolder"):
        folder = None
    elif local.is_dir():
        folder = local
    elif not local.is_file() and not is_remote(path) and looks_like_repo_id(path):
        folder = download(
            path, kwargs.get("revision"), kwargs.get("cache_dir"), kwargs.get("token")
        )
    configs = readme_configs(folder) if folder is not None and data_files is None else []
    return [c["config_name"] for c in configs] or ["default"]
