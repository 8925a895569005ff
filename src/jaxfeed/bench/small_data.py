"""Small generated data sets with an obvious signal, one per kind a user hands ``jaxfeed train``
(issue 40): folders of tones and chirps, of striped images, a sentiment CSV, a text corpus and a
numeric/categorical table, each with ``train`` and ``test`` parts. The command's defaults must
reach a high figure on them: ``benchmarks/quality.py`` measures it, the tests
(``tests/small_data.py``) check it.

Every generator is seeded, so the same arguments write the same bytes.

>>> import tempfile
>>> from pathlib import Path
>>> with tempfile.TemporaryDirectory() as tmp:
...     root = text_csv(Path(tmp) / "text", rows=10, test=4)
...     print(sorted(p.name for p in root.iterdir()), (root / "test.csv").read_text().count("\\n"))
['test.csv', 'train.csv'] 5
"""

from __future__ import annotations

import csv
import math
import wave
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

TONES = {"low": 220.0, "mid": 660.0, "high": 1760.0}
WORDS = ["the", "a", "movie", "film", "story", "plot", "actor", "scene", "was", "is", "it", "this",
         "and", "very", "quite", "rather"]  # fmt: skip
SIGNAL = {
    "pos": ["great", "wonderful", "excellent", "loved"],
    "neg": ["awful", "boring", "terrible", "hated"],
}


def write_wav(path: str | Path, samples: np.ndarray, rate: int) -> None:
    """16-bit mono PCM of ``samples`` (clipped to [-1, 1]) with the standard library's ``wave``."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def audio_folder(
    root: str | Path,
    classes: Mapping[str, float | str] = TONES,
    train: int = 40,
    test: int = 12,
    seconds: float = 1.0,
    rate: int = 8000,
    seed: int = 0,
) -> Path:
    """``root/{train,test}/<class>/<i>.wav``: per class a tone of its frequency in Hz, or a chirp
    (``"rising"`` or ``"falling"``, between 300-600 and 2,000-3,000 Hz), with a random phase and
    mild noise (by default 40 train and 12 test clips of three tones)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    t = np.arange(round(seconds * rate)) / rate
    for split, count in (("train", train), ("test", test)):
        for name, kind in classes.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                if kind == "rising":
                    low = rng.uniform(300, 600)
                    freq = np.linspace(low, rng.uniform(2000, 3000), len(t))
                elif kind == "falling":
                    high = rng.uniform(2000, 3000)
                    freq = np.linspace(high, rng.uniform(300, 600), len(t))
                else:
                    freq = None
                if freq is None:  # a tone
                    phase = 2 * np.pi * float(kind) * t + rng.uniform(0, 2 * np.pi)
                else:
                    phase = 2 * np.pi * np.cumsum(freq) / rate + rng.uniform(0, 2 * np.pi)
                noise = 0.05 * rng.normal(size=len(t))
                write_wav(folder / f"{i}.wav", 0.4 * np.sin(phase) + noise, rate)
    return root


def image_folder(
    root: str | Path,
    train: int = 24,
    test: int = 6,
    size: int = 32,
    seed: int = 0,
    classes: Sequence[str] = ("horizontal", "vertical"),
) -> Path:
    """``root/{train,test}/<class>/<i>.png``: noisy grey images of stripes at a random period and
    phase, per class ``"horizontal"``, ``"vertical"`` or ``"diagonal"`` (by default 24 train and
    6 test images of two classes)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    y, x = np.mgrid[0:size, 0:size]
    axes = {"horizontal": y, "vertical": x, "diagonal": (x + y) / math.sqrt(2)}
    for split, count in (("train", train), ("test", test)):
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                img = np.sin(
                    2 * np.pi * axes[name] / rng.uniform(6, 10) + rng.uniform(0, 2 * np.pi)
                )
                img = 128 + 80 * img + rng.normal(0, 20, (size, size))
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / f"{i}.png")
    return root


def text_csv(
    root: str | Path,
    rows: int = 200,
    test: int = 40,
    seed: int = 0,
    filler: Sequence[str] = WORDS,
    signal: Mapping[str, Sequence[str]] = SIGNAL,
    signal_words: tuple[int, int] = (1, 2),
) -> Path:
    """``root/train.csv`` and ``root/test.csv`` (``text,label``; ``rows`` rows, ``test`` of them
    test): 5 to 11 ``filler`` words and ``signal_words`` (at least, at most) words of the label's
    sentiment in each text, labels alternating over ``signal``'s keys."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    labels, (least, most) = list(signal), signal_words
    lines = []
    for i in range(rows):
        label = labels[i % len(labels)]
        words = list(rng.choice(filler, size=rng.integers(5, 12)))
        count = least if least == most else rng.integers(least, most + 1)  # no draw when fixed
        for _ in range(count):
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(signal[label])))
        lines.append((" ".join(words), label))
    order = rng.permutation(rows)
    for name, part in (("train", order[test:]), ("test", order[:test])):
        with open(root / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(lines[j] for j in part)
    return root


def corpus(root: str | Path, lines: int = 2000, seed: int = 0) -> Path:
    """``root/corpus.txt``: ``lines`` short sentences of a tiny grammar (a language model's
    data); returns the file."""
    rng = np.random.default_rng(seed)
    subjects, verbs = ["the cat", "a dog", "my friend"], ["sees", "likes"]
    things = ["the sun", "a tree"]
    text = "\n".join(
        f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(things)}." for _ in range(lines)
    )
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text(text + "\n")
    return root / "corpus.txt"


