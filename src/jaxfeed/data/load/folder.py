"""``imagefolder`` / ``audiofolder``: a folder of media files, labelled by sub-folder name; and
:func:`load_text_folder`, a folder of ``.txt`` files labelled the same way (one text per file).

Layout (split folders optional; without them everything is ``train``)::

    data_dir/train/cat/1.png     -> split "train", label "cat"
    data_dir/test/dog/7.png      -> split "test", label "dog"
    data_dir/train/metadata.csv  -> extra columns, joined on its "file_name" column

Files are stored by path and decoded when read, as `datasets` does. Each split is written batch
by batch into the memory-mapped Arrow cache, keyed by the files' paths, sizes and modification
times (see :func:`load_folder`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import stat
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from jaxfeed._base.files import check_inside, resolve_inside
from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Audio, ClassLabel, Features, Image, Value
from jaxfeed.data.formats.cache import cached_dataset
from jaxfeed.data.formats.validate import check_json_depth

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
TEXT_EXTENSIONS = {".txt"}
SPLIT_NAMES = {
    "train": "train",
    "test": "test",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
}


FOLDER_VERSION = 1  # bump when what a folder's cache holds changes
BATCH_ROWS = 8192  # rows encoded and written at a time


@dataclass
class _Scan:
    """What one walk over a split's media files found."""

    digest: str = ""
    count: int = 0
    direct: bool = False  # a media file sits in the split folder itself (no label folder)
    parents: set[str] = field(default_factory=set)
    base_names: Counter = field(default_factory=Counter)


def load_folder(
    kind: str,
    data_dir: str | Path,
    features: Features | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    keep_in_memory: bool = False,
) -> dict[str, Dataset]:
    """Build the splits of a media folder as ``{split: Dataset}``.

    Each split is written once, ``BATCH_ROWS`` rows at a time, into a memory-mapped Arrow file
    under the cache folder (as :func:`jaxfeed.data.formats.cache.load_cached` does for data files), keyed by
    every media file's path, size and modification time, the metadata file's, the labels and
    ``features``: peak memory does not grow with the number of files, a second load maps the
    cache after one walk over the folder, and a file added, changed or removed builds a new one.
    ``keep_in_memory=True`` builds the splits in RAM instead. Media are stored by path (decoded
    when read), as `datasets` does.

    Only files inside ``data_dir`` are read: a metadata ``file_name`` or a symlink leading outside
    is refused, as is a metadata column that would replace the discovered media paths or the
    labels given by the sub-folders.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{kind}: data_dir {str(root)!r} is not a folder")
    extensions = IMAGE_EXTENSIONS if kind == "imagefolder" else AUDIO_EXTENSIONS
    column = "image" if kind == "imagefolder" else "audio"
    split_dirs, metadata_files, scans = _scan_splits(root, extensions)
    if not any(scan.count for scan in scans.values()):
        raise FileNotFoundError(f"{kind}: no {'/'.join(sorted(extensions))} files under {root}")
    labelled = not any(scan.direct for scan in scans.values())
    names = sorted(set().union(*(scan.parents for scan in scans.values()))) if labelled else []
    out = {}
    for split, folder in split_dirs.items():
        # built on a cache miss only: the metadata file is read and joined then
        build = functools.cache(
            functools.partial(
                _SplitBuilder,
                kind,
                column,
                root,
                folder,
                extensions,
                labelled,
                names,
                features,
                scans[split],
            )
        )
        if keep_in_memory:
            built = build()
            table = pa.Table.from_batches(list(built.batches()), built.features.arrow_schema)
            out[split] = Dataset(table, built.features)
            continue
        meta = metadata_files[split]
        payload = {
            "kind": kind,
            "folder_version": FOLDER_VERSION,
            "data_dir": [str(root), os.path.abspath(root)],  # rows hold paths as given
            "split": [split, str(folder)],
            "labels": names if labelled else None,
            "features": None if features is None else Features(features).to_dict(),
            "files": [scans[split].count, scans[split].digest],
            "metadata": None if meta is None else _identity(meta),
        }
        cached = cached_dataset(
            payload,
            lambda build=build: build().batches(),
            lambda build=build: build().features,
            cache_dir,
            sources=str(folder),
            lineage={k: payload[k] for k in ("kind", "data_dir", "split", "features")},
        )
        out[split] = Dataset._from_cached(cached)
    return out


def _scan_splits(
    root: Path, extensions: set[str]
) -> tuple[dict[str, Path], dict[str, Path | None], dict[str, _Scan]]:
    """The split folders of ``root`` (its sub-folders named as splits, else ``root`` as
    ``train``), each one's metadata file (None: none) and the scan of its media files."""
    split_dirs = {
        SPLIT_NAMES[p.name.lower()]: p
        for p in sorted(root.iterdir())
        if p.is_dir() and p.name.lower() in SPLIT_NAMES
    }
    if not split_dirs:
        split_dirs = {"train": root}
    metadata_files = {split: _metadata_file(folder) for split, folder in split_dirs.items()}
    scans = {
        split: _scan(folder, extensions, root, metadata_files[split] is not None)
        for split, folder in split_dirs.items()
    }
    return split_dirs, metadata_files, scans


