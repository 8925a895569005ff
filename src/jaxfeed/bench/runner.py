"""``jaxfeed bench``: run benchmarks in fresh processes and say which peers are missing.

A benchmark is a module of :mod:`jaxfeed.bench`, installed with the package (the scripts of a
source checkout's ``benchmarks/`` folder call the same modules).

>>> sorted(BENCHES)
['accelerator', 'augment', 'checkpoint', 'decode', 'formatting', 'loader', 'media', 'scale', 'sharding', 'text', 'train']
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jaxfeed
from jaxfeed.bench.plot import plot_results
from jaxfeed.recipes.config import ConfigError

EXTRA = "pip install 'jaxfeed[bench]'  (from a checkout: pip install -e '.[bench]')"


@dataclass(frozen=True)
class Bench:
    module: str  # jaxfeed.bench.<module>, or benchmarks/<module>.py in a checkout
    quick: tuple[str, ...]
    peers: tuple[str, ...]  # importable names of the peers it compares with
    in_all: bool = True  # False: only by name (accelerator-sized shapes)


BENCHES = {
    "formatting": Bench("formatting", ("--rows", "12000", "--repeats", "1"), ("datasets",)),
    "media": Bench("media", ("--rows", "2000", "--repeats", "1"), ("datasets",)),
    "loader": Bench("loader", ("--quick",), ("datasets", "torch", "grain")),
    "train": Bench("train_step", ("--quick",), ("torch",)),
    "checkpoint": Bench("checkpoint", ("--repeats", "2"), ()),
    "scale": Bench(
        "scale", ("--gb", "0.05", "--stream-rows", "20000", "--repeats", "1"), ("datasets",)
    ),
    "augment": Bench("augment", ("--quick",), ("datasets", "torch", "grain")),
    "decode": Bench("decode", (), ()),
    "text": Bench(
        "text", ("--rows", "5000", "--repeats", "1"), ("datasets", "torch", "grain", "transformers")
    ),
    "sharding": Bench("sharding", ("--params", "2e6", "--steps", "3"), ()),
    "accelerator": Bench("accelerator", ("--quick",), ("torch",), in_all=False),
}


def _checkout() -> Path | None:
    """The ``benchmarks/`` folder of a source checkout this jaxfeed runs from, if any."""
    folder = Path(jaxfeed.__file__).resolve().parents[2] / "benchmarks"
    return folder if folder.is_dir() else None


def command(name: str, quick: bool) -> list[str] | None:
    """The command line that runs benchmark ``name``, or None when this install lacks it."""
    bench = BENCHES[name]
    args = list(bench.quick if quick else ())
    if importlib.util.find_spec(f"jaxfeed.bench.{bench.module}") is not None:
        return [sys.executable, "-m", f"jaxfeed.bench.{bench.module}", *args]
    folder = _checkout()
    if folder is not None and (folder / f"{bench.module}.py").is_file():
        return [sys.executable, str(folder / f"{bench.module}.py"), *args]
    return None


def missing_peers(names: list[str]) -> list[str]:
    wanted = sorted({p for n in names for p in BENCHES[n].peers})
    return [p for p in wanted if importlib.util.find_spec(p) is None]


def run_benchmarks(which: str, quick: bool = False, plot: str | None = None) -> int:
    """Run ``which`` (a name or ``all``); returns the exit status (1 when one failed).

    ``plot``: a folder that receives each benchmark's JSON results and its chart (PNG); else
    the results go to ``bench-results/`` in jaxfeed's cache folder (:func:`results_folder`),
    never into the current folder, and the command says where.
    """
    if which != "all" and which not in BENCHES:
        raise ConfigError(f"unknown benchmark {which!r}; known: {', '.join(BENCHES)} or all")
    names = [n for n, b in BENCHES.items() if b.in_all] if which == "all" else [which]
    missing = missing_peers(names)
    if missing:
        print(
            f"note: the peers {', '.join(missing)} are not installed: their rows are skipped; "
            f"add them with: {EXTRA}",
            flush=True,
        )
    status = 0
    folder = _checkout()
    results = results_folder(plot)
    print(f"results: {results}", flush=True)
    for name in names:
        cmd = command(name, quick)
        if cmd is None:
            print(
                f"\n=== {name}: not in this installation (it runs from a source checkout's "
                f"benchmarks/{BENCHES[name].module}.py)",
                flush=True,
            )
            status = status or (0 if which == "all" else 1)
            continue
        print(
            f"\n=== {name}: {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}",
            flush=True,
        )
        cwd = folder.parent if folder is not None and cmd[1] != "-m" else None
        env = {**os.environ, "JAXFEED_BENCH_RESULTS": str(results)}
        code = subprocess.call(cmd, cwd=cwd, env=env)
        status |= code
        if plot is not None and code == 0:
            _plot(name, BENCHES[name].module, Path(plot), quick)
    return 1 if status else 0


def results_folder(plot: str | None) -> Path:
    """Where ``jaxfeed bench`` keeps its JSON results: ``--plot DIR``, else
    ``$JAXFEED_BENCH_RESULTS``, else ``bench-results`` in jaxfeed's cache folder.

    >>> str(results_folder("/tmp/charts"))
    '/tmp/charts'
    """
    if plot is not None:
        return Path(plot).resolve()
    if os.environ.get("JAXFEED_BENCH_RESULTS"):
        return Path(os.environ["JAXFEED_BENCH_RESULTS"]).resolve()
    from jaxfeed.data.formats.cache import cache_root  # import cost: pyarrow; --help stays light

    return (cache_root() / "bench-results").resolve()


def _plot(name: str, module: str, folder: Path, quick: bool) -> None:
    results = folder / f"{module}.json"
    command = f"jaxfeed bench {name}{' --quick' if quick else ''} --plot {folder}"
    chart = plot_results(results, folder, command) if results.is_file() else None
    if chart is None:
        print(f"note: {name} wrote no results a chart can show ({results})", flush=True)
    else:
        print(f"chart: {chart}", flush=True)
