"""Shared helpers for the benchmarks: timing with medians, tables, JSON results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def _results_folder() -> Path:
    """``$JAXFEED_BENCH_RESULTS``; else ``benchmarks/results`` in a source checkout (the current
    folder holds ``benchmarks/``), else ``jaxfeed-bench-results`` in the current folder."""
    if os.environ.get("JAXFEED_BENCH_RESULTS"):
        return Path(os.environ["JAXFEED_BENCH_RESULTS"])
    if Path("benchmarks").is_dir():
        return Path("benchmarks") / "results"
    return Path("jaxfeed-bench-results")


RESULTS = _results_folder()


def rows_per_second(fn: Callable[[], int], repeats: int = 5, warmup: int = 1) -> float:
    """Median rows/s of ``fn`` (which returns how many rows it read) over ``repeats`` runs."""
    for _ in range(warmup):
        fn()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        rows = fn()
        rates.append(rows / (time.perf_counter() - start))
    return statistics.median(rates)


def median_seconds(fn: Callable[[], object], repeats: int = 5) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def print_table(title: str, rows: list[dict], reference: str) -> None:
    """Print rows of ``{"case", "name", "rows_per_s"}`` with each one's ratio to ``reference``."""
    print(f"\n{title}  ({machine()})")
    print(f"{'case':<22}{'implementation':<34}{'rows/s':>14}{'jaxfeed / this':>16}")
    by_case: dict[str, float] = {r["case"]: r["rows_per_s"] for r in rows if r["name"] == reference}
    for r in rows:
        ratio = by_case.get(r["case"], float("nan")) / r["rows_per_s"]
        print(f"{r['case']:<22}{r['name']:<34}{r['rows_per_s']:>14,.0f}{ratio:>15.1f}x")


def save_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    tmp.replace(path)
    return path
