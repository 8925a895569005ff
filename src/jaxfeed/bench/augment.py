"""Augmented JPEG batches: jaxfeed against PyTorch, Grain and HF `datasets`, in one run.

A generated folder of 256x256 JPEGs (photo-like, quality 90); every loader runs the same per-row
function (:mod:`jaxfeed.loading.augment`: random-resized-crop to 224, horizontal flip, ImageNet
normalisation to float32) in ``--workers`` worker processes, batch 64, and hands the batch over as a
``jax.Array`` on the CPU device. Peers decode with Pillow, as their users do; jaxfeed with its
default decoder. The cases take turns, ``--repeats`` times; each is timed over ``--batches``
batches after draining what it had buffered (worker start-up is excluded for everyone). The table
shows medians of rows/s and of rows per CPU-second (the CPU time of the benchmark process and all
its workers over the timed batches: on a shared, oversubscribed machine this is the figure that
does not depend on how much of the machine the others leave), each with its ratio to jaxfeed. The
last rows do the loaders' job in one process (read, decode and augment the folder's files): the
per-core rate; rows per CPU-second of a loader over that of one process is its parallel efficiency.

Before the steady-state table it times the first batch of fresh loaders (jaxfeed and PyTorch taking
turns, ``--first-repeats`` times, medians): from making the loader to holding a ``jax.Array``,
worker start-up included.

Run: ``python benchmarks/augment.py [--quick] [--workers N]`` (peers need ``pip install -e '.[bench]'``).
Writes ``benchmarks/results/augment.json``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import PIL.Image

from jaxfeed import DataLoader, Dataset, Features, Image, Value
from jaxfeed import transforms as T
from jaxfeed.bench._common import RESULTS, machine, save_json
from jaxfeed.loading.workers import JOBS_PER_WORKER

BATCH = 64
SIZE = 256
AUGMENT = T.compose(
    T.random_resized_crop(224), T.horizontal_flip(), T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)
)


def make_folder(rows: int) -> Path:
    """``rows`` photo-like 256x256 JPEGs in 10 class folders (made once, then reused)."""
    folder = RESULTS / f"augment_jpegs_{rows}"
    done = folder / ".done"
    if done.exists():
        return folder
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    for i in range(rows):
        phase = rng.uniform(0, 6.28, 6)
        base = np.stack(
            [
                np.sin(x / (9 + 7 * c) + phase[c]) * 60
                + np.cos(y / (13 + 5 * c) + phase[3 + c]) * 60
                for c in range(3)
            ],
            axis=-1,
        )
        pixels = np.clip(base + 128 + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)
        path = folder / f"class_{i % 10}" / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        PIL.Image.fromarray(pixels).save(path, quality=90)
    done.touch()
    return folder


def listing(folder: Path) -> tuple[list[str], list[int]]:
    paths = sorted(str(p) for p in folder.glob("class_*/*.jpg"))
    return paths, [int(Path(p).parent.name.split("_")[1]) for p in paths]


# ------------------------------------------------------------------ peers' per-row code
def pil_decode(path: str) -> np.ndarray:
    with PIL.Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


class TorchFiles:
    """What a PyTorch user writes: decode with Pillow, augment with the same function."""

    def __init__(self, paths: list[str], labels: list[int]) -> None:
        self.paths, self.labels = paths, labels
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict:
        row = AUGMENT({"image": pil_decode(self.paths[i]), "label": self.labels[i]}, self.rng)
        return {"image": np.ascontiguousarray(row["image"]), "label": row["label"]}


def grain_decode(item: tuple[str, int]) -> dict:
    return {"image": pil_decode(item[0]), "label": item[1]}


def grain_augment(row: dict, rng: np.random.Generator) -> dict:
    out = AUGMENT(row, rng)
    return {"image": np.ascontiguousarray(out["image"]), "label": np.int32(out["label"])}


def hf_transform(batch: dict) -> dict:
    rng = np.random.default_rng()
    images = [
        np.ascontiguousarray(AUGMENT(np.asarray(im.convert("RGB")), rng)) for im in batch["image"]
    ]
    return {"image": images, "label": batch["label"]}


# ------------------------------------------------------------------ timing
def to_jax(batches: Iterable) -> Iterator:
    for batch in batches:
        image = batch["image"]
        if not isinstance(image, jax.Array):
            image = jax.device_put(np.asarray(image))
        yield jax.block_until_ready(image)


def tree_cpu() -> float:
    """CPU seconds used so far by this process and its live child processes."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def run_once(stream: Iterator, drain: int, batches: int) -> tuple[float, float]:
    """rows/s and rows per CPU-second (this process and all workers) of ``batches`` batches, after
    draining ``drain`` (what the loader had buffered while the other cases ran, so every case is
    timed at its steady state)."""
    for _ in itertools.islice(stream, drain):
        pass
    start, cpu = time.perf_counter(), tree_cpu()
    rows = sum(x.shape[0] for x in itertools.islice(stream, batches))
    return rows / (time.perf_counter() - start), rows / max(tree_cpu() - cpu, 1e-9)


