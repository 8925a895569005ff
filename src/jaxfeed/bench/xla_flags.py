"""XLA CPU options for the training step: a sweep, each configuration in its own processes.

For every configuration of ``XLA_FLAGS`` in :data:`CONFIGS` and every model (the article's CNN on
128 x 32 x 32 x 3, an MLP on the same batch, the transformer classifier on 32 padded rows of 128
tokens), a fresh process builds the Trainer's compiled step, runs ``--steps`` steps after a
warm-up and reports the median ms/step, with the parameters reached after a fixed number of steps
from the same start. The configurations take turns for ``--rounds`` rounds (a busy period of the
machine hits them all; each round starts one configuration later) and the table shows medians,
the speed-up over the default configuration (the ratio of the medians, and the median of the
per-round ratios with the rounds it won), and the largest difference of the parameters from the
default's (a configuration is usable only within ``--tolerance``, 1e-4). A persistent compilation
cache in a temporary folder keeps the rounds after the first from compiling again (its key
includes ``XLA_FLAGS``). PyTorch eager on the CNN is measured in the same rounds.

Run: ``python benchmarks/train_step.py --xla-flags [--rounds 5]``, or a part of it:
``python -m jaxfeed.bench.xla_flags --models cnn --only "xnn fusion,ynn fusion" --rounds 5``.

>>> CONFIGS["default"]
''
>>> max_relative_difference({"w": np.ones(3)}, {"w": np.ones(3) * (1 + 1e-6)}) < 1e-5
True
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from jaxfeed.bench._common import machine, save_json

FUSION = "dot,eltwise,reduce"
CONFIGS: dict[str, str] = {
    "default": "",
    "onednn": "--xla_cpu_use_onednn=true",
    "onednn fusion": f"--xla_cpu_experimental_onednn_fusion_type={FUSION}",
    "onednn + onednn fusion": (
        f"--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type={FUSION}"
    ),
    "xnn fusion": f"--xla_cpu_experimental_xnn_fusion_type={FUSION}",
    "xnn graph fusion": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
    "ynn fusion": f"--xla_cpu_experimental_ynn_fusion_type={FUSION}",
    "xnnpack": "--xla_cpu_use_xnnpack=true",
    "fast math": "--xla_cpu_enable_fast_math=true",
    "onednn + fast math": "--xla_cpu_use_onednn=true --xla_cpu_enable_fast_math=true",
    "no multi-thread eigen": "--xla_cpu_multi_thread_eigen=false",
}
MODELS = ("cnn", "mlp", "transformer")
CHECK_STEPS = 3  # steps from the same start whose parameters are compared across configurations


def max_relative_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest ``|a - b| / max(|b|, 1e-3)`` over all arrays (the same names in both)."""
    worst = 0.0
    for key, value in b.items():
        diff = np.abs(a[key] - value) / np.maximum(np.abs(value), 1e-3)
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def round_speedups(
    by_round: dict[tuple[str, str, int], float], model: str, name: str, rounds: int
) -> dict[str, float | str]:
    """The median over rounds of (default's time / this configuration's time) in the same round,
    steadier than the ratio of medians when the machine's load changes between rounds, and in how
    many rounds the configuration was the faster.

    >>> t = {("m", "default", 0): 10.0, ("m", "x", 0): 5.0, ("m", "default", 1): 30.0, ("m", "x", 1): 40.0}
    >>> round_speedups(t, "m", "x", 2)
    {'round_speedup': 1.375, 'faster_rounds': '1/2'}
    """
    ratios = [
        by_round[(model, "default", r)] / by_round[(model, name, r)]
        for r in range(rounds)
        if (model, "default", r) in by_round and (model, name, r) in by_round
    ]
    if not ratios:
        return {"round_speedup": float("nan"), "faster_rounds": "0/0"}
    faster = sum(x > 1 for x in ratios)
    return {"round_speedup": statistics.median(ratios), "faster_rounds": f"{faster}/{len(ratios)}"}


