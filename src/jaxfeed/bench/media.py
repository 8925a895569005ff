"""Decoding PNG images in the jax format: jaxfeed against Hugging Face `datasets`.

10,000 PNG-encoded 28x28 grayscale images (stored as bytes, as Hub datasets store them) plus a
label, read as ``with_format("jax").iter(batch_size=128)``.

Run: ``jaxfeed bench media`` or ``python -m jaxfeed.bench.media [--rows 10000] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import io

import jax
import numpy as np
import PIL.Image

from jaxfeed import ClassLabel, Dataset, Features, Image
from jaxfeed.bench._common import print_table, rows_per_second, save_json

BATCH = 128


def pngs(rows: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(rows):
        buffer = io.BytesIO()
        PIL.Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(
            buffer, format="PNG"
        )
        out.append(buffer.getvalue())
    return out


def sequential(ds):
    def run() -> int:
        n = 0
        for batch in ds.iter(batch_size=BATCH):
            jax.block_until_ready(batch["image"])
            n += len(batch["label"])
        return n

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    images = [{"bytes": b, "path": None} for b in pngs(args.rows)]
    labels = np.arange(args.rows) % 10
    ours = Dataset.from_dict(
        {"image": images, "label": labels},
        features=Features({"image": Image(), "label": ClassLabel(num_classes=10)}),
    ).with_format("jax")
    batch = next(ours.iter(batch_size=BATCH))
    assert batch["image"].shape == (BATCH, 28, 28) and batch["image"].dtype == np.uint8
    results = [
        {
            "case": "PNG 28x28 iter(128)",
            "name": "jaxfeed",
            "rows_per_s": rows_per_second(sequential(ours), args.repeats),
        }
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
                {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}
            ),
        ).with_format("jax")
        name = f"HF datasets {datasets.__version__}"
        results.append(
            {
                "case": "PNG 28x28 iter(128)",
                "name": name,
                "rows_per_s": rows_per_second(sequential(hf), args.repeats),
            }
        )
    print_table(f"jax format, {args.rows:,} PNG images + label, batch {BATCH}", results, "jaxfeed")
    print(
        f"\nwrote {save_json('media', {'rows': args.rows, 'batch_size': BATCH, 'results': results})}"
    )


if __name__ == "__main__":
    main()
