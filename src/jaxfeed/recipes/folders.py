"""What a local folder given as ``--data`` is (:func:`folder_kind`): a ``save_to_disk`` folder,
a folder of data files (the Hub layout), or a folder of images, audio clips or ``.txt`` texts
by class sub-folder, whichever has the most files (images first on a tie, then audio clips:
captions beside as many images leave it an image folder). The files it does not read are
counted by extension in a line of the run, and the class sub-folders left with no file it reads
are named in the error of a folder with one class.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> for name in ["go/a.png", "go/b.png", "py/c.svg", "rust/d.svg"]:
...     (root / name).parent.mkdir(exist_ok=True)
...     _ = (root / name).write_bytes(b"")
>>> found = folder_kind(root)
>>> found.kind, found.loader
('image folder', 'imagefolder')
>>> print(found.notes[0])
skipped 2 files an image folder does not read: 2 .svg (it reads .bmp, .gif, .jpeg, .jpg, .pgm, .png, .ppm, .tif, .tiff, .webp: convert the .svg files to train on them)
>>> found.unread_classes
"the sub-folders 'py', 'rust' hold no file an image folder reads (2 .svg)"
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jaxfeed.data.formats.files import file_format
from jaxfeed.data.load.folder import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
    SPLIT_NAMES,
    TEXT_EXTENSIONS,
)
from jaxfeed.recipes.config import ConfigError

METADATA = ("metadata.csv", "metadata.jsonl")  # read by an image or audio folder
# the folders of files by class sub-folder: (kind, loader, the extensions it reads)
FOLDERS = (
    ("image folder", "imagefolder", IMAGE_EXTENSIONS),
    ("audio folder", "audiofolder", AUDIO_EXTENSIONS),
    ("folder of texts by class", "textfolder", TEXT_EXTENSIONS),
)
SHOWN = 5  # extensions named in a line, the most files first


@dataclass
class Folder:
    """What :func:`folder_kind` found: the kind and its loader (a ``load_dataset`` name or the
    folder), lines on the files it leaves unread, and the class sub-folders where it reads
    nothing (for the error of a folder with one class; None: none)."""

    kind: str
    loader: str
    notes: list[str] = field(default_factory=list)
    unread_classes: str | None = None


@dataclass
class _Files:
    """One walk over a folder: files by extension, and by class sub-folder."""

    suffixes: Counter = field(default_factory=Counter)
    classes: dict[str, Counter] = field(default_factory=dict)  # sub-folder -> extensions
    loose_texts: int = 0  # .txt files outside any class sub-folder (a text folder refuses them)
    data: int = 0  # data files (Parquet, CSV, JSON Lines, Arrow), metadata files not counted


def _walk(folder: Path) -> _Files:
    files = _Files()
    for p in folder.rglob("*"):
        parts = p.relative_to(folder).parts
        if any(part.startswith(".") for part in parts) or not p.is_file():
            continue
        if p.name in METADATA:
            continue
        suffix = p.suffix.lower()
        files.suffixes[suffix] += 1
        if suffix not in TEXT_EXTENSIONS and file_format(p):
            files.data += 1
        labelled = len(parts) > 2 or (len(parts) == 2 and parts[0].lower() not in SPLIT_NAMES)
        if labelled:
            files.classes.setdefault(parts[-2], Counter())[suffix] += 1
        elif suffix in TEXT_EXTENSIONS:
            files.loose_texts += 1
    return files


def folder_kind(folder: Path) -> Folder:
    """What ``folder`` is (see the module doc); a folder with nothing jaxfeed reads is refused,
    naming what it holds."""
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        return Folder("save_to_disk folder", str(folder))
    files = _walk(folder)
    if files.data:
        return Folder("Hub-layout folder of data files", str(folder))
    counts = [sum(files.suffixes[s] for s in extensions) for _, _, extensions in FOLDERS]
    counts[2] -= files.loose_texts  # texts are read by class sub-folder only
    best = max(range(len(FOLDERS)), key=lambda i: (counts[i], -i))
    if not counts[best]:
        if files.loose_texts:  # .txt files without classes: their lines, as the Hub layout
            return Folder("Hub-layout folder of data files", str(folder))
        held = _shown(files.suffixes)
        raise ConfigError(
            f"--data {folder}: found no images ({', '.join(sorted(IMAGE_EXTENSIONS))}), audio "
            f"clips ({', '.join(sorted(AUDIO_EXTENSIONS))}), sub-folders of .txt texts by "
            f"class, or Parquet/CSV/JSON/Arrow files in it" + (f"; it holds {held}" if held else "")
        )
    kind, loader, extensions = FOLDERS[best]
    unread = Counter({s: n for s, n in files.suffixes.items() if s not in extensions})
    found = Folder(kind, loader)
    if unread:
        found.notes.append(_skipped(kind, unread, extensions))
    empty = sorted(c for c, n in files.classes.items() if not any(n[s] for s in extensions))
    if empty:
        held = _shown(sum((files.classes[c] for c in empty), Counter()))
        found.unread_classes = (
            f"the sub-folder{'s' if len(empty) > 1 else ''} {', '.join(map(repr, empty[:10]))}"
            f"{', ...' if len(empty) > 10 else ''} hold{'' if len(empty) > 1 else 's'} no file "
            f"{_article(kind)} {kind} reads ({held})"
        )
    return found


def _skipped(kind: str, unread: Counter, extensions: set[str]) -> str:
    """The line on the files a folder of ``kind`` leaves unread, and what to do about them."""
    order = [s for s, _ in unread.most_common()]
    media = [s for s in order if s in IMAGE_EXTENSIONS | AUDIO_EXTENSIONS | TEXT_EXTENSIONS]
    other = [s or "extensionless" for s in order if s not in media]
    hints = []
    if other:
        hints.append(
            f"it reads {', '.join(sorted(extensions))}: convert the "
            f"{', '.join(other[:SHOWN])} files to train on them"
        )
    if media:
        hints.append(
            "a run learns from one kind of file: give the "
            f"{', '.join(media[:SHOWN])} files a folder of their own to train on them"
        )
    total = sum(unread.values())
    return (
        f"skipped {total:,} file{'s' if total > 1 else ''} {_article(kind)} {kind} does not "
        f"read: {_shown(unread)} ({'; '.join(hints)})"
    )


def _shown(counts: Counter) -> str:
    """``8 .svg, 2 .wav`` (the most files first), ``1 without an extension``.

    >>> _shown(Counter({".svg": 8, "": 1, ".wav": 2}))
    '8 .svg, 2 .wav, 1 without an extension'
    """
    parts = [f"{n:,} {s}" if s else f"{n:,} without an extension" for s, n in counts.most_common()]
    more = f", ... ({len(parts) - SHOWN} more extensions)" if len(parts) > SHOWN else ""
    return ", ".join(parts[:SHOWN]) + more


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"
