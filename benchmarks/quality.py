"""What ``jaxfeed train`` learns with its defaults only, on a panel of small data sets, one per
kind (issue 40): the figure a user sees (test accuracy, R² or perplexity), the optimizer steps
the budget chose, and the wall time of the whole command.

``python benchmarks/quality.py [--cases digits images audio text lm regression] [--seeds 0 1 2]
[--out DIR]``

* ``digits``: the bundled digits (1,797 8x8 images, its own test split);
* ``images``: 240 32x32 grey images of horizontal, vertical or diagonal stripes (201 train, 39 test);
* ``shapes``: 24x24 squares against discs of random colours, sizes and places on a background of
  another random colour: the classes differ by shape only (44 train, 100 test; issue 54);
* ``textures``: 24x24 grey checkerboards against grids of dots of a random period, phase,
  contrast and brightness: the classes differ by texture only (44 train, 100 test);
* ``icons``: 32x32 RGBA icons of 7 shapes on a transparent background (the shape is in the alpha
  channel only: composited onto white; 490 train, 98 test);
* ``audio``: 120 + 35 one-second clips of three tones (220, 660, 1,760 Hz) and two chirps
  (rising, falling), mild noise, at 8 kHz;
* ``text``: a 200-row sentiment CSV (160 train, 40 test) with one word of the label's sentiment
  among filler words;
* ``lm``: a character-level corpus (``--task lm`` on repeated sentences; validation perplexity);
* ``regression``: 400 rows with two numeric and two categorical columns (R² on 80 test rows);
* the three shapes of issue 64, where the defaults lost to a linear model
  (:mod:`jaxfeed.bench.user_data`): ``theme``, 227 + 66 transparent icons of a desktop theme in 8
  classes of 2-4 glyphs, at sizes 16-48; ``code``, 810 code-like lines labelled by their package
  (6), the test split whole modules no train line comes from; ``packages``, a 582-row table of
  installed packages labelled by section, with a repeated maintainer column (trained with
  ``--input-columns``).

Every case runs ``python -m jaxfeed.cli train --data DATA --out RUN`` (``--task lm`` for lm) and
reads the run's ``metrics.jsonl`` and ``config.json``: the test figure, and beside it the
baselines the run fitted (``baselines``: the linear model's and the majority class's figures on
the validation split: the test split is read by the chosen model alone) and the model it chose
(``choice``); a run of a jaxfeed without them shows ``-``.
``--jaxfeed "CMD"`` runs another command (another checkout, to measure before and after on the
same data: ``--jaxfeed "env -u PYTHONPATH /work/main/.venv/bin/python -m jaxfeed.cli"``). A figure below its floor (well above chance) is marked FAIL
and the script exits 1. ``--seeds`` runs each case once per seed (``--seed S``; seed 0 is the
command's default, run without the flag): the row gives the mean, the steps and the wall time
of the first seed, and a line below it each seed's figure, steps and wall time; a case fails
when any seed's figure is below its floor. Measured with the machine shared: compare figures,
not times.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jaxfeed.bench.small_data import (
    SIGNAL,
    WORDS,
    audio_folder,
    corpus,
    icon_folder,
    image_folder,
    regression_table,
    shape_folder,
    text_csv,
    texture_folder,
)
from jaxfeed.bench.user_data import code_snippets, package_table, theme_icons

FLOORS = {  # (figure, floor, higher is better)
    "digits": ("test accuracy", 0.95, True),
    "images": ("test accuracy", 0.95, True),
    "shapes": ("test accuracy", 0.95, True),
    "textures": ("test accuracy", 0.95, True),
    "icons": ("test accuracy", 0.95, True),
    "audio": ("test accuracy", 0.9, True),
    "text": ("test accuracy", 0.95, True),
    "lm": ("validation perplexity", 8.0, False),
    "regression": ("test R2", 0.8, True),
    "theme": ("test accuracy", 0.6, True),
    "code": ("test accuracy", 0.6, True),
    "packages": ("test accuracy", 0.6, True),
}
PACKAGE_INPUTS = "maintainer,priority,architecture,installed_size,depends"
# the data of the cases (jaxfeed.bench.small_data): three kinds of stripes, three tones and two
# chirps, exactly one sentiment word among 15 filler words
STRIPES = ("horizontal", "vertical", "diagonal")
SOUNDS = {
    "tone220": 220.0,
    "tone660": 660.0,
    "tone1760": 1760.0,
    "rising": "rising",
    "falling": "falling",
}
FILLER = WORDS[:15]
SENTIMENT = {label: words[:3] for label, words in SIGNAL.items()}


def prepare(case: str, work: Path) -> list[str]:
    """The data of ``case`` under ``work``, and the command-line arguments naming it."""
    if case == "digits":
        return ["--data", "digits"]
    if case == "images":
        return ["--data", str(image_folder(work / "images", 67, 13, classes=STRIPES))]
    if case == "shapes":
        return ["--data", str(shape_folder(work / "shapes"))]
    if case == "textures":
        return ["--data", str(texture_folder(work / "textures"))]
    if case == "icons":
        return ["--data", str(icon_folder(work / "icons", train=70, test=14))]
    if case == "audio":
        return ["--data", str(audio_folder(work / "audio", SOUNDS, train=24, test=7))]
    if case == "text":
        return [
            "--data",
            str(text_csv(work / "text", filler=FILLER, signal=SENTIMENT, signal_words=(1, 1))),
        ]
    if case == "lm":
        return ["--task", "lm", "--data", str(corpus(work / "lm"))]
    if case == "regression":
        return ["--data", str(regression_table(work / "table")), "--label-column", "target"]
    if case == "theme":
        return ["--data", str(theme_icons(work / "theme"))]
    if case == "code":
        return ["--data", str(code_snippets(work / "code"))]
    if case == "packages":
        table = package_table(work / "packages")
        return [
            "--data",
            str(table),
            "--label-column",
            "section",
            "--input-columns",
            PACKAGE_INPUTS,
        ]
    raise ValueError(case)


def run_case(case: str, work: Path, seed: int = 0, command: list[str] | None = None) -> dict:
    """Train ``case`` with defaults (and ``--seed seed`` unless 0, the default) by ``command``
    (default: this Python's ``-m jaxfeed.cli``); its figure, steps, wall time, the baselines'
    test figures and the model the run chose."""
    args = prepare(case, work) + (["--seed", str(seed)] if seed else [])
    out = work / (f"run-{case}" if not seed else f"run-{case}-seed{seed}")
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    command = command or [sys.executable, "-m", "jaxfeed.cli"]
    done = subprocess.run(
        [*command, "train", *args, "--out", str(out)], capture_output=True, text=True
    )
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
    saved = json.loads((out / "config.json").read_text())
    budget, baselines = saved.get("budget", {}), saved.get("baselines") or {}
    key = "eval_r2" if case == "regression" else "eval_accuracy"  # validation: never test
    model = saved.get("options", {}).get("model")
    ok = value >= floor if higher else value <= floor
    return {
        "case": case, "figure": name, "value": value, "floor": floor, "ok": ok, "steps": steps,
        "batch": budget.get("batch_size"), "wall_s": wall,
        "model": model.get("class_path") if isinstance(model, dict) else model,
        "linear": baselines.get("linear", {}).get(key),
        "majority": baselines.get("majority", {}).get(key),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(FLOORS), choices=list(FLOORS))
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0],
        help="run each case once per seed; the row gives the mean (default: 0, the command's)",
    )  # fmt: skip
    parser.add_argument("--out", help="keep the data and runs here (default: a temporary folder)")
    parser.add_argument(
        "--jaxfeed", help="the command to run (default: this Python's -m jaxfeed.cli)"
    )
    args = parser.parse_args(argv)
    command = shlex.split(args.jaxfeed) if args.jaxfeed else None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.out or tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = []
        print(
            f"{'case':<12}{'figure':<24}{'value':>8}{'floor':>8}{'steps':>7}{'batch':>7}"
            f"{'wall s':>8}  {'model':<12}{'linear':>8}{'majority':>9}"
        )
        for case in args.cases:
            runs = [run_case(case, work, seed, command) for seed in args.seeds]
            results.extend(runs)
            failed = [r for r in runs if "error" in r]
            if failed:
                print(f"{case:<12}ERROR {failed[0]['error']}")
                continue
            r, values = runs[0], [run["value"] for run in runs]
            mark = "" if all(run["ok"] for run in runs) else "  FAIL"
            linear = _mean([run["linear"] for run in runs])
            majority = _mean([run["majority"] for run in runs])
            print(
                f"{case:<12}{r['figure']:<24}{sum(values) / len(values):>8.4f}{r['floor']:>8g}"
                f"{r['steps']:>7}{r['batch'] or '':>7}{r['wall_s']:>8.1f}  {r['model'] or '-':<12}"
                f"{linear:>8}{majority:>9}{mark}",
                flush=True,
            )
            if len(runs) > 1:
                each = ", ".join(f"{s}: {v:.4f}" for s, v in zip(args.seeds, values, strict=True))
                steps = ", ".join(str(run["steps"]) for run in runs)
                walls = ", ".join(f"{run['wall_s']:.1f}" for run in runs)
                models = ", ".join(str(run["model"]) for run in runs)
                print(f"{'':<12}seeds {each}; steps {steps}; wall s {walls}; models {models}")
    return 0 if all(r.get("ok") for r in results) else 1


def _mean(values: list[float | None]) -> str:
    """The mean of the runs' figures, or ``-`` when a run has none (a jaxfeed without baselines)."""
    if not values or any(v is None for v in values):
        return "-"
    return f"{sum(values) / len(values):.4f}"


if __name__ == "__main__":
    sys.exit(main())
