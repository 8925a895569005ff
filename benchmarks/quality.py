"""What ``jaxfeed train`` learns with its defaults only, on a panel of small data sets, one per
kind (issue 40): the figure a user sees (test accuracy, R² or perplexity), the optimizer steps
the budget chose, and the wall time of the whole command.

``python benchmarks/quality.py [--cases digits images audio text lm regression] [--out DIR]``

* ``digits``: the bundled digits (1,797 8x8 images, its own test split);
* ``images``: 240 32x32 grey images of horizontal, vertical or diagonal stripes (201 train, 39 test);
* ``audio``: 120 + 35 one-second clips of three tones (220, 660, 1,760 Hz) and two chirps
  (rising, falling), mild noise, at 8 kHz;
* ``text``: a 200-row sentiment CSV (160 train, 40 test) with one word of the label's sentiment
  among filler words;
* ``lm``: a character-level corpus (``--task lm`` on repeated sentences; validation perplexity);
* ``regression``: 400 rows with two numeric and two categorical columns (R² on 80 test rows).

Every case runs ``python -m jaxfeed.cli train --data DATA --out RUN`` (``--task lm`` for lm) and
reads the run's ``metrics.jsonl``. A figure below its floor (well above chance) is marked FAIL
and the script exits 1. Measured with the machine shared: compare figures, not times.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

FLOORS = {  # (figure, floor, higher is better)
    "digits": ("test accuracy", 0.95, True),
    "images": ("test accuracy", 0.95, True),
    "audio": ("test accuracy", 0.9, True),
    "text": ("test accuracy", 0.95, True),
    "lm": ("validation perplexity", 8.0, False),
    "regression": ("test R2", 0.8, True),
}


def _wav(path: Path, samples: np.ndarray, rate: int) -> None:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def audio_folder(root: Path, train: int = 24, test: int = 7, rate: int = 8000) -> Path:
    """Tones of 220, 660, 1,760 Hz and chirps rising / falling over 300-3,000 Hz, 1 s each."""
    rng = np.random.default_rng(0)
    t = np.arange(rate) / rate
    freqs = {
        "tone220": lambda: np.full_like(t, 220.0),
        "tone660": lambda: np.full_like(t, 660.0),
        "tone1760": lambda: np.full_like(t, 1760.0),
        "rising": lambda: np.linspace(rng.uniform(300, 600), rng.uniform(2000, 3000), len(t)),
        "falling": lambda: np.linspace(rng.uniform(2000, 3000), rng.uniform(300, 600), len(t)),
    }
    for split, count in (("train", train), ("test", test)):
        for name, freq in freqs.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                phase = 2 * np.pi * np.cumsum(freq()) / rate + rng.uniform(0, 2 * np.pi)
                _wav(
                    folder / f"{i}.wav", 0.4 * np.sin(phase) + 0.05 * rng.normal(size=len(t)), rate
                )
    return root


def image_folder(root: Path, train: int = 67, test: int = 13, size: int = 32) -> Path:
    """Noisy grey stripes: horizontal, vertical or diagonal, at a random period and phase."""
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:size, 0:size]
    for split, count in (("train", train), ("test", test)):
        for name in ("horizontal", "vertical", "diagonal"):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                axis = {"horizontal": y, "vertical": x, "diagonal": (x + y) / math.sqrt(2)}[name]
                img = np.sin(2 * np.pi * axis / rng.uniform(6, 10) + rng.uniform(0, 2 * np.pi))
                img = 128 + 80 * img + rng.normal(0, 20, (size, size))
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / f"{i}.png")
    return root


def text_csv(root: Path, rows: int = 200, test: int = 40) -> Path:
    filler = [
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
    ]
    signal = {"pos": ["great", "wonderful", "excellent"], "neg": ["awful", "boring", "terrible"]}
    rng = np.random.default_rng(0)
    lines = []
    for i in range(rows):
        label = ("pos", "neg")[i % 2]
        words = list(rng.choice(filler, size=rng.integers(5, 12)))
        words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(signal[label])))
        lines.append((" ".join(words), label))
    root.mkdir(parents=True, exist_ok=True)
    order = rng.permutation(rows)
    for name, part in (("train", order[test:]), ("test", order[:test])):
        with open(root / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerows([("text", "label"), *(lines[j] for j in part)])
    return root


def corpus(root: Path, lines: int = 2000) -> Path:
    rng = np.random.default_rng(0)
    subjects, verbs, things = (
        ["the cat", "a dog", "my friend"],
        ["sees", "likes"],
        ["the sun", "a tree"],
    )
    text = "\n".join(
        f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(things)}." for _ in range(lines)
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text(text + "\n")
    return root / "corpus.txt"


def regression_table(root: Path, rows: int = 400, test: int = 80) -> Path:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=rows), rng.normal(size=rows)
    colour = rng.choice(["red", "green", "blue"], size=rows)
    size = rng.choice(["S", "M", "L", "XL"], size=rows)
    effect = {"red": 2.0, "green": 0.0, "blue": -2.0, "S": -1.0, "M": 0.0, "L": 1.0, "XL": 2.0}
    y = 3 * a - 2 * b + np.array([effect[c] + effect[s] for c, s in zip(colour, size, strict=True)])
    y = y + 0.3 * rng.normal(size=rows)
    root.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", slice(test, None)), ("test", slice(0, test))):
        with open(root / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["a", "b", "colour", "size", "target"])
            for row in zip(a[part], b[part], colour[part], size[part], y[part], strict=True):
                writer.writerow([f"{row[0]:.4f}", f"{row[1]:.4f}", row[2], row[3], f"{row[4]:.4f}"])
    return root


def prepare(case: str, work: Path) -> list[str]:
    """The data of ``case`` under ``work``, and the command-line arguments naming it."""
    if case == "digits":
        return ["--data", "digits"]
    if case == "images":
        return ["--data", str(image_folder(work / "images"))]
    if case == "audio":
        return ["--data", str(audio_folder(work / "audio"))]
    if case == "text":
        return ["--data", str(text_csv(work / "text"))]
    if case == "lm":
        return ["--task", "lm", "--data", str(corpus(work / "lm"))]
    if case == "regression":
        return ["--data", str(regression_table(work / "table")), "--label-column", "target"]
    raise ValueError(case)


def run_case(case: str, work: Path) -> dict:
    """Train ``case`` with defaults; its figure, steps and wall time."""
    args = prepare(case, work)
    out = work / f"run-{case}"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jaxfeed.cli", "train", *args, "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"case": case, "error": done.stderr.strip().splitlines()[-1:], "wall_s": wall}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    test = next((r for r in rows if r.get("kind") == "test"), {})
    evals = [r for r in rows if "eval_loss" in r]
    name, floor, higher = FLOORS[case]
    if case == "lm":
        value = min(r["eval_perplexity"] for r in evals if "eval_perplexity" in r)
    elif case == "regression":
        value = test["test_r2"]
    else:
        value = test["test_accuracy"]
    steps = max(int(r.get("step", 0)) for r in rows)
    budget = json.loads((out / "config.json").read_text()).get("budget", {})
    ok = value >= floor if higher else value <= floor
    return {
        "case": case, "figure": name, "value": value, "floor": floor, "ok": ok, "steps": steps,
        "batch": budget.get("batch_size"), "wall_s": wall,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(FLOORS), choices=list(FLOORS))
    parser.add_argument("--out", help="keep the data and runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.out or tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = []
        print(
            f"{'case':<12}{'figure':<24}{'value':>8}{'floor':>8}{'steps':>7}{'batch':>7}{'wall s':>8}"
        )
        for case in args.cases:
            r = run_case(case, work)
            results.append(r)
            if "error" in r:
                print(f"{case:<12}ERROR {r['error']}")
                continue
            mark = "" if r["ok"] else "  FAIL"
            print(
                f"{case:<12}{r['figure']:<24}{r['value']:>8.4f}{r['floor']:>8g}{r['steps']:>7}"
                f"{r['batch'] or '':>7}{r['wall_s']:>8.1f}{mark}",
                flush=True,
            )
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
