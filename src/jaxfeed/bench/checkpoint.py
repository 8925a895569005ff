"""Checkpoint save and restore of the CIFAR-10 CNN with its AdamW state.

jaxfeed's ``CheckpointManager`` against raw Orbax (``CheckpointManager`` with
``StandardSave``/``StandardRestore`` on the same arrays) and cloudpickle (what users reach for,
and what can run arbitrary code when loaded). Save times include waiting for the write to finish.

Two costs of jaxfeed's safety are measured on their own: the SHA-256 of every array, computed
when saving and verified when restoring, and the step-time overhead of ``checkpoint_every``
during training (saves are asynchronous: the loop waits only for the copy to host memory and the
checksums), against the same run without checkpoints and with synchronous saves.

Run: ``python benchmarks/checkpoint.py [--repeats 5] [--steps 60] [--every 10]``.
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

from jaxfeed import DataLoader, Dataset, Trainer
from jaxfeed.bench._common import machine, save_json
from jaxfeed.models import CNN
from jaxfeed.train import Callback, scale_images
from jaxfeed.train.checkpoint import CheckpointManager, checksums, nnx_pure_state


def timed(fn, repeats: int) -> float:
    fn()  # warm up (first Orbax call sets up its thread pools)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def step_overhead(root: Path, steps: int, every: int, repeats: int) -> list[dict]:
    """Median step time of ``fit(max_steps=steps)`` on synthetic CIFAR-sized batches: without
    checkpoints, with ``checkpoint_every=every`` (asynchronous saves) and with synchronous saves."""
    rng = np.random.default_rng(0)
    data = Dataset.from_dict(
        {
            "image": rng.integers(0, 256, (64 * 16, 32, 32, 3), dtype=np.uint8),
            "label": rng.integers(0, 10, 64 * 16),
        }
    )
    cases = [
        ("no checkpoints", None, {}),
        (f"checkpoint_every={every}, async", every, {"async_save": True}),
        (f"checkpoint_every={every}, sync", every, {"async_save": False}),
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    warm = 5  # steps left out: compilation and the first saves' set-up

    class Clock(Callback):
        def on_train_batch_end(self, trainer, step, logs):
            if step == warm:
                jax.block_until_ready(trainer.core.state)
                self.start = time.perf_counter()

    for repeat in range(repeats):
        for name, ckpt_every, options in cases:
            model = CNN(10, input_shape=(32, 32, 3), rngs=nnx.Rngs(0))
            clock = Clock()
            trainer = Trainer(
                model, optax.adamw(1e-3), preprocess=scale_images, verbose=0, callbacks=[clock]
            )
            folder = root / f"steps-{repeat}-{len(times[name])}-{ckpt_every}-{len(options)}"
            trainer.fit(
                DataLoader(data, 64, shuffle=True),
                max_steps=steps,
                checkpoint_every=ckpt_every,
                checkpoint_dir=folder if ckpt_every else None,
                checkpoint_options={"keep_last": 2, "keep_best": 0, **options},
            )
            jax.block_until_ready(trainer.core.state)
            times[name].append((time.perf_counter() - clock.start) * 1e3 / (steps - warm))
            shutil.rmtree(folder, ignore_errors=True)
    base = statistics.median(times["no checkpoints"])
    out = []
    for name, _, _ in cases:
        ms = statistics.median(times[name])
        out.append({"case": "train step", "name": name, "ms": ms, "overhead": ms / base - 1})
    return out


def _jaxfeed_cases(root: Path, state, counter: dict, repeats: int) -> list[dict]:
    """jaxfeed's ``CheckpointManager``: save (and its hashing) and restore into a fresh model."""
    results = []

    def fresh():
        m = CNN(10, input_shape=(32, 32, 3), rngs=nnx.Rngs(1))
        return m, nnx.Optimizer(m, optax.adamw(1e-3), wrt=nnx.Param)

    ours = CheckpointManager(root / "jaxfeed", keep_last=2, keep_best=0, async_save=True)

    def ours_save():
        counter["step"] += 1
        ours.save(counter["step"], state, metrics={"eval_accuracy": 0.5})
        ours.wait()

    results.append(
        {"case": "save", "name": "jaxfeed CheckpointManager", "ms": timed(ours_save, repeats)}
    )
    results.append(
        {
            "case": "save",
            "name": "  of which: SHA-256 of the arrays",
            "ms": timed(lambda: checksums(state), repeats),
        }
    )
    m, o = fresh()
    results.append({"case": "restore", "name": "jaxfeed CheckpointManager",
                    "ms": timed(lambda: ours.restore("latest", model=m, optimizer=o), repeats)})  # fmt: skip
    ours.close()
    return results


