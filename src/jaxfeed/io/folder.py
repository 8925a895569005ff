"""``imagefolder`` / ``audiofolder``: a folder of media files, labelled by sub-folder name.

Layout (split folders optional; without them everything is ``train``)::

    data_dir/train/cat/1.png     -> split "train", label "cat"
    data_dir/test/dog/7.png      -> split "test", label "dog"
    data_dir/train/metadata.csv  -> extra columns, joined on its "file_name" column

Files are stored by path and decoded when read, as `datasets` does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from jaxfeed.features import Audio, ClassLabel, Features, Image
from jaxfeed.files import check_inside, resolve_inside

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
    """Build the splits of a media folder as ``{split: Dataset}``.

    Only files inside ``data_dir`` are read: a metadata ``file_name`` or a symlink leading outside
    is refused, as is a metadata column that would replace the discovered media paths or the
    labels given by the sub-folders.
    """
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
    files = {split: _media_files(folder, extensions, root) for split, folder in split_dirs.items()}
    if not any(files.values()):
        raise FileNotFoundError(f"{kind}: no {'/'.join(sorted(extensions))} files under {root}")
    labelled = all(f.parent != split_dirs[s] for s, fs in files.items() for f in fs)
    names = sorted({f.parent.name for fs in files.values() for f in fs}) if labelled else []
    out = {}
    for split, paths in files.items():
        data: dict[str, Any] = {column: [str(p) for p in paths]}
        metadata = _metadata(split_dirs[split])
        if metadata is not None:
            reserved = {column: f"the discovered {column} paths"}
            if labelled:
                reserved["label"] = "the labels given by the sub-folder names"
            data.update(_join_metadata(metadata, paths, split_dirs[split], reserved))
        if labelled:
            data["label"] = [names.index(p.parent.name) for p in paths]
        feats = features
        if feats is None:
            media = Image() if kind == "imagefolder" else Audio()
            skip = {column, "label"} if labelled else {column}
            inferred = Dataset.from_dict({k: v for k, v in data.items() if k not in skip}).features
            feats = Features(
                {
                    column: media,
                    **({"label": ClassLabel(names=names)} if labelled else {}),
                    **inferred,
                }
            )
            feats = Features({k: feats[k] for k in data})
        out[split] = Dataset.from_dict(data, features=feats)
    return out


def _media_files(folder: Path, extensions: set[str], root: Path) -> list[Path]:
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in extensions)
    return [check_inside(root, p, "media file") for p in found]


def _metadata(folder: Path) -> tuple[Path, pa.Table] | None:
    """The split's ``metadata.csv`` or ``metadata.jsonl`` as an Arrow table, one type per column
    (read by Arrow's columnar CSV / JSON readers, as a table, not cell by cell)."""
    csv_file, jsonl_file = folder / "metadata.csv", folder / "metadata.jsonl"
    file = csv_file if csv_file.is_file() else jsonl_file if jsonl_file.is_file() else None
    if file is None:
        return None
    raw = check_inside(folder, file, "metadata file").read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"cannot read the metadata file {file}: line {line} is not valid UTF-8 ({err.reason} "
            f"at byte {err.start})"
        ) from None
    strings = pa.schema([("file_name", pa.string())])
    try:
        if file is csv_file:
            table = pcsv.read_csv(
                pa.BufferReader(raw), convert_options=pcsv.ConvertOptions(column_types=strings)
            )
        else:
            table = pjson.read_json(
                pa.BufferReader(raw),
                parse_options=pjson.ParseOptions(
                    explicit_schema=strings, unexpected_field_behavior="infer"
                ),
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as err:
        message = " ".join(str(err).split())
        raise ValueError(f"cannot read the metadata file {file}: {message}") from None
    return file, table


def _join_metadata(
    metadata: tuple[Path, pa.Table], paths: list[Path], folder: Path, reserved: dict[str, str]
) -> dict[str, pa.Array]:
    """The metadata columns, one value per media file in ``paths`` (matched on ``file_name``)."""
    file, table = metadata
    if "file_name" not in table.column_names:
        raise ValueError(
            f"{file}: the metadata needs a 'file_name' column; it has {table.column_names}"
        )
    for name, role in reserved.items():
        if name in table.column_names:
            raise ValueError(
                f"{file}: column {name!r} would replace {role}; rename it (e.g. 'meta_{name}')"
            )
    file_names = table.column("file_name").to_pylist()
    rows: dict[Path, int] = {}
    for i, name in enumerate(file_names):
        if not name:
            raise ValueError(f"{file}: row {i} has an empty 'file_name'")
        target = resolve_inside(folder, name, f"{file.name} row {i}: file_name")
        if target in rows:
            raise ValueError(
                f"{file}: rows {rows[target]} and {i} both describe file_name {name!r}"
            )
        rows[target] = i
    by_base: dict[str, list[int]] = {}
    for target, i in rows.items():
        by_base.setdefault(target.name, []).append(i)
    order = []
    for path in paths:
        i = rows.get(Path(os.path.abspath(path)))
        if i is None:
            candidates = by_base.get(path.name, [])
            same_name = [p for p in paths if p.name == path.name]
            if len(candidates) == 1 and len(same_name) == 1:
                i = candidates[0]
        if i is None:
            raise ValueError(f"{file}: {path.relative_to(folder)} has no row in the metadata")
        order.append(i)
    picked = table.drop_columns(["file_name"]).take(pa.array(order, type=pa.int64()))
    return {name: picked.column(name).combine_chunks() for name in picked.column_names}