def forever(make: Callable[[], Iterable]) -> Iterator:
    while True:
        yield from make()


def torch_stream(dataset: Any, workers: int) -> Iterator:
    """Endless ``jax.Array`` batches of a PyTorch ``DataLoader`` over ``dataset``, as its users
    configure it for this job (persistent workers, the default fork start method)."""
    import torch.utils.data  # the bench extra

    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    return to_jax({"image": b["image"].numpy()} for b in forever(lambda: loader))


def first_batch_seconds(
    paths: list[str], labels: list[int], workers: int, repeats: int
) -> dict[str, float]:
    """Median seconds from making a loader to holding its first batch as a ``jax.Array``, for a
    fresh jaxfeed ``DataLoader`` (spawned workers, which import the main script) and a fresh
    PyTorch ``DataLoader`` (forked workers), taking turns ``repeats`` times."""
    ds = Dataset.from_dict(
        {"image": paths, "label": labels},
        features=Features({"image": Image(), "label": Value("int32")}),
    )

    def jaxfeed_first() -> float:
        start = time.perf_counter()
        loader = DataLoader(
            ds, BATCH, shuffle=True, drop_last=True, row_transform=AUGMENT, num_workers=workers
        )
        next(to_jax(loader))
        took = time.perf_counter() - start
        loader.close()
        return took

    def torch_first() -> float:
        import torch.utils.data  # the bench extra

        start = time.perf_counter()
        loader = torch.utils.data.DataLoader(
            TorchFiles(paths, labels),
            batch_size=BATCH,
            shuffle=True,
            drop_last=True,
            num_workers=workers,
        )
        it = iter(loader)
        next(to_jax({"image": b["image"].numpy()} for b in it))
        took = time.perf_counter() - start
        del it  # stops its workers
        return took

    cases = {"jaxfeed": jaxfeed_first}
    try:
        import torch  # noqa: F401 - the bench extra

        cases["torch"] = torch_first
    except ImportError:
        pass
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            times[name].append(run())
    return {name: statistics.median(t) for name, t in times.items()}


def per_core_rate(decode: Callable[[int], np.ndarray], first: int, n: int) -> tuple[float, float]:
    """rows/s and rows per CPU-second of decode + augment of rows ``first..first+n`` in this
    process."""
    rng = np.random.default_rng(0)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(first, first + n):
        AUGMENT({"image": decode(i)}, rng)
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


def _parse_args() -> argparse.Namespace:
    """The command line, with ``--quick`` applied."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--first-repeats", type=int, default=5, help="fresh loaders timed to their first batch"
    )
    parser.add_argument("--quick", action="store_true", help="fewer rows, batches and repeats")
    parser.add_argument(
        "--only", default="", help="comma-separated subset (jaxfeed,torch,grain,hf)"
    )
    args = parser.parse_args()
    if args.quick:
        args.rows, args.batches, args.repeats, args.first_repeats = 640, 4, 2, 3
    return args


def _grain_fresh(paths: list[str], labels: list[int], workers: int) -> tuple[str, Callable]:
    """Grain's case: its name and a maker of fresh ``jax.Array`` streams."""
    import grain
    from absl import flags

    flags.FLAGS.mark_as_parsed()  # grain's workers read absl flags (no absl.app here)
    grain_ds = (
        grain.MapDataset.source(list(zip(paths, labels, strict=True)))
        .shuffle(seed=0)
        .repeat()
        .map(grain_decode)
        .random_map(grain_augment, seed=0)
        .batch(BATCH, drop_remainder=True)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    )
    name = f"Grain {grain.__version__} random_map + mp_prefetch, {workers} workers"
    # a fresh iterator per repeat (start-up drained before timing): Grain's workers,
    # left idle while the other cases run, grew to an out-of-memory kill here
    return name, lambda: to_jax(iter(grain_ds))


