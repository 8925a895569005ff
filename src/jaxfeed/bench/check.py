"""``make bench-check``: the quick benchmarks as ratios, checked against a recorded baseline.

Each probe runs in a fresh process and measures jaxfeed and the thing it is compared with in the
same run, taking turns, so a busy period of the machine hits both; the figure kept is the ratio of
their medians (higher is better for jaxfeed). The check fails when a ratio falls more than
``--tolerance`` (20%) below the one recorded in ``benchmarks/baseline.json``, which is updated on
purpose (``--update``) in the commit that changes it.

=============  ===========================================  ===================================
probe          jaxfeed                                      against
=============  ===========================================  ===================================
loader         shuffled in-memory ``DataLoader`` (60k rows)  numpy gather + ``jnp.asarray``
formatting     ``with_format("jax").iter(128)``              HF ``datasets``, same call
augment        steady rows/s of a training script that       PyTorch ``DataLoader`` in the same
               imports torch, jax and flax at the top: JPEG  script, same function (forked
               folder, crop+flip+normalise, 2 workers, a     workers)
               new loader per epoch
first_batch    the same script: 1 / first batch time         the same
epoch          the same script: 1 / time of its first whole  the same
               epoch, worker start-up included
streaming      ``DataLoader`` over a streamed Parquet file   HF ``IterableDataset`` (jax format)
train_step     the Trainer's compiled step (CNN, AdamW)      a hand-written ``jax.jit`` step
=============  ===========================================  ===================================

Run: ``python -m jaxfeed.bench.check [--only loader,train_step] [--update]`` (peers need
``pip install -e '.[bench]'``).

The last three come from one run of the script (:mod:`jaxfeed.bench.epochs`).

>>> sorted(PROBES)
['augment', 'epoch', 'first_batch', 'formatting', 'loader', 'streaming', 'train_step']
>>> verdict(1.0, baseline=1.3, tolerance=0.2)
'FAIL'
>>> verdict(1.1, baseline=1.3, tolerance=0.2)
'ok'
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from jaxfeed.bench._common import machine

REPEATS = 5
BASELINE = Path("benchmarks") / "baseline.json"


def _alternate(cases: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of each case's rate over ``repeats`` turns (one warm-up turn first)."""
    for run in cases.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            rates[name].append(run())
    return {name: statistics.median(r) for name, r in rates.items()}


def _rate(batches: Callable[[], object], key: str) -> Callable[[], float]:
    """A pass over ``batches()`` as rows/s, each batch's ``key`` waited for on the device."""
    import jax

    def run() -> float:
        start, rows = time.perf_counter(), 0
        for batch in batches():
            jax.block_until_ready(batch[key])
            rows += batch[key].shape[0]
        return rows / (time.perf_counter() - start)

    return run


def _digits(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8), rng.integers(0, 10, rows)


def probe_loader() -> dict[str, float]:
    import jax.numpy as jnp

    from jaxfeed import Array2D, ClassLabel, DataLoader, Dataset, Features  # import cost: JAX

    rows, batch = 60_000, 128
    images, labels = _digits(rows)
    features = Features({"image": Array2D((28, 28), "uint8"), "label": ClassLabel(num_classes=10)})
    ds = Dataset.from_dict({"image": images, "label": labels}, features=features)
    loader = DataLoader(ds, batch, shuffle=True, drop_last=True)
    orders = iter(np.random.default_rng(1).permutation(rows) for _ in range(100))

    def gather():
        perm = next(orders)
        for start in range(0, rows - batch + 1, batch):
            idx = perm[start : start + batch]
            yield {"image": jnp.asarray(images[idx]), "label": jnp.asarray(labels[idx])}

    rates = _alternate(
        {"jaxfeed": _rate(lambda: loader, "image"), "peer": _rate(gather, "image")}, REPEATS
    )
    return {**rates, "what": "shuffled DataLoader / numpy-gather limit (rows/s)"}


def probe_formatting() -> dict[str, float]:
    import datasets

    from jaxfeed import Array2D, ClassLabel, Dataset, Features  # import cost: pyarrow

    images, labels = _digits(12_000)
    data = {"image": images, "label": labels}
    ours = Dataset.from_dict(
        data,
        features=Features(
            {"image": Array2D((28, 28), "uint8"), "label": ClassLabel(num_classes=10)}
        ),
    ).with_format("jax")
    hf = datasets.Dataset.from_dict(
        data,
        features=datasets.Features(
            {
                "image": datasets.Array2D((28, 28), "uint8"),
                "label": datasets.ClassLabel(num_classes=10),
            }
        ),
    ).with_format("jax")

    def passes(ds, count: int = 8):  # one pass is ~10 ms: time several, or noise decides
        for _ in range(count):
            yield from ds.iter(batch_size=128)

    rates = _alternate(
        {
            "jaxfeed": _rate(lambda: passes(ours), "image"),
            "peer": _rate(lambda: passes(hf, 2), "image"),
        },
        REPEATS,
    )
    return {**rates, "what": "jax format iter(128) / HF datasets (rows/s)"}


def probe_script() -> dict[str, dict]:
    """``augment``, ``first_batch`` and ``epoch``: one run of the heavy-import training script
    (:mod:`jaxfeed.bench.epochs`) with jaxfeed and with PyTorch, taking turns."""
    from jaxfeed.bench import epochs as E  # import cost: none until measured

    result = E.measure(rows=640, epochs=3, repeats=2, workers=2, scripts=("heavy",))
    ours, peer = result["medians"]["heavy jaxfeed"], result["medians"]["heavy torch"]
    where = "a script importing torch, jax and flax at the top, a new loader per epoch, 2 workers"
    return {
        "augment": {
            "jaxfeed": ours["steady"],
            "peer": peer["steady"],
            "what": f"augmented JPEG batches / PyTorch (rows/s; {where})",
        },
        "first_batch": {  # per second of waiting, so that higher is better as for the others
            "jaxfeed": 1 / ours["first"],
            "peer": 1 / peer["first"],
            "what": "1 / time to the first augmented batch / PyTorch (the same script)",
        },
        "epoch": {
            "jaxfeed": 1 / ours["epoch"],
            "peer": 1 / peer["epoch"],
            "what": "1 / time of the first whole epoch, start-up included / PyTorch (the same)",
        },
    }


