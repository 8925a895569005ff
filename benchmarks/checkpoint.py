"""Checkpoint save and restore of the CIFAR-10 CNN with its AdamW state.

jaxfeed's ``CheckpointManager`` against raw Orbax (``CheckpointManager`` with
``StandardSave``/``StandardRestore`` on the same arrays) and cloudpickle (what users reach for,
and what can run arbitrary code when loaded). Save times include waiting for the write to finish.

Run: ``python benchmarks/checkpoint.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

from jaxfeed.checkpoint import CheckpointManager, nnx_pure_state
from jaxfeed.models import CNN

try:
    from benchmarks._common import machine, save_json
except ImportError:  # run as a script
    from _common import machine, save_json


def timed(fn, repeats: int) -> float:
    fn()  # warm up (first Orbax call sets up its thread pools)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    model = CNN(10, input_shape=(32, 32, 3), rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    state = nnx_pure_state(model, optimizer)
    n_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    root = Path(tempfile.mkdtemp(prefix="jaxfeed-ckpt-bench-"))
    results = []
    counter = {"step": 0}

    def fresh():
        m = CNN(10, input_shape=(32, 32, 3), rngs=nnx.Rngs(1))
        return m, nnx.Optimizer(m, optax.adamw(1e-3), wrt=nnx.Param)

    # jaxfeed
    ours = CheckpointManager(root / "jaxfeed", keep_last=2, keep_best=0, async_save=True)

    def ours_save():
        counter["step"] += 1
        ours.save(counter["step"], state, metrics={"eval_accuracy": 0.5})
        ours.wait()

    results.append(
        {"case": "save", "name": "jaxfeed CheckpointManager", "ms": timed(ours_save, args.repeats)}
    )
    m, o = fresh()
    results.append({"case": "restore", "name": "jaxfeed CheckpointManager",
                    "ms": timed(lambda: ours.restore("latest", model=m, optimizer=o), args.repeats)})  # fmt: skip
    ours.close()

    # raw Orbax
    raw = ocp.CheckpointManager(root / "orbax", options=ocp.CheckpointManagerOptions(max_to_keep=2))

    def raw_save():
        counter["step"] += 1
        raw.save(counter["step"], args=ocp.args.StandardSave(state))
        raw.wait_until_finished()

    results.append(
        {
            "case": "save",
            "name": f"raw Orbax {ocp.__version__} StandardSave",
            "ms": timed(raw_save, args.repeats),
        }
    )
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    results.append({"case": "restore", "name": f"raw Orbax {ocp.__version__} StandardRestore",
                    "ms": timed(lambda: raw.restore(raw.latest_step(), args=ocp.args.StandardRestore(abstract)), args.repeats)})  # fmt: skip
    raw.close()

    try:
        import cloudpickle

        path = root / "model.pkl"

        def pickle_save():
            with open(path, "wb") as f:
                cloudpickle.dump((nnx.state(model), nnx.state(optimizer)), f)

        def pickle_load():
            with open(path, "rb") as f:
                return cloudpickle.load(f)

        results.append(
            {
                "case": "save",
                "name": "cloudpickle (unsafe to load)",
                "ms": timed(pickle_save, args.repeats),
            }
        )
        results.append(
            {
                "case": "restore",
                "name": "cloudpickle (unsafe to load)",
                "ms": timed(pickle_load, args.repeats),
            }
        )
    except ImportError:
        print("cloudpickle not installed: skipped")
    shutil.rmtree(root, ignore_errors=True)

    ref = {r["case"]: r["ms"] for r in results if r["name"].startswith("jaxfeed")}
    print(
        f"Checkpoint of the CIFAR CNN + AdamW state ({n_bytes / 2**20:.1f} MiB), median of {args.repeats} ({machine()})"
    )
    print(f"{'case':<10}{'implementation':<40}{'ms':>10}{'this / jaxfeed':>16}")
    for r in results:
        r["ratio_to_jaxfeed"] = r["ms"] / ref[r["case"]]
        print(f"{r['case']:<10}{r['name']:<40}{r['ms']:>10.1f}{r['ratio_to_jaxfeed']:>15.2f}x")
    print(f"\nwrote {save_json('checkpoint', {'bytes': n_bytes, 'results': results})}")


if __name__ == "__main__":
    np.random.seed(0)
    main()
