"""Loaders side by side: rows/s of batches ready as ``jax.Array`` on the CPU device.

Same data for everyone: 60,000 rows of ``Array2D((28, 28), "uint8")`` plus an int label, batch
128 (and, for image decoding, 10,000 PNG-encoded 28x28 images). Each case is timed over whole
epochs or a fixed number of batches after a warm-up epoch; the table shows the median of the
repeats and each peer's ratio to jaxfeed's shuffled loader, measured in the same run.

Run: ``python benchmarks/loader.py [--quick]`` (peers need ``pip install -e '.[bench]'``).
Writes ``benchmarks/results/loader.json`` and ``loader.png``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable, Iterable

import jax
import numpy as np
import PIL.Image

from jaxfeed import Array2D, ClassLabel, DataLoader, Dataset, Features, Image
from jaxfeed.bench._common import RESULTS, machine, save_json

BATCH = 128


def _pass(make_batches: Callable[[], Iterable], max_batches: int | None) -> float:
    """Rows/s of one pass over at most ``max_batches`` batches, each image waited for."""
    start = time.perf_counter()
    rows = 0
    for i, batch in enumerate(make_batches()):
        image = batch["image"] if isinstance(batch, dict) else batch[0]
        jax.block_until_ready(image)
        rows += image.shape[0]
        if max_batches is not None and i + 1 >= max_batches:
            break
    return rows / (time.perf_counter() - start)


def timed(make_batches: Callable[[], Iterable], max_batches: int | None, repeats: int) -> float:
    """Median rows/s over ``repeats`` passes (after one warm-up pass) of at most ``max_batches``."""
    _pass(make_batches, max_batches)
    return statistics.median(_pass(make_batches, max_batches) for _ in range(repeats))


def alternating(cases: dict[str, Callable[[], Iterable]], repeats: int) -> dict[str, float]:
    """Median rows/s of each case over ``repeats`` whole passes, the cases taking turns (after one
    warm-up pass each)."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for turn in range(repeats + 1):
        for name, make in cases.items():
            rate = _pass(make, None)
            if turn:  # the first turn warms up
                rates[name].append(rate)
    return {name: statistics.median(r) for name, r in rates.items()}


def numpy_collate(batch):
    """The JAX documentation's collate shim for PyTorch's DataLoader: numpy, not tensors."""
    images = np.stack([b[0] for b in batch])
    labels = np.array([b[1] for b in batch])
    return images, labels


class ArraySource:
    """A map-style dataset over numpy arrays (what PyTorch and Grain users write)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.images[i], self.labels[i]


def to_device(batches: Iterable) -> Iterable:
    for images, labels in batches:
        yield jax.device_put(images), jax.device_put(labels)


def png_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


_Add = Callable[[str, str, float], None]


def _jaxfeed_arrays(ds: Dataset, images: np.ndarray, labels: np.ndarray, repeats: int, add: _Add):
    """jaxfeed over Array2D rows, sequential and shuffled, taking turns with the numpy limit."""
    rows = len(labels)
    seq = DataLoader(ds, BATCH)
    add("Array2D sequential", "jaxfeed DataLoader", timed(lambda: seq, None, repeats))
    shuf = DataLoader(ds, BATCH, shuffle=True)
    sync = DataLoader(ds, BATCH, shuffle=True, prefetch=0)
    order = [np.random.default_rng(i).permutation(rows) for i in range(2 * repeats + 2)]

    def numpy_limit():
        perm = order[numpy_limit.calls % len(order)]
        numpy_limit.calls += 1
        for start in range(0, rows, BATCH):
            idx = perm[start : start + BATCH]
            yield {"image": jax.numpy.asarray(images[idx]), "label": jax.numpy.asarray(labels[idx])}

    numpy_limit.calls = 0
    # the loader and the limit take turns (2 x repeats passes each): a busy period hits them all
    shuffled = alternating(
        {
            "jaxfeed DataLoader": lambda: shuf,
            "jaxfeed DataLoader (prefetch=0)": lambda: sync,
            "numpy gather + jnp.asarray (limit)": numpy_limit,
        },
        2 * repeats,
    )
    for name, rate in shuffled.items():
        add("Array2D shuffled", name, rate)


def _hf_arrays(images: np.ndarray, labels: np.ndarray, slow: int, repeats: int, add: _Add) -> None:
    """HF ``datasets`` in its jax format over Array2D rows, sequential and shuffled."""
    try:
        import datasets

        hf = datasets.Dataset.from_dict(
            {"image": images, "label": labels},
            features=datasets.Features(
                {
                    "image": datasets.Array2D((28, 28), "uint8"),
                    "label": datasets.ClassLabel(num_classes=10),
                }
            ),
        )
        name = f"HF datasets {datasets.__version__} jax"
        hf_jax = hf.with_format("jax")
        add("Array2D sequential", name, timed(lambda: hf_jax.iter(batch_size=BATCH), slow, repeats))
        hf_shuffled = hf.shuffle(seed=0).with_format("jax")
        add(
            "Array2D shuffled",
            name,
            timed(lambda: hf_shuffled.iter(batch_size=BATCH), slow // 4, repeats),
        )
    except ImportError:
        print("  HF datasets not installed: skipped")


def _torch_grain_arrays(
    images: np.ndarray, labels: np.ndarray, slow: int, repeats: int, add: _Add
) -> None:
    """PyTorch's ``DataLoader`` (0 and 2 workers) and Grain over the Array2D rows, shuffled."""
    try:
        import torch
        import torch.utils.data

        source = ArraySource(images, labels)
        for workers in (0, 2):
            kwargs = {"num_workers": workers}
            if workers:  # spawn: forking a process that runs JAX can deadlock
                kwargs.update(multiprocessing_context="spawn", persistent_workers=True)
            torch_loader = torch.utils.data.DataLoader(
                source, batch_size=BATCH, shuffle=True, collate_fn=numpy_collate, **kwargs
            )
            name = f"PyTorch {torch.__version__.split('+')[0]} DataLoader, {workers} workers"
            add(
                "Array2D shuffled",
                name,
                timed(lambda tl=torch_loader: to_device(tl), slow * 2, repeats),
            )
            del torch_loader
    except ImportError:
        print("  torch not installed: skipped")

    try:
        import grain

        grain_ds = grain.MapDataset.source(ArraySource(images, labels)).shuffle(seed=0).batch(BATCH)
        add(
            "Array2D shuffled",
            "Grain MapDataset shuffle+batch",
            timed(lambda: to_device(grain_ds), slow, repeats),
        )
    except ImportError:
        print("  grain not installed: skipped")