def regression_table(root: str | Path, rows: int = 400, test: int = 80, seed: int = 0) -> Path:
    """``root/train.csv`` and ``root/test.csv`` (``a,b,colour,size,target``; the first ``test``
    rows are test): a target linear in the numbers plus an effect per category, mild noise."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=rows), rng.normal(size=rows)
    colour = rng.choice(["red", "green", "blue"], size=rows)
    size = rng.choice(["S", "M", "L", "XL"], size=rows)
    effect = {"red": 2.0, "green": 0.0, "blue": -2.0, "S": -1.0, "M": 0.0, "L": 1.0, "XL": 2.0}
    y = 3 * a - 2 * b + np.array([effect[c] + effect[s] for c, s in zip(colour, size, strict=True)])
    y = y + 0.3 * rng.normal(size=rows)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", slice(test, None)), ("test", slice(0, test))):
        with open(root / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["a", "b", "colour", "size", "target"])
            for row in zip(a[part], b[part], colour[part], size[part], y[part], strict=True):
                writer.writerow([f"{row[0]:.4f}", f"{row[1]:.4f}", row[2], row[3], f"{row[4]:.4f}"])
    return root


ICONS = ("square", "disc", "triangle", "cross", "ring", "bar", "diamond")  # icon_folder's shapes


def _draw_shape(draw, shape: str, box: tuple[float, float, float, float], fill) -> None:
    """One of :data:`ICONS` (or ``"square"``/``"disc"``) drawn in ``box`` with Pillow."""
    x0, y0, x1, y1 = box
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    if shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "disc":
        draw.ellipse(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=fill)
    elif shape == "cross":
        w = r / 3
        draw.rectangle((cx - w, y0, cx + w, y1), fill=fill)
        draw.rectangle((x0, cy - w, x1, cy + w), fill=fill)
    elif shape == "ring":
        draw.ellipse(box, outline=fill, width=max(2, round(r / 3)))
    elif shape == "bar":
        draw.rectangle((x0, cy - r / 4, x1, cy + r / 4), fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=fill)
    else:
        raise ValueError(shape)


def icon_folder(
    root: str | Path,
    train: int = 20,
    test: int = 6,
    size: int = 32,
    seed: int = 0,
    classes: Sequence[str] = ICONS,
) -> Path:
    """``root/{train,test}/<class>/<i>.png``: RGBA icons as symbolic icon themes ship them: a dark
    glyph (the class's shape, of a random size, place and grey level) on a fully transparent
    background of the glyph's own colour, so that dropping the alpha channel leaves a plain dark
    square (the shape is in the alpha channel only)."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    root = Path(root)
    for split, count in (("train", train), ("test", test)):
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                side = rng.uniform(0.55, 0.85) * size
                x0, y0 = rng.uniform(1, size - side - 1, 2)
                level = int(rng.integers(0, 60))
                image = Image.new("RGBA", (size, size), (level, level, level, 0))
                _draw_shape(
                    ImageDraw.Draw(image), name, (x0, y0, x0 + side, y0 + side),
                    (level, level, level, 255),
                )  # fmt: skip
                image.save(folder / f"{i}.png")
    return root


def shape_folder(
    root: str | Path, train: int = 22, test: int = 50, size: int = 24, seed: int = 0
) -> Path:
    """``root/{train,test}/{square,disc}/<i>.png``: RGB images that differ by shape only: a square
    or a disc of a random colour, size and place on a background of another random colour (by
    default 44 train images, issue 54's folder)."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    root = Path(root)
    for split, count in (("train", train), ("test", test)):
        for name in ("square", "disc"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                back = tuple(int(v) for v in rng.integers(0, 256, 3))
                fill = tuple(
                    (b + int(d)) % 256 for b, d in zip(back, rng.integers(80, 176, 3), strict=True)
                )
                image = Image.new("RGB", (size, size), back)
                side = rng.uniform(0.4, 0.7) * size
                x0, y0 = rng.uniform(0, size - side, 2)
                _draw_shape(ImageDraw.Draw(image), name, (x0, y0, x0 + side, y0 + side), fill)
                image.save(folder / f"{i}.png")
    return root


def texture_folder(
    root: str | Path, train: int = 22, test: int = 50, size: int = 24, seed: int = 0
) -> Path:
    """``root/{train,test}/{checks,dots}/<i>.png``: grey images that differ by texture only: a
    checkerboard or a grid of dots, of a random period (4 to 6 pixels), phase, contrast and mean
    brightness, with noise."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    y, x = np.mgrid[0:size, 0:size]
    for split, count in (("train", train), ("test", test)):
        for name in ("checks", "dots"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                period = rng.uniform(4, 6)
                u = (x + rng.uniform(0, period)) / period
                v = (y + rng.uniform(0, period)) / period
                if name == "checks":
                    pattern = ((np.floor(u) + np.floor(v)) % 2) * 2 - 1
                else:
                    d = np.hypot(u - np.floor(u) - 0.5, v - np.floor(v) - 0.5)
                    pattern = np.where(d < 0.25, 1.0, -1.0)
                img = rng.uniform(90, 170) + rng.uniform(30, 70) * pattern
                img = img + rng.normal(0, 10, (size, size))
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / f"{i}.png")
    return root