def _identity(path: Path) -> list:
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


class _Media(NamedTuple):
    """One media file found by :func:`_walk`."""

    path: str  # as pathlib would spell ``folder / ...``: the value stored in the dataset
    rel: str  # relative to the split folder
    parent: str | None  # the name of the folder holding it; None for the split folder itself
    size: int
    mtime_ns: int

    def key(self) -> bytes:
        return f"{self.rel}\0{self.size}\0{self.mtime_ns}\n".encode()


def _suffix(name: str) -> str:
    i = name.rfind(".")
    return name[i:].lower() if 0 < i < len(name) - 1 else ""  # as ``Path(name).suffix``


def _walk(folder: Path, extensions: set[str], root: Path) -> Iterator[_Media]:
    """The media files under ``folder`` in the order of ``sorted(folder.rglob("*"))`` (each
    folder's entries sorted by name, depth first), listing one folder at a time. Linked folders
    are not entered (as ``rglob``); a linked file, or every file when ``folder`` is reached
    through a link, must resolve inside ``root``."""
    top = str(folder)
    check_all = folder != root and (
        folder.is_symlink()
        or os.path.realpath(folder) != os.path.join(os.path.realpath(root), folder.name)
    )

    def walk(base: str, rel: str, parent: str | None) -> Iterator[_Media]:
        with os.scandir(base) as it:
            entries = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_symlink()) for e in it)
        for name, is_dir, is_link in entries:
            path = name if base == "." else os.path.join(base, name)
            if is_dir:
                yield from walk(path, f"{rel}{name}/", name)
                continue
            if _suffix(name) not in extensions:
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:  # a dangling link (rglob skips it too)
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if check_all or is_link:
                check_inside(root, path, "media file")
            yield _Media(path, rel + name, parent, st.st_size, st.st_mtime_ns)

    yield from walk(top, "", None)


def _scan(folder: Path, extensions: set[str], root: Path, base_names: bool) -> _Scan:
    """One walk: the fingerprint of the files (relative path, size, modification time), their
    number, the label folders, and the base names (to match metadata rows) when ``base_names``."""
    scan, digest = _Scan(), hashlib.sha256()
    for media in _walk(folder, extensions, root):
        digest.update(media.key())
        scan.count += 1
        if media.parent is None:
            scan.direct = True
        else:
            scan.parents.add(media.parent)
        if base_names:
            scan.base_names[os.path.basename(media.rel)] += 1
    scan.digest = digest.hexdigest()
    return scan


MODE_SAMPLE = 64  # images whose headers choose the decoding mode of a folder
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