def _loaders(
    only: set[str], paths: list[str], labels: list[int], workers: int
) -> tuple[dict[str, Iterator], dict[str, Callable[[], Iterator]], list[Callable[[], None]]]:
    """The loaders' cases: endless streams, makers of fresh streams, and what closes them."""
    streams: dict[str, Iterator] = {}
    fresh: dict[str, Callable[[], Iterator]] = {}
    closers: list[Callable[[], None]] = []

    ds = Dataset.from_dict(
        {"image": paths, "label": labels},
        features=Features({"image": Image(), "label": Value("int32")}),
    )
    if not only or "jaxfeed" in only:
        loader = DataLoader(
            ds, BATCH, shuffle=True, drop_last=True, row_transform=AUGMENT, num_workers=workers
        )
        streams[f"jaxfeed DataLoader, row_transform, {workers} workers"] = to_jax(
            forever(lambda: loader)
        )
        closers.append(loader.close)

    if not only or "torch" in only:
        try:
            import torch

            name = f"PyTorch {torch.__version__.split('+')[0]} DataLoader, {workers} workers"
            streams[name] = torch_stream(TorchFiles(paths, labels), workers)
        except ImportError:
            print("  torch not installed: skipped")

    if not only or "grain" in only:
        try:
            name, make = _grain_fresh(paths, labels, workers)
            fresh[name] = make
        except ImportError:
            print("  grain not installed: skipped")

    if not only or "hf" in only:
        try:
            import datasets
            import torch.utils.data

            hf = datasets.Dataset.from_dict({"image": paths, "label": labels}).cast_column(
                "image", datasets.Image()
            )
            hf.set_transform(hf_transform)
            name = f"HF datasets {datasets.__version__} set_transform + PyTorch, {workers} workers"
            streams[name] = torch_stream(hf, workers)
        except ImportError:
            print("  datasets or torch not installed: skipped")
    return streams, fresh, closers


