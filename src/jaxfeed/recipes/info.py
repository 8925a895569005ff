"""``jaxfeed info``: what a dataset is, its splits, features, size and a few rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxfeed.data.dataset import load_from_disk
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes.config import ConfigError


def describe_dataset(
    dataset: str, data_dir: str | None, split: str | None, rows: int, verify: bool = False
) -> str:
    """A text description of ``dataset`` (any ``--data`` source); ``verify`` checks the
    checksums a ``save_to_disk`` folder recorded (``load_from_disk(..., verify=True)``)."""
    lines = []
    if verify:
        lines.append(_verify(dataset))
    source = datamod.detect(dataset, data_dir)
    data = source.data
    local = Path(dataset)
    if local.exists():
        files = [local] if local.is_file() else [p for p in local.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        where = f"{size / 2**20:.1f} MiB on disk in {plural(len(files), 'file')}"
    else:
        size = sum(s.data.nbytes for s in data.values())
        where = f"{size / 2**20:.1f} MiB in Arrow"
    lines.append(f"dataset {dataset} ({source.kind}): {plural(len(data), 'split')}, {where}")
    if split is not None and split not in data:
        raise ConfigError(f"--split {split!r} is not a split of {dataset}; splits: {sorted(data)}")
    for name, ds in data.items():
        if split and name != split:
            continue
        lines.append(f"\nsplit {name}: {plural(ds.num_rows, 'row')}")
        for column, feature in ds.features.items():
            lines.append(f"  {column}: {feature!r}")
        n = min(rows, ds.num_rows)
        shown_rows = ds.with_format("numpy")[:n] if n else {}
        for i in range(n):
            shown = {}
            for column, values in shown_rows.items():
                value = values[i]
                shown[column] = (
                    f"array{tuple(value.shape)} {value.dtype}"
                    if isinstance(value, np.ndarray) and value.ndim
                    else plain(value)
                )
            lines.append(f"  row {i}: {shown}")
    return "\n".join(lines)


def plural(count: int, noun: str) -> str:
    """``1 split``, ``3 splits``, ``1,437 rows``.

    >>> plural(1, "split"), plural(1437, "row")
    ('1 split', '1,437 rows')
    """
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (``3``, not ``np.int64(3)``).

    >>> plain(np.int64(3)), plain(np.str_("a")), plain(np.array(2.5)), plain([1])
    (3, 'a', 2.5, [1])
    """
    if isinstance(value, np.generic | np.ndarray):
        return value.item() if value.size == 1 else value.tolist()
    return value


def _verify(dataset: str) -> str:
    """Every file of a ``save_to_disk`` folder against the SHA-256 recorded at save time; a
    difference raises :class:`jaxfeed._base.files.ChecksumError` naming the file (exit status 1)."""
    folder = Path(dataset)
    if not (folder / "state.json").is_file() and not (folder / "dataset_dict.json").is_file():
        raise ConfigError(f"--verify: {dataset} is not a folder written by save_to_disk")
    load_from_disk(folder, verify=True)
    return f"verified: every file of {dataset} matches the checksums recorded when it was saved"
