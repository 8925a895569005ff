"""The ``jaxfeed`` command.

>>> from jaxfeed.cli import main
>>> main(["--version"])  # doctest: +SKIP
jaxfeed 0.1.0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import jaxfeed


def demo(rows: int, batch_size: int) -> None:
    """Build an MNIST-shaped dataset, read it as JAX batches and report the rate."""
    import jax
    import numpy as np

    from jaxfeed import Array2D, ClassLabel, Dataset, Features

    rng = np.random.default_rng(0)
    features = Features(
        {
            "image": Array2D((28, 28), "uint8"),
            "label": ClassLabel(names=[str(i) for i in range(10)]),
        }
    )
    ds = Dataset.from_dict(
        {
            "image": rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8),
            "label": rng.integers(0, 10, rows),
        },
        features=features,
    )
    print(ds)
    print(f"features: {ds.features}")
    print(f"storage:  {ds.data.schema.field('image').type}")
    ds = ds.with_format("jax", device=str(jax.devices()[0]))
    first = next(ds.iter(batch_size=batch_size))
    print(
        f"first batch: image {first['image'].shape} {first['image'].dtype} on {first['image'].device}, "
        f"label {first['label'].shape} {first['label'].dtype}: {first['label'][:8]}"
    )
    for epoch in range(2):
        start = time.perf_counter()
        n = 0
        for batch in ds.iter(batch_size=batch_size):
            jax.block_until_ready(batch["image"])
            n += batch["label"].shape[0]
        seconds = time.perf_counter() - start
        print(
            f"epoch {epoch}: {n:,} rows in {seconds:.2f} s ({n / seconds:,.0f} rows/s as jax.Array batches)"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxfeed",
        description="Datasets in Apache Arrow, returned as jax.Array.",
        epilog="example: jaxfeed demo --rows 60000 --batch-size 128",
    )
    parser.add_argument("--version", action="version", version=f"jaxfeed {jaxfeed.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("demo", help="build a dataset in memory and read it as JAX batches")
    p.add_argument(
        "--rows", type=_positive, default=60_000, help="rows to generate (default 60000)"
    )
    p.add_argument("--batch-size", type=_positive, default=128, help="rows per batch (default 128)")
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.rows, args.batch_size)
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
