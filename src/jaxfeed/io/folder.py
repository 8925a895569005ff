"""``imagefolder`` / ``audiofolder``: a folder of media files, labelled by sub-folder name.

Layout (split folders optional; without them everything is ``train``)::

    data_dir/train/cat/1.png     -> split "train", label "cat"
    data_dir/test/dog/7.png      -> split "test", label "dog"
    data_dir/train/metadata.csv  -> extra columns, joined on its "file_name" column

Files are stored by path and decoded when read, as `datasets` does.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from jaxfeed.features import Audio, ClassLabel, Features, Image

IMAGE_EXTENSIONS = {
    ".png",
    ".jpg",
    ".jpeg",
    ".bmp",
    ".gif",
    ".webp",
    ".tif",
    ".tiff",
    ".ppm",
    ".pgm",
}
AUDIO_EXTENSIONS = {".wav", ".flac", ".ogg", ".mp3", ".opus", ".aiff", ".aif"}
SPLIT_NAMES = {
    "train": "train",
    "test": "test",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
}


def load_folder(
    kind: str, data_dir: str | Path, features: Features | None = None
) -> dict[str, Any]:
    """Build the splits of a media folder as ``{split: Dataset}``."""
    from jaxfeed.dataset import Dataset

    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{kind}: data_dir {str(root)!r} is not a folder")
    extensions = IMAGE_EXTENSIONS if kind == "imagefolder" else AUDIO_EXTENSIONS
    column = "image" if kind == "imagefolder" else "audio"
    split_dirs = {
        SPLIT_NAMES[p.name.lower()]: p
        for p in sorted(root.iterdir())
        if p.is_dir() and p.name.lower() in SPLIT_NAMES
    }
    if not split_dirs:
        split_dirs = {"train": root}
    files = {split: _media_files(folder, extensions) for split, folder in split_dirs.items()}
    if not any(files.values()):
        raise FileNotFoundError(f"{kind}: no {'/'.join(sorted(extensions))} files under {root}")
    labelled = all(f.parent != split_dirs[s] for s, fs in files.items() for f in fs)
    names = sorted({f.parent.name for fs in files.values() for f in fs}) if labelled else []
    out = {}
    for split, paths in files.items():
        metadata = _metadata(split_dirs[split])
        data: dict[str, list] = {column: [str(p) for p in paths]}
        if metadata is not None:
            _join_metadata(data, metadata, paths, split_dirs[split], column)
        if labelled and "label" not in data:
            data["label"] = [names.index(p.parent.name) for p in paths]
        feats = features
        if feats is None:
            media = Image() if kind == "imagefolder" else Audio()
            inferred = Dataset.from_dict(
                {k: v for k, v in data.items() if k not in (column, "label")}
            ).features
            feats = Features(
                {
                    column: media,
                    **({"label": ClassLabel(names=names)} if "label" in data and labelled else {}),
                    **inferred,
                }
            )
            feats = Features({k: feats[k] for k in data})
        out[split] = Dataset.from_dict(data, features=feats)
    return out


def _media_files(folder: Path, extensions: set[str]) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in extensions)


def _metadata(folder: Path) -> list[dict] | None:
    csv_file, jsonl_file = folder / "metadata.csv", folder / "metadata.jsonl"
    if csv_file.is_file():
        with open(csv_file, newline="") as f:
            rows = list(csv.DictReader(f))
        return [{k: _number(v) for k, v in row.items()} for row in rows]
    if jsonl_file.is_file():
        return [json.loads(line) for line in jsonl_file.read_text().splitlines() if line.strip()]
    return None


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _join_metadata(
    data: dict[str, list], metadata: list[dict], paths: list[Path], folder: Path, column: str
) -> None:
    by_name = {}
    for i, row in enumerate(metadata):
        if "file_name" not in row:
            raise ValueError(f"{folder}: metadata row {i} has no 'file_name' column")
        by_name[str(Path(row["file_name"]))] = row
    keys = [k for k in metadata[0] if k != "file_name"] if metadata else []
    for key in keys:
        data[key] = []
    for path in paths:
        rel = str(path.relative_to(folder))
        row = by_name.get(rel) or by_name.get(path.name)
        if row is None:
            raise ValueError(f"{folder}: {rel} has no row in the metadata file")
        for key in keys:
            data[key].append(row.get(key))
