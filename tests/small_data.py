"""Small generated data sets a new user might hand ``jaxfeed train`` (issue 40): a folder of pure
tones, a two-class image folder and a short text CSV, each with ``train`` and ``test`` parts and
an obvious signal, so that the command's defaults must reach a high test accuracy on them."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image

from audio_clips import write_wav

TONES = {"low": 220.0, "mid": 660.0, "high": 1760.0}


def tone_folder(root, train=40, test=12, seconds=1.0, rate=8000, seed=0) -> Path:
    """``root/{train,test}/<class>/<i>.wav``: one-second tones of 220, 660 and 1,760 Hz with a
    random phase and mild noise (the issue's 120-clip folder: 40 train and 12 test per class)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    t = np.arange(round(seconds * rate)) / rate
    for split, count in (("train", train), ("test", test)):
        for name, freq in TONES.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                wave = 0.4 * np.sin(2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi))
                write_wav(folder / f"{i}.wav", wave + 0.05 * rng.normal(size=len(t)), rate)
    return root


def image_folder(root, train=24, test=6, size=32, seed=0) -> Path:
    """``root/{train,test}/{horizontal,vertical}/<i>.png``: noisy grey images of horizontal or
    vertical stripes at a random phase (60 images: 24 train and 6 test per class)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    grid = np.arange(size)
    for split, count in (("train", train), ("test", test)):
        for name in ("horizontal", "vertical"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                period = rng.uniform(6, 10)
                wave = np.sin(2 * np.pi * grid / period + rng.uniform(0, 2 * np.pi))
                stripes = np.tile(wave[:, None], (1, size))
                img = stripes if name == "horizontal" else stripes.T
                img = 128 + 80 * img + rng.normal(0, 20, (size, size))
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / f"{i}.png")
    return root


WORDS = [
    "the",
    "a",
    "movie",
    "film",
    "story",
    "plot",
    "actor",
    "scene",
    "was",
    "is",
    "it",
    "this",
    "and",
    "very",
    "quite",
    "rather",
]
SIGNAL = {
    "pos": ["great", "wonderful", "excellent", "loved"],
    "neg": ["awful", "boring", "terrible", "hated"],
}


def text_csv(root, rows=200, test=40, seed=0) -> Path:
    """``root/train.csv`` and ``root/test.csv`` (``text,label``; 200 rows, 40 of them test): filler
    words and one or two words of the label's sentiment in each text."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(rows):
        label = ("pos", "neg")[i % 2]
        words = list(rng.choice(WORDS, size=rng.integers(5, 12)))
        for _ in range(rng.integers(1, 3)):
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(SIGNAL[label])))
        lines.append((" ".join(words), label))
    order = rng.permutation(rows)
    for name, part in (("train", order[test:]), ("test", order[:test])):
        with open(root / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(lines[j] for j in part)
    return root