def _image_feature(folder: Path, extensions: set[str], root: Path) -> Image:
    """``Image()``, or ``Image(mode="RGB" | "L")`` when the first images (their headers only)
    mix modes: every image then decodes in the widest mode, so that a batch stacks into one
    array; said once, as a warning."""
    import PIL.Image  # noqa: PLC0415 (import cost: Pillow, a core dependency; image folders only)

    modes: dict[str, str] = {}
    for media in itertools.islice(_walk(folder, extensions, root), MODE_SAMPLE):
        try:
            with PIL.Image.open(media.path) as image:
                modes.setdefault(image.mode, media.path)
        except (OSError, ValueError, PIL.Image.DecompressionBombError):
            continue  # decoding names the file
    if len(modes) < 2:
        return Image()
    widest = "L" if all(m in GREY_MODES for m in modes) else "RGB"
    warnings.warn(
        f"imagefolder {folder}: the images mix modes {', '.join(sorted(modes))} (e.g. "
        f"{', '.join(modes.values())}); they decode as {widest}, the widest (give "
        f"features= with Image(mode=...) to choose)",
        stacklevel=2,
    )
    return Image(mode=widest)


class _SplitBuilder:
    """One split's features and its record batches, built ``BATCH_ROWS`` files at a time."""

    def __init__(
        self,
        kind: str,
        column: str,
        root: Path,
        folder: Path,
        extensions: set[str],
        labelled: bool,
        names: list[str],
        features: Features | None,
        scan: _Scan,
    ) -> None:
        self.column, self.root, self.folder, self.extensions = column, root, folder, extensions
        self.labelled, self.names, self.scan = labelled, names, scan
        self.label_ids = {name: i for i, name in enumerate(names)}
        metadata = _metadata(folder)
        self.join = None
        if metadata is not None:
            reserved = {column: f"the discovered {column} paths"}
            if labelled:
                reserved["label"] = "the labels given by the sub-folder names"
            self.join = _MetadataJoin(metadata, folder, reserved, scan.base_names)
        meta_columns = [] if self.join is None else self.join.columns
        order = [column, *meta_columns, *(["label"] if labelled else [])]
        if features is None:
            media = _image_feature(folder, extensions, root) if kind == "imagefolder" else Audio()
            inferred = {} if self.join is None else self.join.features()
            features = Features(
                {
                    column: media,
                    **({"label": ClassLabel(names=names)} if labelled else {}),
                    **inferred,
                }
            )
            features = Features({k: features[k] for k in order})
        else:
            features = Features(features).matching(order)
        self.features = features

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The split's rows, ``BATCH_ROWS`` at a time; the folder must not change meanwhile."""
        digest, count, chunk = hashlib.sha256(), 0, []
        for media in _walk(self.folder, self.extensions, self.root):
            digest.update(media.key())
            count += 1
            chunk.append(media)
            if len(chunk) == BATCH_ROWS:
                yield from self._encode(chunk)
                chunk = []
        if chunk or not count:
            yield from self._encode(chunk)
        if digest.hexdigest() != self.scan.digest or count != self.scan.count:
            raise RuntimeError(
                f"files under {self.folder} changed while it was being loaded; load it again"
            )

    def _encode(self, files: list[_Media]) -> Iterator[pa.RecordBatch]:
        data: dict[str, Any] = {self.column: [m.path for m in files]}
        if self.join is not None:
            data.update(self.join.rows(files))
        if self.labelled:
            data["label"] = [self.label_ids[m.parent] for m in files]
        table = Dataset.from_dict(data, features=self.features).data
        yield from table.to_batches() or self.features.arrow_schema.empty_table().to_batches()


def _metadata_file(folder: Path) -> Path | None:
    csv_file, jsonl_file = folder / "metadata.csv", folder / "metadata.jsonl"
    return csv_file if csv_file.is_file() else jsonl_file if jsonl_file.is_file() else None


def _metadata(folder: Path) -> tuple[Path, pa.Table] | None:
    """The split's ``metadata.csv`` or ``metadata.jsonl`` as an Arrow table, one type per column
    (read by Arrow's columnar CSV / JSON readers, as a table, not cell by cell)."""
    file = _metadata_file(folder)
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
        if file.name == "metadata.csv":
            table = pcsv.read_csv(
                pa.BufferReader(raw), convert_options=pcsv.ConvertOptions(column_types=strings)
            )
        else:
            check_json_depth(raw, f"cannot read the metadata file {file}")
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