def probe_streaming() -> dict[str, float]:
    from jaxfeed.bench import scale  # import cost: pyarrow

    rows, seconds = 100_000, 4.0
    with tempfile.TemporaryDirectory(prefix="jaxfeed-bench-check-") as work:
        path = Path(work) / "vectors.parquet"
        scale.write_feature_file(path, rows)
        runs: dict[str, list[float]] = {"hf": [], "jaxfeed": []}
        for _ in range(2):  # each library's passes in a fresh process, taking turns
            for lib in runs:
                command = [scale.STREAM, lib, str(path), str(scale.BATCH), str(rows)]
                out = scale.run_json(["-c", *command, "2", str(seconds)])
                runs[lib] += out["rows_per_s"]
    return {
        "jaxfeed": statistics.median(runs["jaxfeed"]),
        "peer": statistics.median(runs["hf"]),
        "what": f"streamed Parquet, {rows:,}-row epochs / HF IterableDataset (rows/s)",
    }


def probe_train_step() -> dict[str, float]:
    import jax
    import optax

    from jaxfeed.bench import train_step as T  # import cost: JAX, flax, optax

    rng = np.random.default_rng(0)
    x = jax.device_put(rng.random((T.BATCH, *T.SHAPE), dtype=np.float32))
    y = jax.device_put(rng.integers(0, 10, T.BATCH).astype(np.int32))
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    cases = {"jaxfeed": T.jaxfeed_case(x, y, tx), "peer": T.same_model_case(x, y, tx)}
    ms = T.ms_per_step(cases, steps=3, repeats=REPEATS)
    # steps per second, so that higher is better as for the other probes
    return {
        "jaxfeed": 1e3 / ms["jaxfeed"],
        "peer": 1e3 / ms["peer"],
        "what": "Trainer step / hand-written jax.jit step, same CNN (steps/s)",
    }


PROBES: dict[str, Callable[[], dict]] = {
    "loader": probe_loader,
    "formatting": probe_formatting,
    "augment": probe_script,
    "first_batch": probe_script,
    "epoch": probe_script,
    "streaming": probe_streaming,
    "train_step": probe_train_step,
}
_SHARED = {probe_script}  # probes that measure several figures in one run


def verdict(ratio: float, baseline: float | None, tolerance: float) -> str:
    """``ok``, ``FAIL`` (more than ``tolerance`` below ``baseline``) or ``new`` (no baseline)."""
    if baseline is None:
        return "new"
    return "ok" if ratio >= baseline * (1 - tolerance) else "FAIL"


_RUNS: dict[str, dict] = {}  # what a shared probe returned, by probe function


def run_probe(name: str) -> dict:
    """Probe ``name`` in a fresh process (nothing another probe left behind is measured); a probe
    that measures several figures runs once for all of them."""
    probe = PROBES[name]
    if probe in _SHARED:
        key = probe.__name__
        if key not in _RUNS:
            _RUNS[key] = _run_fresh(name)
        result = dict(_RUNS[key][name])
        result["ratio"] = result["jaxfeed"] / result["peer"]
        return result
    result = _run_fresh(name)
    result["ratio"] = result["jaxfeed"] / result["peer"]
    return result


def _run_fresh(name: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "jaxfeed.bench.check", "--probe", name],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"probe {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated probes (default: all)")
    parser.add_argument("--tolerance", type=float, default=0.2)
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--update", action="store_true", help="record these ratios as baseline")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: run one probe, print JSON
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(PROBES[args.probe]()))
        return 0
    names = [n for n in args.only.split(",") if n] or list(PROBES)
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        parser.error(f"unknown probe(s) {unknown}; known: {', '.join(PROBES)}")
    recorded = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    baseline = recorded.get("ratios", {})
    print(f"bench-check ({machine()}); ratios jaxfeed / peer, medians, same run")
    print(f"{'probe':<12}{'jaxfeed':>12}{'peer':>12}{'ratio':>8}{'baseline':>10}{'floor':>8}  ")
    results, failed = {}, []
    for name in names:
        r = run_probe(name)
        results[name] = r
        base = baseline.get(name)
        state = verdict(r["ratio"], base, args.tolerance)
        if state == "FAIL":
            failed.append(name)
        shown = (
            f"{base:>10.2f}{base * (1 - args.tolerance):>8.2f}" if base else f"{'-':>10}{'-':>8}"
        )
        print(
            f"{name:<12}{r['jaxfeed']:>12,.1f}{r['peer']:>12,.1f}{r['ratio']:>8.2f}{shown}  "
            f"{state}  ({r['what']})",
            flush=True,
        )
    if args.update:
        ratios = {**baseline, **{n: round(r["ratio"], 3) for n, r in results.items()}}
        payload = {
            "machine": machine(),
            "command": "make bench-check ARGS=--update",
            "ratios": ratios,
        }
        tmp = args.baseline.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n")
        tmp.replace(args.baseline)
        print(f"recorded {args.baseline}")
        return 0
    if failed:
        print(
            f"\nFAILED: {', '.join(failed)} fell more than {args.tolerance:.0%} below the recorded "
            f"ratio ({args.baseline}); find the change that slowed it, or record a new baseline "
            "on purpose (--update) in the commit that explains why"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