def _pngs(
    images: np.ndarray, labels: np.ndarray, png_rows: int, slow: int, repeats: int, add: _Add
) -> None:
    """Shuffled PNG rows: jaxfeed inline and with 2 thread or process workers, and HF."""
    png_images = [{"bytes": png_bytes(a), "path": None} for a in images[:png_rows]]
    png_labels = labels[:png_rows]
    pngs = Dataset.from_dict(
        {"image": png_images, "label": png_labels},
        features=Features({"image": Image(), "label": ClassLabel(num_classes=10)}),
    )
    print(f"PNG images, {png_rows:,} rows")
    png_loader = DataLoader(pngs, BATCH, shuffle=True)
    add("PNG shuffled", "jaxfeed DataLoader", timed(lambda: png_loader, None, repeats))
    for mode in ("thread", "process"):
        workers = DataLoader(pngs, BATCH, shuffle=True, num_workers=2, worker_mode=mode)
        add(
            "PNG shuffled",
            f"jaxfeed DataLoader, 2 {mode} workers",
            timed(lambda w=workers: w, None, repeats),
        )
        workers.close()
    try:
        import datasets

        hf_png = datasets.Dataset.from_dict(
            {"image": png_images, "label": png_labels},
            features=datasets.Features(
                {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}
            ),
        )
        hf_png = hf_png.shuffle(seed=0).with_format("jax")
        add(
            "PNG shuffled",
            f"HF datasets {datasets.__version__} jax",
            timed(lambda: hf_png.iter(batch_size=BATCH), slow // 4, repeats),
        )
    except ImportError:
        pass


def _print_table(results: list[dict]) -> None:
    """The closing table: each row's ratio to jaxfeed's (the best jaxfeed row for PNGs)."""
    reference = {r["case"]: r["rows_per_s"] for r in results if r["name"] == "jaxfeed DataLoader"}
    best_png = max(
        r["rows_per_s"]
        for r in results
        if r["case"] == "PNG shuffled" and r["name"].startswith("jaxfeed")
    )
    reference["PNG shuffled"] = best_png
    print(f"\n{'case':<24}{'implementation':<44}{'rows/s':>12}{'jaxfeed / this':>16}")
    for r in results:
        r["jaxfeed_ratio"] = reference[r["case"]] / r["rows_per_s"]
        print(
            f"{r['case']:<24}{r['name']:<44}{r['rows_per_s']:>12,.0f}{r['jaxfeed_ratio']:>15.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and repeats (a smoke run)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = 12_000 if args.quick else 60_000
    png_rows = 2_000 if args.quick else 10_000
    repeats = 1 if args.quick else args.repeats
    slow = 40 if args.quick else 120  # batches timed for the slow peers

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, rows)
    features = Features({"image": Array2D((28, 28), "uint8"), "label": ClassLabel(num_classes=10)})
    ds = Dataset.from_dict({"image": images, "label": labels}, features=features)
    results: list[dict] = []

    def add(case: str, name: str, rate: float) -> None:
        results.append({"case": case, "name": name, "rows_per_s": rate})
        print(f"  {case:<24}{name:<44}{rate:>12,.0f} rows/s", flush=True)

    print(f"Loaders, {rows:,} rows of 28x28 uint8 + label, batch {BATCH} ({machine()})")
    _jaxfeed_arrays(ds, images, labels, repeats, add)
    _hf_arrays(images, labels, slow, repeats, add)
    _torch_grain_arrays(images, labels, slow, repeats, add)
    _pngs(images, labels, png_rows, slow, repeats, add)
    _print_table(results)
    path = save_json(
        "loader", {"rows": rows, "png_rows": png_rows, "batch_size": BATCH, "results": results}
    )
    print(f"\nwrote {path} and {plot(results)}")


def plot(results: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['case']}: {r['name']}" for r in results]
    rates = [r["rows_per_s"] for r in results]
    colors = ["tab:blue" if r["name"].startswith("jaxfeed") else "tab:gray" for r in results]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(results) + 1.2))
    ax.barh(range(len(results)), rates, color=colors)
    ax.set_yticks(range(len(results)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("rows per second (log scale)")
    ax.set_title(
        f"Loaders to jax.Array on the CPU device, batch {BATCH} ({machine()})", fontsize=10
    )
    for i, rate in enumerate(rates):
        ax.text(rate, i, f" {rate:,.0f}", va="center", fontsize=7)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "loader.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


if __name__ == "__main__":
    main()