def _probe(model_name: str, steps: int, out: str) -> None:
    """In a process whose ``XLA_FLAGS`` are set: ms/step of the Trainer's step on ``model_name``
    (printed as JSON) and the parameters after :data:`CHECK_STEPS` steps (saved to ``out``)."""
    # imported here: the parent process of the sweep never starts JAX or builds a model
    import jax
    import optax
    from flax import nnx

    from jaxfeed import Trainer  # jax-free: the sweep's parent process
    from jaxfeed.bench import _steps as T  # jax-free: the sweep's parent process
    from jaxfeed.bench import transformer_step as S  # jax-free: the sweep's parent process
    from jaxfeed.models import CNN, MLP, TransformerClassifier  # jax-free: the sweep's parent

    rng = np.random.default_rng(0)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    if model_name == "transformer":
        batch = {k: jax.device_put(v) for k, v in S.classifier_batch(rng).items()}
        model = TransformerClassifier(S.VOCAB, 2, **S.SIZE, rngs=nnx.Rngs(0))
        trainer = Trainer(model, tx, inputs=("input_ids", "attention_mask"), verbose=0)
    else:
        x = jax.device_put(rng.random((T.BATCH, *T.SHAPE), dtype=np.float32))
        y = jax.device_put(rng.integers(0, 10, T.BATCH).astype(np.int32))
        batch = {"image": x, "label": y}
        if model_name == "cnn":
            model = CNN(10, input_shape=T.SHAPE, rngs=nnx.Rngs(0))
        else:
            model = MLP(10, input_shape=T.SHAPE, hidden=(1024, 1024), rngs=nnx.Rngs(0))
        trainer = Trainer(model, tx, verbose=0)
    run = T.trainer_case(trainer, batch)
    core = trainer.core
    run(CHECK_STEPS)
    # the whole training state (parameters and optimizer moments) after the same steps
    flat = {
        jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(core.state)[0]
        if np.issubdtype(np.asarray(leaf).dtype, np.floating)
    }
    np.savez(out, **flat)
    print(json.dumps({"ms": T.ms_per_step({"step": run}, steps, repeats=3)["step"]}))


def _torch_probe(steps: int) -> None:
    import torch

    from jaxfeed.bench import _steps as T  # jax-free: the sweep's parent process

    rng = np.random.default_rng(0)
    x_np = rng.random((T.BATCH, *T.SHAPE), dtype=np.float32)
    y_np = rng.integers(0, 10, T.BATCH).astype(np.int32)
    run = T.torch_cases(x_np, y_np)[f"PyTorch {torch.__version__.split('+')[0]} eager"]
    print(json.dumps({"ms": T.ms_per_step({"step": run}, steps, repeats=3)["step"]}))


def _run(args: list[str], flags: str, cache: str) -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": flags,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": cache,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    out = subprocess.run(
        [sys.executable, "-m", "jaxfeed.bench.xla_flags", *args],
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:160]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure(
    work: str, configs: dict[str, str], models: tuple[str, ...], rounds: int, steps: int
) -> tuple[dict, dict, dict, list[float]]:
    """Every configuration of every model, ``rounds`` times in turn (and PyTorch eager's CNN):
    ms per step by (model, config), by (model, config, round), errors, and PyTorch's ms."""
    ms: dict[tuple[str, str], list[float]] = {}
    by_round: dict[tuple[str, str, int], float] = {}
    errors: dict[tuple[str, str], str] = {}
    torch_ms: list[float] = []
    cache = str(Path(work) / "cache")
    for r in range(rounds):
        for model in models:
            turn = list(configs.items())  # each round starts one configuration later
            for name, flags in turn[r % len(turn) :] + turn[: r % len(turn)]:
                key = (model, name)
                if key in errors:
                    continue
                params = str(Path(work) / f"{model}-{name.replace(' ', '_')}.npz")
                res = _run(["--probe", model, str(steps), params], flags, cache)
                if "error" in res:
                    errors[key] = res["error"]
                else:
                    ms.setdefault(key, []).append(res["ms"])
                    by_round[(model, name, r)] = res["ms"]
                shown = f"{res['ms']:.1f} ms/step" if "ms" in res else res["error"]
                print(f"    round {r + 1} {model} {name}: {shown}", flush=True)
        if "cnn" in models:  # PyTorch eager runs the CNN only
            res = _run(["--torch-probe", str(steps)], "", cache)
            if "ms" in res:
                torch_ms.append(res["ms"])
        print(f"  round {r + 1}/{rounds} done", flush=True)
    return ms, by_round, errors, torch_ms


