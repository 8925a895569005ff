"""Models bigger than one device: per-device memory and step time of each sharding mode.

``python benchmarks/sharding.py`` trains a stack of transformer-FFN-shaped dense layers (width
``d``, hidden ``4d``; ``--params`` sets the size, ~100M by default) with Adam on 8 fake CPU
devices, under each :class:`~jaxfeed.Trainer` ``sharding=``: replicate (``data=8``), fsdp
(``data=8``), tensor parallel (``{"mlp": "model"}`` on ``data=4,model=2``) and both. It prints,
from the same run, the parameter + optimizer bytes each device holds (measured from the live
arrays' shardings), the median step time, each as a ratio to replicate, and the largest model
that fits ``--budget-gb`` per device under each mode, from the measured bytes per parameter
(parameters and Adam state only: activations and XLA's temporaries come on top).

Fake CPU devices share the host's cores and memory: the step times compare the work each layout
gives the 8 devices (replicate repeats the whole optimizer update on every one) on one machine,
not what accelerators would do.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time

from jaxfeed.bench._common import save_json

MODES = {
    "replicate": ("replicate", {"data": 8}),
    "fsdp": ("fsdp", {"data": 8}),
    "tensor parallel": ({"mlp": "model"}, {"data": 4, "model": 2}),
    "fsdp + tensor parallel": ({"mlp": "model", "fsdp": True}, {"data": 4, "model": 2}),
}


def shape_for(params: float, width: int | None = None) -> tuple[int, int]:
    """``(width, blocks)`` of a stack of ``blocks`` pairs of layers ``d -> 4d -> d`` holding
    about ``params`` parameters (8 d^2 per pair).

    >>> shape_for(100e6)
    (1024, 12)
    """
    d = width or (1024 if params >= 50e6 else 256 if params < 5e6 else 512)
    return d, max(1, round(params / (8 * d * d)))


def measure(mode: str, width: int, blocks: int, batch: int, steps: int) -> dict:
    """Train ``steps`` timed steps (after two to compile) under ``mode``; bytes and times."""
    import jax
    import numpy as np
    import optax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    from jaxfeed import DataLoader, Dataset, Trainer  # import cost: JAX, optax, pyarrow
    from jaxfeed.models import MLP  # import cost: JAX, flax
    from jaxfeed.train import Callback  # import cost: JAX, optax
    from jaxfeed.train.sharding import make_mesh  # import cost: JAX

    sharding, axes = MODES[mode]
    mesh = make_mesh(axes, jax.devices()[:8])
    model = MLP(width, (width,), hidden=(4 * width, width) * blocks, rngs=nnx.Rngs(0))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * (steps + 2), width)).astype(np.float32)
    data = Dataset.from_dict({"x": x, "label": rng.integers(0, width, len(x))})
    loader = DataLoader(data, batch, sharding=NamedSharding(mesh, PartitionSpec("data")))

    class Clock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_end(self, trainer, step, logs) -> None:
            jax.block_until_ready(trainer.core.state)
            self.times.append(time.perf_counter())

    clock = Clock()
    trainer = Trainer(model, optax.adam(1e-4), inputs="x", verbose=0, mesh=mesh,
                      sharding=sharding, callbacks=[clock], handle_signals=False)  # fmt: skip
    trainer.fit(loader, max_steps=steps + 2)
    state = trainer.state_bytes_per_device()
    return {
        "mode": mode,
        "mesh": ",".join(f"{k}={v}" for k, v in axes.items()),
        "params": int(params),
        "bytes_per_device": int(state),
        "bytes_per_param": state / params,
        "step_s": statistics.median(b - a for a, b in itertools.pairwise(clock.times[1:])),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=float, default=100e6, help="model size (default 1e8)")
    parser.add_argument("--width", type=int, default=None, help="d (default: by --params)")
    parser.add_argument("--batch", type=int, default=32, help="rows per step (default 32)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    parser.add_argument("--budget-gb", type=float, default=16.0,
                        help="per-device memory for the largest-model column (default 16)")  # fmt: skip
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_num_cpu_devices", 8)
    if jax.device_count() < 8:
        raise SystemExit(f"this benchmark needs 8 devices, JAX sees {jax.device_count()}")
    width, blocks = shape_for(args.params, args.width)
    rows = [measure(m, width, blocks, args.batch, args.steps) for m in MODES]
    base = rows[0]
    budget = args.budget_gb * 2**30
    print(
        f"\n{rows[0]['params'] / 1e6:.1f}M parameters (width {width}, {blocks} blocks of "
        f"{width}->{4 * width}->{width}), Adam, batch {args.batch}, 8 fake CPU devices "
        f"({jax.devices()[0].platform}), median of {args.steps} steps"
    )
    print(
        f"{'mode':<24}{'mesh':<16}{'MB/device':>11}{'x replicate':>13}{'B/param':>9}"
        f"{'step ms':>10}{'x replicate':>13}{'fits ' + format(args.budget_gb, 'g') + ' GB':>14}"
    )
    for r in rows:
        fits = budget / r["bytes_per_param"]
        r["largest_params_in_budget"] = int(fits)
        print(
            f"{r['mode']:<24}{r['mesh']:<16}{r['bytes_per_device'] / 2**20:>11.1f}"
            f"{r['bytes_per_device'] / base['bytes_per_device']:>13.3f}{r['bytes_per_param']:>9.2f}"
            f"{r['step_s'] * 1e3:>10.1f}{r['step_s'] / base['step_s']:>13.2f}"
            f"{_count(fits):>14}"
        )
    print(
        "(bytes: parameters + Adam state per device, from the arrays' shardings; the last column "
        "is budget / bytes per parameter, before activations)"
    )
    settings = {"params": args.params, "width": width, "blocks": blocks, "batch": args.batch,
                "steps": args.steps, "budget_gb": args.budget_gb}  # fmt: skip
    print(f"\nwrote {save_json('sharding', {'settings': settings, 'rows': rows})}")
    return rows


def _count(n: float) -> str:
    """``_count(1.5e9)`` is ``'1.5B'``."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= size:
            return f"{n / size:.{max(0, 2 - int(math.log10(n / size)))}f}{unit}"
    return f"{n:,.0f}"


if __name__ == "__main__":
    main()
