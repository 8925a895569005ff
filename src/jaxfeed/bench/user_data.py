"""Generated data of the three shapes issue 64 met on real data nobody here wrote, where the
command's default models lost to a linear model: transparent icons of a desktop theme in 8
classes (:func:`theme_icons`), short code-like texts labelled by package with whole modules held
out (:func:`code_snippets`), and a table of installed packages with a repeated name column
(:func:`package_table`). ``benchmarks/quality.py`` trains on them with the defaults and puts the
baselines beside the scores.

Each generator is seeded, so the same arguments write the same bytes.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     root = code_snippets(Path(tmp) / "code")
...     print(sorted(p.name for p in root.iterdir()), (root / "test.csv").read_text().count("\\n") > 100)
['test.csv', 'train.csv'] True
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

# ---------------------------------------------------------------------------------- icons
# what a theme's icon folders show: each class a few glyphs (a theme's go-up, go-down, ...)
THEME_CLASSES = {
    "go": ("arrow_up", "arrow_down", "arrow_left", "arrow_right"),
    "media": ("play", "pause", "stop", "record"),
    "document": ("page", "page_lines", "page_fold"),
    "folder": ("folder", "folder_open"),
    "mail": ("envelope", "envelope_open"),
    "list": ("lines", "bullets", "checks"),
    "edit": ("pencil", "cross_out", "brush"),
    "view": ("eye", "magnifier", "grid"),
}
ICON_SIZES = (16, 22, 24, 32, 48)  # the sizes a theme ships, 48 the most common
SIZE_WEIGHTS = (0.15, 0.1, 0.15, 0.15, 0.45)


def _glyph(draw: ImageDraw.ImageDraw, glyph: str, s: float, fill: tuple, accent: tuple) -> None:
    """One glyph of :data:`THEME_CLASSES` on a canvas of side ``s`` (a 16-unit grid scaled)."""
    u = s / 16

    def box(x0: float, y0: float, x1: float, y1: float) -> list[float]:
        return [x0 * u, y0 * u, x1 * u, y1 * u]

    def poly(*points: tuple[float, float]) -> list[tuple[float, float]]:
        return [(x * u, y * u) for x, y in points]

    width = max(1, round(1.5 * u))
    if glyph.startswith("arrow_"):
        shapes = {
            "up": ((8, 2), (14, 9), (10, 9), (10, 14), (6, 14), (6, 9), (2, 9)),
            "down": ((8, 14), (14, 7), (10, 7), (10, 2), (6, 2), (6, 7), (2, 7)),
            "left": ((2, 8), (9, 2), (9, 6), (14, 6), (14, 10), (9, 10), (9, 14)),
            "right": ((14, 8), (7, 2), (7, 6), (2, 6), (2, 10), (7, 10), (7, 14)),
        }
        draw.polygon(poly(*shapes[glyph.split("_")[1]]), fill=fill)
    elif glyph == "play":
        draw.polygon(poly((4, 2), (14, 8), (4, 14)), fill=fill)
    elif glyph == "pause":
        draw.rectangle(box(3, 2, 6.5, 14), fill=fill)
        draw.rectangle(box(9.5, 2, 13, 14), fill=fill)
    elif glyph == "stop":
        draw.rectangle(box(3, 3, 13, 13), fill=fill)
    elif glyph == "record":
        draw.ellipse(box(2, 2, 14, 14), fill=accent)
    elif glyph.startswith("page"):
        draw.polygon(poly((3, 1), (10, 1), (13, 4), (13, 15), (3, 15)), fill=fill)
        if glyph == "page_lines":
            for y in (6, 8.5, 11):
                draw.rectangle(box(5, y, 11, y + 1), fill=(255, 255, 255, 255))
        if glyph == "page_fold":
            draw.polygon(poly((10, 1), (13, 4), (10, 4)), fill=accent)
    elif glyph.startswith("folder"):
        draw.polygon(poly((1, 3), (6, 3), (7.5, 5), (15, 5), (15, 13), (1, 13)), fill=fill)
        if glyph == "folder_open":
            draw.polygon(poly((3, 7), (16, 7), (14, 13), (1, 13)), fill=accent)
    elif glyph.startswith("envelope"):
        draw.rectangle(box(1, 4, 15, 13), fill=fill)
        top = (8, 1) if glyph == "envelope_open" else (8, 9)
        draw.line(poly((1, 4), top, (15, 4)), fill=(255, 255, 255, 255), width=width)
    elif glyph in ("lines", "bullets", "checks"):
        for y in (3, 7, 11):
            x0 = 1 if glyph == "lines" else 5
            draw.rectangle(box(x0, y, 15, y + 2), fill=fill)
            if glyph == "bullets":
                draw.ellipse(box(1, y, 3, y + 2), fill=accent)
            if glyph == "checks":
                draw.line(poly((1, y + 1), (2, y + 2), (4, y)), fill=accent, width=width)
    elif glyph == "pencil":
        draw.polygon(poly((11, 1), (15, 5), (5, 15), (1, 15), (1, 11)), fill=fill)
    elif glyph == "cross_out":
        draw.line(poly((2, 2), (14, 14)), fill=fill, width=2 * width)
        draw.line(poly((14, 2), (2, 14)), fill=fill, width=2 * width)
    elif glyph == "brush":
        draw.rectangle(box(7, 1, 9, 9), fill=fill)
        draw.ellipse(box(4, 8, 12, 15), fill=accent)
    elif glyph == "eye":
        draw.ellipse(box(1, 4, 15, 12), fill=fill)
        draw.ellipse(box(5.5, 5.5, 10.5, 10.5), fill=(255, 255, 255, 255))
        draw.ellipse(box(7, 7, 9, 9), fill=fill)
    elif glyph == "magnifier":
        draw.ellipse(box(1, 1, 10, 10), outline=fill, width=2 * width)
        draw.line(poly((9, 9), (15, 15)), fill=fill, width=2 * width)
    elif glyph == "grid":
        for x in (1, 9):
            for y in (1, 9):
                draw.rectangle(box(x, y, x + 6, y + 6), fill=fill)
    else:
        raise ValueError(glyph)


def theme_icons(
    root: str | Path, train: int = 227, test: int = 66, seed: int = 0,
    classes: dict[str, tuple[str, ...]] | None = None,
) -> Path:  # fmt: skip
    """``root/{train,test}/<class>/<i>.png``: RGBA icons as a desktop theme ships them, grouped
    by what they show (8 classes of 2-4 glyphs each; ``train`` and ``test`` icons over all
    classes, unevenly: a theme has more of some): each a glyph on a transparent background,
    at one of a theme's sizes (16 to 48 pixels, 48 the most common), in a symbolic dark grey or
    a colour with an accent, shifted and scaled a little; the background's colour under the
    transparency is the glyph's own (dropping the alpha channel leaves a filled square)."""
    rng = np.random.default_rng(seed)
    classes = THEME_CLASSES if classes is None else classes
    names = list(classes)
    share = rng.dirichlet(np.full(len(names), 4.0))  # some folders hold more icons than others
    root = Path(root)
    for split, count in (("train", train), ("test", test)):
        picks = rng.choice(len(names), size=count, p=share)
        picks[: len(names)] = np.arange(len(names))  # every class in every split
        for i, k in enumerate(picks):
            folder = root / split / names[k]
            folder.mkdir(parents=True, exist_ok=True)
            _icon(rng, classes[names[k]]).save(folder / f"{split}-{i}.png")
    return root


