"""Where a DataLoader worker's start-up goes, and what each worker costs once started.

Parts, each timed in fresh interpreters (wall and CPU seconds, medians of ``--repeats``):

- **interpreter**: ``python -c pass``;
- **worker modules**: importing what a worker imports to run (``jaxfeed.loading.workers``: numpy,
  pyarrow through the features, no JAX);
- **heavy main**: ``import torch, jax, flax``, what a spawned worker paid on top when it ran a
  training script's imports again (workers no longer run the main script);
- **recipe**: reading the augmentation loader's recipe (its features and functions) in a process
  that has the worker modules;

then end to end, for a *heavy* script (torch, jax and flax imported at the top) and a *lazy* one:
seconds from making a ``DataLoader`` (augmented JPEGs, 2 workers) to every worker being ready,
and each worker's CPU seconds and resident memory at that point, and whether it imported JAX.

Run: ``python benchmarks/worker_start.py [--tree SRC]`` (``--tree``: the jaxfeed ``src`` folder
the scripts import, to measure another checkout). Writes ``benchmarks/results/worker_start.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

PARTS = {
    "interpreter": "pass",
    "worker modules": "import jaxfeed.loading.workers",
    "heavy main": "import torch, jax, flax",
}

RECIPE = """
import time, pickle, sys
import jaxfeed.loading.workers
payload = open(sys.argv[1], "rb").read()
start = time.perf_counter()
import cloudpickle
cloudpickle.loads(payload)
print(time.perf_counter() - start)
"""

SCRIPT = """
{heavy}import json, sys, time
import numpy as np


def main():
    import psutil
    from pathlib import Path
    from jaxfeed import DataLoader, Dataset, Features, Image, Value
    from jaxfeed import transforms as T
    paths = sorted(str(p) for p in Path(sys.argv[1]).glob("class_*/*.jpg"))
    ds = Dataset.from_dict({{"image": paths, "label": [0] * len(paths)}},
                           features=Features({{"image": Image(), "label": Value("int32")}}))
    aug = T.compose(T.random_resized_crop(224), T.horizontal_flip(),
                    T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD))
    start = time.perf_counter()
    loader = DataLoader(ds, 64, shuffle=True, drop_last=True, row_transform=aug, num_workers=2)
    backend = loader._get_backend()
    backend.start_workers()
    backend.ensure_started()
    took = time.perf_counter() - start
    out = {{"ready": took, "cpu": [], "rss_mb": [], "jax": []}}
    for w in backend.workers:
        p = psutil.Process(w.process.pid)
        t = p.cpu_times()
        out["cpu"].append(t.user + t.system)
        out["rss_mb"].append(p.memory_info().rss / 2**20)
        maps = open(f"/proc/{{w.process.pid}}/maps").read()
        out["jax"].append("xla_extension" in maps or "jaxlib" in maps)
    loader.close()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
"""


def _env(tree: str | None) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if tree:
        env["PYTHONPATH"] = tree
    return env


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one child process, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise RuntimeError(f"{args} failed:\n{out.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, out.stdout


def recipe_payload(folder: Path, path: Path) -> None:
    """The augmentation loader's recipe, as its workers receive it."""
    import cloudpickle

    from jaxfeed import DataLoader, Dataset, Features, Image, Value  # import cost: JAX
    from jaxfeed import transforms as T  # import cost: Pillow

    paths = sorted(str(p) for p in folder.glob("class_*/*.jpg"))
    ds = Dataset.from_dict(
        {"image": paths, "label": [0] * len(paths)},
        features=Features({"image": Image(), "label": Value("int32")}),
    )
    aug = T.compose(T.random_resized_crop(224), T.horizontal_flip())
    loader = DataLoader(ds, 64, row_transform=aug)
    path.write_bytes(cloudpickle.dumps(loader._recipe()))


def measure(repeats: int, tree: str | None) -> dict[str, Any]:
    from jaxfeed.bench.augment import make_folder  # import cost: JAX, Pillow

    env = _env(tree)
    folder = make_folder(640)
    parts: dict[str, list[tuple[float, float]]] = {name: [] for name in [*PARTS, "recipe"]}
    ends: dict[str, list[dict]] = {"heavy": [], "lazy": []}
    with tempfile.TemporaryDirectory(prefix="jaxfeed-start-") as tmp:
        payload = Path(tmp) / "recipe.pkl"
        recipe_payload(folder, payload)
        (Path(tmp) / "recipe.py").write_text(RECIPE)
        scripts = {}
        for name, heavy in (
            ("heavy", "import torch  # noqa\nimport jax  # noqa\nimport flax  # noqa\n"),
            ("lazy", ""),
        ):
            scripts[name] = Path(tmp) / f"train_{name}.py"
            scripts[name].write_text(textwrap.dedent(SCRIPT).format(heavy=heavy))
        for _ in range(repeats):
            for name, code in PARTS.items():
                wall, cpu, _ = timed([sys.executable, "-c", code], env)
                parts[name].append((wall, cpu))
            wall, cpu, out = timed(
                [sys.executable, str(Path(tmp) / "recipe.py"), str(payload)], env
            )
            parts["recipe"].append((float(out.strip()), float(out.strip())))
            for name, script in scripts.items():
                _, _, out = timed([sys.executable, str(script), str(folder)], env)
                line = next(x for x in out.splitlines() if x.startswith("RESULT "))
                ends[name].append(json.loads(line[7:]))
    medians = {
        name: {
            "wall": statistics.median(w for w, _ in v),
            "cpu": statistics.median(c for _, c in v),
        }
        for name, v in parts.items()
    }
    end = {
        name: {
            "ready": statistics.median(r["ready"] for r in runs),
            "cpu": statistics.median(c for r in runs for c in r["cpu"]),
            "rss_mb": statistics.median(m for r in runs for m in r["rss_mb"]),
            "jax": any(j for r in runs for j in r["jax"]),
        }
        for name, runs in ends.items()
    }
    return {"parts": medians, "end_to_end": end}


def main(argv: list[str] | None = None) -> None:
    from jaxfeed.bench._common import machine, save_json  # import cost: none

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", help="measure jaxfeed from this src folder")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    result = measure(args.repeats, args.tree)
    print(f"worker start-up, medians of {args.repeats} ({machine()}; load {load:.1f})")
    recipe = result["parts"]["recipe"]["wall"]
    print(f"{'part':<34}{'wall s':>8}{'CPU s':>8}")
    for name, m in result["parts"].items():
        if name == "recipe":
            print(f"{'recipe (read by a ready interpreter)':<34}{recipe:>8.3f}{'':>8}")
        else:
            print(f"{name:<34}{m['wall']:>8.3f}{m['cpu']:>8.3f}")
    print(f"\n{'script':<8}{'ready s':>9}{'CPU s/worker':>14}{'RSS MB/worker':>15}{'JAX':>6}")
    for name, m in result["end_to_end"].items():
        print(f"{name:<8}{m['ready']:>9.2f}{m['cpu']:>14.2f}{m['rss_mb']:>15.0f}{m['jax']!s:>6}")
    result["load"] = load
    print(f"wrote {save_json('worker_start', result)}")


if __name__ == "__main__":
    main()