class _MetadataJoin:
    """A split's metadata table, matched to media files on its ``file_name`` column (the path
    relative to the split folder, or a base name that is unique among both the rows and the
    files)."""

    def __init__(
        self,
        metadata: tuple[Path, pa.Table],
        folder: Path,
        reserved: dict[str, str],
        base_names: Counter,
    ) -> None:
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
        rows: dict[str, int] = {}
        for i, name in enumerate(table.column("file_name").to_pylist()):
            if not name:
                raise ValueError(f"{file}: row {i} has an empty 'file_name'")
            target = str(resolve_inside(folder, name, f"{file.name} row {i}: file_name"))
            if target in rows:
                raise ValueError(
                    f"{file}: rows {rows[target]} and {i} both describe file_name {name!r}"
                )
            rows[target] = i
        by_base: dict[str, list[int]] = {}
        for target, i in rows.items():
            by_base.setdefault(os.path.basename(target), []).append(i)
        self.file, self.folder, self.targets, self.by_base = file, folder, rows, by_base
        self.base_names = base_names
        self.table = table.drop_columns(["file_name"])
        self.columns = self.table.column_names

    def features(self) -> Features:
        """The metadata columns' features, as ``Dataset.from_dict`` infers them."""
        empty = self.table.slice(0, 0)
        return Dataset.from_dict(
            {n: empty.column(n).combine_chunks() for n in self.columns}
        ).features

    def rows(self, files: list[_Media]) -> dict[str, pa.Array]:
        """The metadata columns, one value per media file in ``files``."""
        order = []
        for media in files:
            i = self.targets.get(os.path.abspath(media.path))
            if i is None:
                base = os.path.basename(media.rel)
                candidates = self.by_base.get(base, [])
                if len(candidates) == 1 and self.base_names[base] == 1:
                    i = candidates[0]
            if i is None:
                raise ValueError(f"{self.file}: {media.rel} has no row in the metadata")
            order.append(i)
        picked = self.table.take(pa.array(order, type=pa.int64()))
        return {name: picked.column(name).combine_chunks() for name in self.columns}


def load_text_folder(data_dir: str | Path) -> dict[str, Dataset]:
    """The splits of a folder of class sub-folders of ``.txt`` files as ``{split: Dataset}``:
    one row per file, its whole text (UTF-8) in ``text`` and its sub-folder's name in ``label``
    (a ``ClassLabel`` of the sub-folder names, sorted), split folders as :func:`load_folder`
    reads them, files in the order of a sorted walk. Only files inside ``data_dir`` are read (a
    link leading outside is refused); a file that is not UTF-8 is refused naming it and the byte.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for name, text in [("pos/a.txt", "a fine film"), ("neg/b.txt", "dull"), ("pos/c.txt", "good")]:
    ...     (root / name).parent.mkdir(exist_ok=True)
    ...     _ = (root / name).write_text(text)
    >>> train = load_text_folder(root)["train"]
    >>> train["text"][:], train["label"][:], train.features["label"].names
    (['dull', 'a fine film', 'good'], [0, 1, 1], ['neg', 'pos'])
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"text folder: data_dir {str(root)!r} is not a folder")
    split_dirs, _, scans = _scan_splits(root, TEXT_EXTENSIONS)
    if not any(scan.count for scan in scans.values()):
        raise FileNotFoundError(f"text folder: no .txt files under {root}")
    direct = next((str(f) for s, f in split_dirs.items() if scans[s].direct), None)
    if direct is not None:
        raise ValueError(
            f"text folder {root}: .txt files lie directly in {direct}; a text classifier of a "
            "folder needs one sub-folder per class (FOLDER/pos/1.txt, FOLDER/neg/2.txt)"
        )
    names = sorted(set().union(*(scan.parents for scan in scans.values())))
    features = Features({"text": Value("string"), "label": ClassLabel(names=names)})
    ids = {name: i for i, name in enumerate(names)}
    out = {}
    for split, folder in split_dirs.items():
        texts, labels = [], []
        for media in _walk(folder, TEXT_EXTENSIONS, root):
            data = Path(media.path).read_bytes()
            try:
                texts.append(data.decode("utf-8"))
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"cannot read {media.path}: not UTF-8 text ({err.reason} at byte {err.start})"
                ) from None
            labels.append(ids[media.parent])
        out[split] = Dataset.from_dict({"text": texts, "label": labels}, features=features)
    return out
