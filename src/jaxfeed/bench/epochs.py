"""Augmented JPEG epochs as a training script sees them: jaxfeed against PyTorch, in one run.

A real training script imports its heavy libraries at module level (``import torch``, ``jax``,
``flax``) and often makes one new loader per epoch. This benchmark writes two such scripts, a
*heavy* one (torch, jax and flax imported at the top) and a *lazy* one (only numpy at the top),
and runs each with jaxfeed's ``DataLoader`` and with PyTorch's (forked workers, as its users run
it) in fresh processes, the four taking turns ``--repeats`` times. Every script reads the same
folder of 256x256 JPEGs (random-resized-crop 224 + flip + ImageNet normalisation per row, batch
64, ``--workers`` workers, a new loader every epoch, batches waited for as ``jax.Array``) and
reports, per run:

- **first batch**: seconds from making the first loader to holding its first batch;
- **epoch**: seconds of the whole first epoch, from making its loader (worker start-up included);
- **steady**: rows/s over the later epochs (each with a new loader), their first 4 batches left out.

The table shows medians and, for each, jaxfeed's ratio to PyTorch in the same script (steady:
jaxfeed / PyTorch, higher is better; times: jaxfeed / PyTorch, lower is better), and the steady
rate as a share of ``--workers`` times the one-process decode + augment rate measured here.

Run: ``python benchmarks/epochs.py [--rows 3072] [--epochs 3] [--repeats 3]`` (needs the bench
extra: torch, flax). Writes ``benchmarks/results/epochs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HEAVY = "import torch  # noqa\nimport jax  # noqa\nimport flax  # noqa\n"

SCRIPT = """
{heavy}import json, os, statistics, sys, time
import numpy as np

LIB, FOLDER, EPOCHS, WORKERS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
BATCH, SKIP = 64, 4


def listing():
    from pathlib import Path
    paths = sorted(str(p) for p in Path(FOLDER).glob("class_*/*.jpg"))
    return paths, [int(Path(p).parent.name.split("_")[1]) for p in paths]


def augment():
    from jaxfeed import transforms as T
    return T.compose(
        T.random_resized_crop(224), T.horizontal_flip(),
        T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD),
    )


class TorchFiles:
    def __init__(self, paths, labels):
        self.paths, self.labels, self.aug = paths, labels, augment()
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import PIL.Image
        with PIL.Image.open(self.paths[i]) as image:
            pixels = np.asarray(image.convert("RGB"))
        row = self.aug({{"image": pixels, "label": self.labels[i]}}, self.rng)
        return {{"image": np.ascontiguousarray(row["image"]), "label": row["label"]}}


