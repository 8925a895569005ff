"""jaxfeed's jax format against Hugging Face `datasets` on the same data.

60,000 rows of ``Array2D((28, 28), "uint8")`` plus an int label (MNIST-shaped), batches of 128:

* sequential: ``ds.with_format("jax").iter(batch_size=128)`` over the whole dataset;
* random: ``ds[idx]`` for random batches of 128 indices.

Run: ``jaxfeed bench formatting`` or ``python -m jaxfeed.bench.formatting [--rows 60000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

from jaxfeed import Array2D, ClassLabel, Dataset, Features
from jaxfeed.bench._common import print_table, rows_per_second, save_json

BATCH = 128


def make_data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8), rng.integers(0, 10, rows)


def sequential(ds) -> callable:
    def run() -> int:
        n = 0
        for batch in ds.iter(batch_size=BATCH):
            jax.block_until_ready(batch["image"])
            n += batch["label"].shape[0]
        return n

    return run


def random_batches(ds, rows: int, batches: int) -> callable:
    rng = np.random.default_rng(1)
    index_batches = [rng.integers(0, rows, BATCH) for _ in range(batches)]

    def run() -> int:
        for idx in index_batches:
            jax.block_until_ready(ds[idx]["image"])
        return BATCH * batches

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    images, labels = make_data(args.rows)
    ours = Dataset.from_dict(
        {"image": images, "label": labels},
        features=Features(
            {"image": Array2D((28, 28), "uint8"), "label": ClassLabel(num_classes=10)}
        ),
    ).with_format("jax")
    results = [
        {
            "case": "sequential iter(128)",
            "name": "jaxfeed",
            "rows_per_s": rows_per_second(sequential(ours), args.repeats),
        },
        {
            "case": "random ds[idx] (128)",
            "name": "jaxfeed",
            "rows_per_s": rows_per_second(random_batches(ours, args.rows, 400), args.repeats),
        },
    ]
    try:
        import datasets
    except ImportError:
        print("HF `datasets` is not installed (pip install 'jaxfeed[bench]'): peers skipped")
        datasets = None
    if datasets is not None:
        hf = datasets.Dataset.from_dict(
            {"image": images, "label": labels},
            features=datasets.Features(
                {
                    "image": datasets.Array2D((28, 28), "uint8"),
                    "label": datasets.ClassLabel(num_classes=10),
                }
            ),
        ).with_format("jax")
        results += [
            {
                "case": "sequential iter(128)",
                "name": f"HF datasets {datasets.__version__}",
                "rows_per_s": rows_per_second(sequential(hf), max(1, args.repeats // 2)),
            },
            {
                "case": "random ds[idx] (128)",
                "name": f"HF datasets {datasets.__version__}",
                "rows_per_s": rows_per_second(random_batches(hf, args.rows, 40), args.repeats),
            },
        ]
    print_table(
        f"jax format, {args.rows:,} rows of 28x28 uint8 + label, batch {BATCH}", results, "jaxfeed"
    )
    path = save_json("formatting", {"rows": args.rows, "batch_size": BATCH, "results": results})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
