"""``python benchmarks/wide_table.py``: the preprocessing of ``jaxfeed train`` on wide tables.

Times what ``jaxfeed train`` does before it compiles anything (load the CSV, choose the columns,
plan the standardisation and categories, one epoch of the loader's transform) for 1,000 to 8,000
columns of 200 rows, and prints seconds per 1,000 columns: flat when the time is linear in the
column count (it grew with the square before: 1k columns 21 s, 4k columns 110 s).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from jaxfeed import DataLoader
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.registry import kind_for, kind_of
from jaxfeed.recipes.kinds.table import TableOptions
from jaxfeed.recipes.run_data import load_run_data

ROWS = 200


def _csv(folder: Path, columns: int) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, columns)).round(3)
    path = folder / f"wide{columns}.csv"
    with open(path, "w") as f:
        f.write(",".join([f"c{i}" for i in range(columns)] + ["label"]) + "\n")
        for r in range(ROWS):
            f.write(",".join(map(str, x[r])) + f",{int(x[r, 0] > 0)}\n")
    return path


def preprocess(path: Path) -> float:
    start = time.perf_counter()
    run = load_run_data(RunConfig(data=str(path)), None, kind_for)
    columns = run.columns
    kind = kind_for("table", run.task, None)
    prep, _ = kind.plan_columns(run.splits.train, columns.inputs, columns.label, run.task, None,
                                TableOptions(excluded=columns.excluded))  # fmt: skip
    for _ in DataLoader(kind_of(prep).prepare(prep, run.splits.train), 64, transform=prep):
        pass
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print(f"{'columns':>8}  {'seconds':>8}  {'s per 1k columns':>17}")
        for columns in (1000, 2000, 4000, 8000):
            seconds = preprocess(_csv(Path(folder), columns))
            print(f"{columns:>8,}  {seconds:>8.2f}  {seconds / columns * 1000:>17.2f}")


if __name__ == "__main__":
    main()
