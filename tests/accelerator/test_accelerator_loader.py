"""The DataLoader's process workers (which never import JAX) decode and transform rows for a jitted
step on the accelerator."""

import os

import jax
import jax.numpy as jnp
import numpy as np
from accelerator_helpers import on, png

from jaxfeed import ClassLabel, DataLoader, Dataset, Features, Image, Value
from worker_functions import scaled_and_tagged


def test_process_workers_feed_a_jitted_step(platform):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (40, 8, 8, 3), dtype=np.uint8)
    ds = Dataset.from_dict(
        {"image": [png(p) for p in pixels], "label": np.arange(40) % 4, "id": np.arange(40)},
        features=Features({"image": Image(), "label": ClassLabel(num_classes=4),
                           "id": Value("int64")}),
    )  # fmt: skip
    loader = DataLoader(ds, 8, shuffle=True, seed=0, row_transform=scaled_and_tagged,
                        num_workers=2)  # fmt: skip

    @jax.jit
    def step(total, batch):
        return total + jnp.sum(batch["image"]), jnp.sum(batch["image"], axis=(1, 2, 3))

    total, seen, pids = jnp.float32(0), [], set()
    for _ in range(2):  # the workers build the second epoch's batches
        for batch in loader:
            on(platform, batch["image"])
            total, sums = step(total, batch)
            seen.extend(np.asarray(batch["id"]).tolist())
            np.testing.assert_allclose(
                np.asarray(sums),
                pixels[np.asarray(batch["id"])].astype(np.float32).sum(axis=(1, 2, 3)) / 255,
                rtol=1e-5,
            )
            built = np.asarray(batch["pid"])
            pids |= set(built.tolist())
            assert not np.asarray(batch["jax"])[built != os.getpid()].any()  # no JAX in workers
    assert sorted(seen) == sorted(list(range(40)) * 2)
    np.testing.assert_allclose(float(total), 2 * pixels.sum() / 255, rtol=1e-4)
    assert len(pids - {os.getpid()}) >= 1  # process workers built batches
