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
        where = f"{size / 2**20:.1f} MiB on disk in {len(files)} files"
    else:
        size = sum(s.data.nbytes for s in data.values())
        where = f"{size / 2**20:.1f} MiB in Arrow"
    lines.append(f"dataset {dataset} ({source.kind}): {len(data)} splits, {where}")
    if split is not None and split not in data:
        raise ConfigError(f"--split {split!r} is not a split of {dataset}; splits: {sorted(data)}")
    for name, ds in data.items():
        if split and name != split:
            continue
        lines.append(f"\nsplit {name}: {ds.num_rows:,} rows")
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
                    else value
                )
            lines.append(f"  row {i}: {shown}")
    return "\n".join(lines)


def _verify(dataset: str) -> str:
    """Every file of a ``save_to_disk`` folder against the SHA-256 recorded at save time; a
    difference raises :class:`jaxfeed._base.files.ChecksumError` naming the file (exit status 1)."""
    folder = Path(dataset)
    if not (folder / "state.json").is_file() and not (folder / "dataset_dict.json").is_file():
        raise ConfigError(f"--verify: {dataset} is not a folder written by save_to_disk")
    load_from_disk(folder, verify=True)
    return f"verified: every file of {dataset} matches the checksums recorded when it was saved"