def _rows(
    work: str,
    configs: dict[str, str],
    models: tuple[str, ...],
    measured: tuple[dict, dict, dict, list[float]],
    rounds: int,
    tolerance: float,
) -> list[dict]:
    """One row per (model, configuration): median, speed-ups, and the parameters' difference from
    the default configuration's."""
    ms, by_round, errors, _ = measured
    rows = []
    for model in models:
        base = statistics.median(ms[(model, "default")])
        reference = dict(np.load(Path(work) / f"{model}-default.npz"))
        for name, flags in configs.items():
            key = (model, name)
            if key in errors:
                rows.append(
                    {"model": model, "config": name, "flags": flags, **{"error": errors[key]}}
                )
                continue
            median = statistics.median(ms[key])
            params = dict(np.load(Path(work) / f"{model}-{name.replace(' ', '_')}.npz"))
            diff = max_relative_difference(params, reference)
            rows.append(
                {
                    "model": model,
                    "config": name,
                    "flags": flags,
                    "ms_per_step": median,
                    "speedup": base / median,
                    **round_speedups(by_round, model, name, rounds),
                    "max_rel_diff": diff,
                    "within_tolerance": diff <= tolerance,
                }
            )
    return rows


def _print_table(
    rows: list[dict], rounds: int, torch_median: float | None, models: tuple[str, ...]
) -> None:
    """The sweep's table, and PyTorch eager's CNN against the default configuration."""
    print(f"\nXLA CPU options, Trainer step, medians of {rounds} alternating rounds ({machine()})")
    print(
        f"{'model':<12}{'configuration':<26}{'ms/step':>9}{'speed-up':>10}{'per round':>11}"
        f"{'faster':>8}{'max rel diff':>14}"
    )
    for row in rows:
        if "error" in row:
            print(f"{row['model']:<12}{row['config']:<26}  failed: {row['error']}")
            continue
        mark = "" if row["within_tolerance"] else "  (outside tolerance)"
        print(
            f"{row['model']:<12}{row['config']:<26}{row['ms_per_step']:>9.1f}"
            f"{row['speedup']:>9.2f}x{row['round_speedup']:>10.2f}x{row['faster_rounds']:>8}"
            f"{row['max_rel_diff']:>14.1e}{mark}"
        )
    if torch_median is not None and "cnn" in models:
        cnn_default = next(r for r in rows if r["model"] == "cnn" and r["config"] == "default")
        print(
            f"cnn         PyTorch eager             {torch_median:>9.1f}   "
            f"(Trainer default / PyTorch: {torch_median / cnn_default['ms_per_step']:.2f}x speed)"
        )


def sweep(
    rounds: int,
    steps: int,
    tolerance: float,
    only: list[str] | None = None,
    models: tuple[str, ...] = MODELS,
) -> dict:
    """Run the sweep; print and return the table."""
    unknown = [k for k in only or [] if k not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    configs = {k: v for k, v in CONFIGS.items() if not only or k in only or k == "default"}
    with tempfile.TemporaryDirectory(prefix="jaxfeed-xla-sweep-") as work:
        measured = _measure(work, configs, models, rounds, steps)
        rows = _rows(work, configs, models, measured, rounds, tolerance)
    torch_ms = measured[3]
    torch_median = statistics.median(torch_ms) if torch_ms else None
    _print_table(rows, rounds, torch_median, models)
    payload = {"rounds": rounds, "steps": steps, "rows": rows, "torch_eager_ms": torch_median}
    print(f"wrote {save_json('xla_flags', payload)}")
    return payload


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--only", default="", help="comma-separated configurations")
    parser.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated: cnn,mlp,transformer"
    )
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--torch-probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        model, steps, out = args.probe
        _probe(model, int(steps), out)
    elif args.torch_probe:
        _torch_probe(args.torch_probe)
    else:
        only = [c for c in args.only.split(",") if c]
        models = tuple(m for m in args.models.split(",") if m)
        if not models or any(m not in MODELS for m in models):
            parser.error(f"--models takes some of {', '.join(MODELS)}, got {args.models!r}")
        sweep(args.rounds, args.steps, args.tolerance, only, models)


if __name__ == "__main__":
    main()