def _icon(rng: np.random.Generator, glyphs: tuple[str, ...]) -> Image.Image:
    """One icon of one of ``glyphs``, at a theme's size, shifted and scaled a little."""
    side = int(rng.choice(ICON_SIZES, p=SIZE_WEIGHTS))
    if rng.random() < 0.5:  # symbolic: one dark grey
        level = int(rng.integers(30, 90))
        fill, accent = (level, level, level, 255), (level, level, level, 255)
    else:
        fill = (*(int(v) for v in rng.integers(40, 220, 3)), 255)
        accent = (*(int(v) for v in rng.integers(40, 220, 3)), 255)
    big = 4 * side  # drawn large, then reduced: anti-aliased edges as a theme's PNGs have
    glyph = Image.new("RGBA", (big, big), (*fill[:3], 0))
    _glyph(ImageDraw.Draw(glyph), str(rng.choice(glyphs)), big, fill, accent)
    scale = rng.uniform(0.8, 1.0)
    inner = max(1, round(big * scale))
    glyph = glyph.resize((inner, inner), Image.Resampling.LANCZOS)
    canvas = Image.new("RGBA", (big, big), (*fill[:3], 0))
    dx, dy = (int(v) for v in rng.integers(0, big - inner + 1, 2))
    canvas.alpha_composite(glyph, (dx, dy))
    return canvas.resize((side, side), Image.Resampling.LANCZOS)


# ---------------------------------------------------------------------------------- code
PACKAGES = {  # a package's own words, which every one of its modules uses
    "net": ("socket", "connect", "request", "header", "url", "response", "send", "recv",
            "timeout", "host", "port", "proxy"),
    "fs": ("path", "open", "read", "write", "dir", "file", "stat", "mode", "walk", "glob",
           "remove", "rename"),
    "text": ("string", "split", "join", "encode", "decode", "format", "strip", "line",
             "pattern", "match", "replace", "token"),
    "math": ("sum", "mean", "sqrt", "log", "exp", "round", "floor", "ratio", "total",
             "count", "value", "digits"),
    "time": ("clock", "date", "day", "hour", "zone", "delta", "sleep", "epoch", "month",
             "year", "week", "tick"),
    "data": ("record", "field", "table", "row", "column", "schema", "query", "insert",
             "select", "key", "index", "cursor"),
}  # fmt: skip
COMMON = ("self", "return", "if", "else", "for", "in", "not", "None", "True", "False", "len",
          "args", "result", "error", "name", "items", "get", "set", "new", "check")  # fmt: skip
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "qu", "sa", "do", "fi", "gu")


