"""The step builders and timing the train-step benchmarks share: the CIFAR-shaped CNN batch
(:data:`BATCH` x :data:`SHAPE`), the Trainer's own compiled step as a ``run(steps)`` case
(:func:`trainer_case`), PyTorch's eager and compiled steps on the same CNN (:func:`torch_cases`),
and the median ms/step of cases taking turns (:func:`ms_per_step`).

Used by :mod:`jaxfeed.bench.train_step`, :mod:`jaxfeed.bench.transformer_step`,
:mod:`jaxfeed.bench.xla_flags` (in its probe processes) and :mod:`jaxfeed.bench.conv_lowering`.
Imports JAX but not the Trainer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

if TYPE_CHECKING:
    from jaxfeed import Trainer

BATCH, SHAPE = 128, (32, 32, 3)


def ms_per_step(cases: dict, steps: int, repeats: int, warmup: int = 3) -> dict[str, float]:
    """Median ms/step of each case after ``warmup`` steps (compile included); the cases take
    turns in every repeat, so a noisy period of the machine hits them all alike."""
    for run in cases.values():
        run(warmup)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            start = time.perf_counter()
            run(steps)
            times[name].append((time.perf_counter() - start) / steps * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def trainer_case(trainer: Trainer, batch: dict[str, Any]) -> Callable[[int], None]:
    """The Trainer's own compiled step, called as ``fit`` calls it."""
    arrays, n = trainer._batch(batch, "train")
    core = trainer.core
    holder = {"sums": trainer._sums(), "step": 0}

    def run(steps: int) -> None:
        for _ in range(steps):
            core.state, holder["sums"] = core.train_step(
                core.state, holder["sums"], arrays, np.int32(n), np.int32(holder["step"])
            )
            holder["step"] += 1
        jax.block_until_ready(holder["sums"])

    return run


def torch_cases(x_np, y_np):
    """PyTorch's eager step (and ``torch.compile``'s, when it works here) on the same CNN, AdamW;
    none without PyTorch."""
    try:
        import torch

        from jaxfeed.bench.torch_cnn import TorchCNN  # optional: the bench extra (torch)
    except ImportError:
        return {}
    torch.manual_seed(0)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np.astype(np.int64))
    out = {}
    for name in ("eager", "compile"):
        model = TorchCNN(10, SHAPE)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()
        step_model = model
        if name == "compile":
            try:
                step_model = torch.compile(model)
                step_model(x[:2])
            except Exception as err:
                print(f"  torch.compile unavailable here: {type(err).__name__}: {str(err)[:120]}")
                continue

        def run(n, m=step_model, o=opt, criterion=loss_fn):
            for _ in range(n):
                o.zero_grad(set_to_none=True)
                loss = criterion(m(x), y)
                loss.backward()
                o.step()

        out[f"PyTorch {torch.__version__.split('+')[0]} {name}"] = run
    return out