def _time_cases(
    streams: dict[str, Iterator],
    fresh: dict[str, Callable[[], Iterator]],
    paths: list[str],
    drain: int,
    args: argparse.Namespace,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Every case, taking turns ``args.repeats`` times: rows/s and rows per CPU-second."""
    image = Image()
    n = BATCH * 4
    # the same job as the loaders, in one process: read each file and decode it, over the whole
    # folder (not a few cache-hot images), a different stretch each repeat
    start = itertools.count(0, n)
    singles = {
        "one process: jaxfeed decode + augment (per core)": lambda i: image.decode_array(
            (None, paths[i % len(paths)]), i
        ),
        "one process: Pillow decode + augment (per core)": lambda i: image.decode_array(
            (None, paths[i % len(paths)]), i, decoder="pillow"
        ),
    }
    for stream in streams.values():  # start every loader's workers before timing anything
        next(stream)
    rates: dict[str, list[float]] = {name: [] for name in [*streams, *fresh, *singles]}
    per_cpu: dict[str, list[float]] = {name: [] for name in rates}
    for r in range(args.repeats):  # the cases take turns, so load changes hit all of them
        for name, stream in streams.items():
            rate, cpu_rate = run_once(stream, drain, args.batches)
            rates[name].append(rate)
            per_cpu[name].append(cpu_rate)
        for name, make in fresh.items():
            stream = make()
            rate, cpu_rate = run_once(stream, drain, args.batches)
            rates[name].append(rate)
            per_cpu[name].append(cpu_rate)
            del stream
        first = next(start)
        for name, decode in singles.items():
            rate, cpu_rate = per_core_rate(decode, first, n)
            rates[name].append(rate)
            per_cpu[name].append(cpu_rate)
        print(f"  repeat {r + 1}/{args.repeats} done", flush=True)
    return rates, per_cpu


def _print_table(
    medians: dict[str, float],
    cpu_medians: dict[str, float],
    peers_names: list[str],
    workers: int,
    repeats: int,
) -> None:
    """The steady-state table and jaxfeed's ratios to the best peer and to one process."""
    core = medians["one process: jaxfeed decode + augment (per core)"]
    core_cpu = cpu_medians["one process: jaxfeed decode + augment (per core)"]
    ours_name = next((k for k in medians if k.startswith("jaxfeed")), None)
    print(
        f"\n{'case (medians of ' + str(repeats) + ')':<60}{'rows/s':>8}{'jaxfeed/this':>13}"
        f"{'rows/CPU-s':>12}{'jaxfeed/this':>13}"
    )
    for name in medians:
        row = f"{name:<60}{medians[name]:>8,.0f}"
        if ours_name:
            row += f"{medians[ours_name] / medians[name]:>12.2f}x"
        row += f"{cpu_medians[name]:>12,.0f}"
        if ours_name:
            row += f"{cpu_medians[ours_name] / cpu_medians[name]:>12.2f}x"
        print(row)
    peers = [k for k in peers_names if k != ours_name]
    if ours_name and peers:
        best = max(peers, key=medians.get)
        best_cpu = max(peers, key=cpu_medians.get)
        print(
            f"\njaxfeed / best peer: {medians[ours_name] / medians[best]:.2f}x in rows/s, "
            f"{cpu_medians[ours_name] / cpu_medians[best_cpu]:.2f}x in rows per CPU-second "
            "(target >= 1.2)"
        )
    if ours_name:
        print(
            f"jaxfeed / ({workers} x per-core rate): {medians[ours_name] / (workers * core):.2f} in "
            f"rows/s; parallel efficiency (rows per CPU-second, all processes, against one "
            f"process): {cpu_medians[ours_name] / core_cpu:.2f} (target >= 0.8)"
        )


def _print_first_batch(first_batch: dict[str, float], workers: int, repeats: int) -> None:
    """The time to the first batch of fresh loaders, if measured."""
    if first_batch:
        print(
            f"\ntime to the first batch (a fresh loader, {workers} workers, medians of "
            f"{repeats}, the two taking turns):"
        )
        for name, seconds in first_batch.items():
            print(f"  {name:<8}{seconds:>8.3f} s")
        if "torch" in first_batch:
            print(
                f"  jaxfeed / PyTorch: {first_batch['jaxfeed'] / first_batch['torch']:.2f}x the time "
                "(target <= 1.5)"
            )


def main() -> None:
    args = _parse_args()
    only = set(filter(None, args.only.split(",")))
    workers = args.workers
    drain = JOBS_PER_WORKER * workers + 4  # more than any loader here buffers (jaxfeed: jobs
    # queued per worker + prefetch 2 + the batch in hand; PyTorch: prefetch_factor 2 per worker)
    folder = make_folder(args.rows)
    paths, labels = listing(folder)
    for p in paths:  # into the page cache: no case, the one-process rate included, waits on disk
        Path(p).read_bytes()
    print(f"{len(paths)} JPEGs {SIZE}x{SIZE}, batch {BATCH}, {workers} workers ({machine()})")
    first_batch: dict[str, float] = {}
    if args.first_repeats and (not only or {"jaxfeed", "torch"} & only):
        first_batch = first_batch_seconds(paths, labels, workers, args.first_repeats)
    streams, fresh, closers = _loaders(only, paths, labels, workers)
    rates, per_cpu = _time_cases(streams, fresh, paths, drain, args)
    for close in closers:
        close()
    medians = {name: statistics.median(v) for name, v in rates.items()}
    cpu_medians = {name: statistics.median(v) for name, v in per_cpu.items()}
    _print_table(medians, cpu_medians, [*streams, *fresh], workers, args.repeats)
    _print_first_batch(first_batch, workers, args.first_repeats)
    path = save_json(
        "augment",
        {
            "rows": len(paths),
            "batch": BATCH,
            "workers": workers,
            "rates": rates,
            "medians": medians,
            "first_batch_seconds": first_batch,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