def _module_words(rng: np.random.Generator, count: int = 10) -> list[str]:
    """A module's own identifiers: made-up words no other module uses."""
    return ["".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4)))) for _ in range(count)]


def _snippet(rng: np.random.Generator, package: tuple[str, ...], module: list[str]) -> str:
    """One line or two of code: the module's identifiers, a few of the package's words and
    common keywords, in one of a few templates."""
    own = lambda: str(rng.choice(module))  # noqa: E731 (a draw, named for the templates)
    pkg = lambda: str(rng.choice(package))  # noqa: E731
    word = lambda: str(rng.choice(COMMON))  # noqa: E731
    which = int(rng.integers(0, 5))
    if which == 0:
        return f"def {own()}_{pkg()}(self, {own()}): return self.{own()}.{pkg()}({word()})"
    if which == 1:
        return f"{own()} = {own()}.{pkg()}({own()}, {word()}={word()})"
    if which == 2:
        return f"if not self.{own()}: raise {own().title()}Error('{pkg()} {word()}')"
    if which == 3:
        return f"for {own()} in self.{own()}_{pkg()}s: {own()}.{pkg()}({own()})"
    return f"return {own()}_{pkg()}({word()}, {own()}) if {own()} else {word()}"


def code_snippets(
    root: str | Path, per_module: int = 15, modules: int = 9, held_out: int = 2, seed: int = 0
) -> Path:
    """``root/train.csv`` and ``root/test.csv`` (``text,label``): short code-like lines of a
    standard library labelled by their package (6 packages of ``modules`` modules, each with
    ``per_module`` snippets: 810 by default), each line using its module's own made-up
    identifiers, a few of its package's words and common keywords; the test split holds whole
    modules (``held_out`` of each package) that no train line comes from, as a user's
    new code would."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[tuple[str, str]]] = {"train": [], "test": []}
    for label, words in PACKAGES.items():
        for m in range(modules):
            module = _module_words(rng)
            split = "test" if m < held_out else "train"
            parts[split] += [(_snippet(rng, words, module), label) for _ in range(per_module)]
    for split, rows in parts.items():
        order = rng.permutation(len(rows))
        with open(root / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(rows[j] for j in order)
    return root


# ---------------------------------------------------------------------------------- table
SECTIONS = ("libs", "utils", "admin", "devel", "python", "net", "text", "doc")


def package_table(root: str | Path, rows: int = 582, test: int = 59, seed: int = 0) -> Path:
    """``root/train.csv`` and ``root/test.csv``: an operating system's installed packages
    (``package,maintainer,priority,architecture,installed_size,depends,section``), labelled by
    ``section``: 8 sections of uneven size; ``maintainer`` a name repeated across rows (147
    distinct among the 523 train rows: 72% of the rows repeat a name already seen; teams that
    keep a section, and people that keep a few packages, mostly of one), which tells the
    section best; the
    other columns tell it a little (a size and a dependency count per section, architecture
    ``all`` for scripts and documents, a priority); ``package`` a unique name. The last
    ``test`` rows are the test split."""
    rng = np.random.default_rng(seed)
    share = rng.dirichlet(np.full(len(SECTIONS), 3.0))
    teams = {s: [f"{s.title()} Team <team+{s}@lists.example.org>"] for s in SECTIONS}
    people = [f"Person {i} <p{i}@example.org>" for i in range(180)]
    home = rng.integers(0, len(SECTIONS), size=len(people))  # a person's usual section
    size_mean = rng.uniform(5, 9, len(SECTIONS))
    records = []
    for i in range(rows):
        k = int(rng.choice(len(SECTIONS), p=share))
        section = SECTIONS[k]
        if rng.random() < 0.35:
            maintainer = teams[section][0]
        else:
            mine = np.flatnonzero(home == k) if rng.random() < 0.7 else np.arange(len(people))
            maintainer = people[int(rng.choice(mine))]
        arch = "all" if section in ("python", "doc", "text") and rng.random() < 0.8 else "amd64"
        priority = str(rng.choice(["optional", "important", "standard", "required"],
                                  p=[0.85, 0.05, 0.07, 0.03]))  # fmt: skip
        size = int(np.exp(rng.normal(size_mean[k], 1.3)))
        depends = int(rng.poisson(2 + 3 * (section in ("devel", "python"))))
        records.append((f"pkg-{i:04d}", maintainer, priority, arch, size, depends, section))
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    header = ["package", "maintainer", "priority", "architecture", "installed_size", "depends",
              "section"]  # fmt: skip
    for name, part in (("train", records[: rows - test]), ("test", records[rows - test :])):
        with open(root / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(part)
    return root


__all__ = ["PACKAGES", "THEME_CLASSES", "code_snippets", "package_table", "theme_icons"]