def _orbax_cases(root: Path, state, counter: dict, repeats: int) -> list[dict]:
    """Raw Orbax: ``StandardSave`` and ``StandardRestore``."""
    results = []
    raw = ocp.CheckpointManager(root / "orbax", options=ocp.CheckpointManagerOptions(max_to_keep=2))

    def raw_save():
        counter["step"] += 1
        raw.save(counter["step"], args=ocp.args.StandardSave(state))
        raw.wait_until_finished()

    results.append(
        {
            "case": "save",
            "name": f"raw Orbax {ocp.__version__} StandardSave",
            "ms": timed(raw_save, repeats),
        }
    )
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    results.append({"case": "restore", "name": f"raw Orbax {ocp.__version__} StandardRestore",
                    "ms": timed(lambda: raw.restore(raw.latest_step(), args=ocp.args.StandardRestore(abstract)), repeats)})  # fmt: skip
    raw.close()
    return results


def _pickle_cases(root: Path, model, optimizer, repeats: int) -> list[dict]:
    """cloudpickle's save and load of the states (none if it is not installed)."""
    results = []
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
                "ms": timed(pickle_save, repeats),
            }
        )
        results.append(
            {
                "case": "restore",
                "name": "cloudpickle (unsafe to load)",
                "ms": timed(pickle_load, repeats),
            }
        )
    except ImportError:
        print("cloudpickle not installed: skipped")
    return results


def _print_tables(results: list[dict], steps: list[dict], n_bytes: int, args) -> None:
    """The save/restore table (ratios to jaxfeed) and the per-step overhead table."""
    ref = {r["case"]: r["ms"] for r in results if r["name"].startswith("jaxfeed")}
    print(
        f"Checkpoint of the CIFAR CNN + AdamW state ({n_bytes / 2**20:.1f} MiB), median of {args.repeats} ({machine()})"
    )
    print(f"{'case':<10}{'implementation':<40}{'ms':>10}{'this / jaxfeed':>16}")
    for r in results:
        r["ratio_to_jaxfeed"] = r["ms"] / ref[r["case"]]
        print(f"{r['case']:<10}{r['name']:<40}{r['ms']:>10.1f}{r['ratio_to_jaxfeed']:>15.2f}x")
    print(
        f"\nTraining the CIFAR CNN (batch 64, {args.steps} steps, median of {max(1, args.repeats // 2)})"
    )
    print(f"{'case':<12}{'checkpoints':<38}{'ms/step':>10}{'overhead':>10}")
    for r in steps:
        print(f"{r['case']:<12}{r['name']:<38}{r['ms']:>10.1f}{r['overhead']:>9.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args()
    model = CNN(10, input_shape=(32, 32, 3), rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    state = nnx_pure_state(model, optimizer)
    n_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    root = Path(tempfile.mkdtemp(prefix="jaxfeed-ckpt-bench-"))
    counter = {"step": 0}

    results = _jaxfeed_cases(root, state, counter, args.repeats)
    results += _orbax_cases(root, state, counter, args.repeats)
    results += _pickle_cases(root, model, optimizer, args.repeats)
    results.append(
        {
            "case": "restore",
            "name": "  of which: SHA-256 verification",
            "ms": timed(lambda: checksums(state), args.repeats),
        }
    )
    steps = step_overhead(root, args.steps, args.every, max(1, args.repeats // 2))
    shutil.rmtree(root, ignore_errors=True)

    _print_tables(results, steps, n_bytes, args)
    payload = {"bytes": n_bytes, "results": results, "step_overhead": steps}
    print(f"\nwrote {save_json('checkpoint', payload)}")


if __name__ == "__main__":
    np.random.seed(0)
    main()