def main():
    import jax
    paths, labels = listing()
    if LIB == "jaxfeed":
        from jaxfeed import DataLoader, Dataset, Features, Image, Value
        ds = Dataset.from_dict(
            {{"image": paths, "label": labels}},
            features=Features({{"image": Image(), "label": Value("int32")}}),
        )
        aug = augment()

        def make(epoch):
            return DataLoader(ds, BATCH, shuffle=True, seed=0, drop_last=True,
                              row_transform=aug, num_workers=WORKERS)

        def images(loader):
            for batch in loader:
                yield batch["image"]
    else:
        import torch.utils.data
        data = TorchFiles(paths, labels)

        def make(epoch):
            return torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True,
                                               drop_last=True, num_workers=WORKERS)

        def images(loader):
            for batch in loader:
                yield jax.device_put(batch["image"].numpy())
    out = {{"first": None, "epoch": None, "steady": []}}
    for epoch in range(EPOCHS):
        start = time.perf_counter()
        loader = make(epoch)
        rows, t_skip = 0, None
        for step, image in enumerate(images(loader)):
            jax.block_until_ready(image)
            if epoch == 0 and step == 0:
                out["first"] = time.perf_counter() - start
            if step == SKIP - 1:
                t_skip = time.perf_counter()
            elif step >= SKIP:
                rows += image.shape[0]
        end = time.perf_counter()
        if epoch == 0:
            out["epoch"] = end - start
        else:
            out["steady"].append(rows / (end - t_skip))
    out["steady"] = statistics.median(out["steady"]) if out["steady"] else None
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
"""


def write_scripts(folder: Path) -> dict[str, Path]:
    """The heavy-import and the lazy training scripts, in ``folder``."""
    out = {}
    for name, heavy in (("heavy", HEAVY), ("lazy", "")):
        path = folder / f"train_{name}.py"
        path.write_text(textwrap.dedent(SCRIPT).format(heavy=heavy))
        out[name] = path
    return out


def run_script(
    script: Path, lib: str, folder: Path, epochs: int, workers: int, tree: str | None = None
) -> dict[str, Any]:
    """One fresh process of ``script`` with loader ``lib`` (jaxfeed from ``tree``, a ``src``
    folder, when given): its first-batch, epoch and steady figures."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if tree:
        env["PYTHONPATH"] = tree
    out = subprocess.run(
        [sys.executable, str(script), lib, str(folder), str(epochs), str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{script.name} {lib} failed:\n{out.stderr[-3000:]}")


def per_core_rate(paths: list[str], n: int = 256) -> float:
    """rows/s of decode + augment in this one process (the per-core rate)."""
    import numpy as np

    from jaxfeed import Image  # import cost: pyarrow
    from jaxfeed.bench.augment import AUGMENT  # import cost: JAX, Pillow

    image, rng = Image(), np.random.default_rng(0)
    start = time.perf_counter()
    for i in range(n):
        AUGMENT({"image": image.decode_array((None, paths[i % len(paths)]), i)}, rng)
    return n / (time.perf_counter() - start)


def measure(
    rows: int,
    epochs: int,
    repeats: int,
    workers: int,
    scripts: tuple[str, ...],
    tree: str | None = None,
) -> dict[str, Any]:
    """Medians of every (script, lib) over ``repeats`` turns, and the per-core rate."""
    from jaxfeed.bench.augment import listing, make_folder  # import cost: JAX, Pillow

    folder = make_folder(rows)
    paths, _ = listing(folder)
    for p in paths:  # into the page cache for every case
        Path(p).read_bytes()
    runs: dict[str, list[dict]] = {}
    core: list[float] = []
    with tempfile.TemporaryDirectory(prefix="jaxfeed-epochs-") as tmp:
        made = write_scripts(Path(tmp))
        for _ in range(repeats):
            for name in scripts:
                for lib in ("jaxfeed", "torch"):
                    result = run_script(made[name], lib, folder, epochs, workers, tree)
                    runs.setdefault(f"{name} {lib}", []).append(result)
            core.append(per_core_rate(paths))
    medians = {
        case: {k: statistics.median(r[k] for r in results) for k in ("first", "epoch", "steady")}
        for case, results in runs.items()
    }
    return {"runs": runs, "medians": medians, "per_core": statistics.median(core)}


def ratios(result: dict[str, Any], script: str) -> dict[str, float]:
    """jaxfeed / PyTorch in ``script``: steady rows/s (higher is better), first-batch and epoch
    seconds (lower is better)."""
    ours, peer = result["medians"][f"{script} jaxfeed"], result["medians"][f"{script} torch"]
    return {k: ours[k] / peer[k] for k in ("steady", "first", "epoch")}


def main(argv: list[str] | None = None) -> None:
    from jaxfeed.bench._common import machine, save_json  # import cost: none (kept lazy)

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=3072)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scripts", default="heavy,lazy")
    parser.add_argument("--tree", help="run the scripts with jaxfeed from this src folder")
    args = parser.parse_args(argv)
    scripts = tuple(s for s in args.scripts.split(",") if s)
    load = os.getloadavg()[0]
    result = measure(args.rows, args.epochs, args.repeats, args.workers, scripts, args.tree)
    print(
        f"{args.rows} JPEGs, batch 64, {args.workers} workers, {args.epochs} epochs (a new loader "
        f"each), medians of {args.repeats} ({machine()}; load {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after)"
    )
    print(
        f"{'script':<8}{'steady x':>10}{'cores':>8}{'first batch s':>16}{'x':>7}"
        f"{'epoch 1 s':>12}{'x':>7}"
    )
    for name in scripts:
        r = ratios(result, name)
        ours, peer = result["medians"][f"{name} jaxfeed"], result["medians"][f"{name} torch"]
        share = ours["steady"] / (args.workers * result["per_core"])
        print(
            f"{name:<8}{r['steady']:>9.2f}x{share:>8.2f}"
            f"{ours['first']:>8.2f}/{peer['first']:<7.2f}{r['first']:>6.2f}x"
            f"{ours['epoch']:>6.1f}/{peer['epoch']:<5.1f}{r['epoch']:>6.2f}x"
        )
    result["load"] = load
    print(f"wrote {save_json('epochs', result)}")


if __name__ == "__main__":
    main()
