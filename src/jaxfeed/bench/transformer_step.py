"""Train-step speed of the transformers: jaxfeed's Trainer against a hand-written ``jax.jit`` step
on the same model, in the same run.

* ``TransformerClassifier`` on padded token rows (``input_ids`` + ``attention_mask``), softmax
  cross-entropy, AdamW;
* ``TransformerLM`` on packed rows (``input_ids``, ``segment_ids``, ``positions``) with
  ``loss="next_token"``, AdamW.

The hand-written step is Flax's functional loop (split once, ``jax.jit``, merge inside, state
donated) computing the same masked loss; the Trainer's step adds its on-device metric sums
(accuracy, or perplexity and token accuracy). Cases take turns in every repeat (medians).

Run: ``python benchmarks/train_step.py --transformers [--quick]`` (also part of the full run).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.bench._steps import trainer_case
from jaxfeed.models import TransformerClassifier, TransformerLM

VOCAB, BATCH, LENGTH = 1000, 32, 128
SIZE = {"dim": 128, "depth": 2, "num_heads": 4, "max_length": LENGTH}


def classifier_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Rows of 16..128 real tokens, right-padded to 128."""
    lengths = rng.integers(16, LENGTH + 1, BATCH)
    mask = (np.arange(LENGTH)[None, :] < lengths[:, None]).astype(np.int32)
    ids = (rng.integers(1, VOCAB, (BATCH, LENGTH)) * mask).astype(np.int32)
    return {"input_ids": ids, "attention_mask": mask, "label": rng.integers(0, 2, BATCH)}


def lm_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Packed rows: segments of 8..64 tokens, the tail of each row padding."""
    ids = rng.integers(1, VOCAB, (BATCH, LENGTH)).astype(np.int32)
    segments = np.zeros((BATCH, LENGTH), np.int32)
    positions = np.zeros((BATCH, LENGTH), np.int32)
    for row in range(BATCH):
        at, segment = 0, 1
        while True:
            size = int(rng.integers(8, 65))
            if at + size > LENGTH - 4:
                break
            segments[row, at : at + size] = segment
            positions[row, at : at + size] = np.arange(size)
            at, segment = at + size, segment + 1
    ids[segments == 0] = 0
    return {"input_ids": ids, "segment_ids": segments, "positions": positions}


def _stepper(step: Callable, state: Any, batch: dict[str, jax.Array]) -> Callable[[int], None]:
    holder = {"state": state}

    def run(n: int) -> None:
        for _ in range(n):
            holder["state"], loss = step(holder["state"], batch)
        jax.block_until_ready(loss)

    return run


def hand_classifier(batch: dict[str, jax.Array], tx: optax.GradientTransformation) -> Callable:
    model = TransformerClassifier(VOCAB, 2, **SIZE, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    key = jax.random.key(0)

    def train_step(state, batch):
        model, optimizer = nnx.merge(graphdef, state)
        model.train()

        def loss_fn(model):
            rngs = nnx.Rngs(dropout=key)
            logits = model(batch["input_ids"], batch["attention_mask"], rngs=rngs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return _stepper(jax.jit(train_step, donate_argnums=(0,)), state, batch)


def hand_lm(batch: dict[str, jax.Array], tx: optax.GradientTransformation) -> Callable:
    model = TransformerLM(VOCAB, **SIZE, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    def train_step(state, batch):
        model, optimizer = nnx.merge(graphdef, state)
        model.train()

        def loss_fn(model):
            logits = model(batch["input_ids"], segment_ids=batch["segment_ids"],
                           positions=batch["positions"])  # fmt: skip
            seg = batch["segment_ids"]
            target = batch["input_ids"][:, 1:]
            valid = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
            losses = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], target)
            return jnp.sum(jnp.where(valid, losses, 0.0)) / jnp.maximum(valid.sum(), 1)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return _stepper(jax.jit(train_step, donate_argnums=(0,)), state, batch)


def cases(tx: optax.GradientTransformation) -> dict[str, dict[str, Callable[[int], None]]]:
    """``{model: {implementation: run(steps)}}`` for the classifier and the LM."""
    rng = np.random.default_rng(0)
    cls_np, lm_np = classifier_batch(rng), lm_batch(rng)
    cls_batch = {k: jax.device_put(v) for k, v in cls_np.items()}
    lm_arrays = {k: jax.device_put(v) for k, v in lm_np.items()}
    classifier = Trainer(TransformerClassifier(VOCAB, 2, **SIZE, rngs=nnx.Rngs(0)), tx,
                         inputs=("input_ids", "attention_mask"), verbose=0)  # fmt: skip
    lm = Trainer(TransformerLM(VOCAB, **SIZE, rngs=nnx.Rngs(0)), tx, loss="next_token",
                 inputs={c: c for c in ("input_ids", "segment_ids", "positions")}, verbose=0)  # fmt: skip
    tokens_real = int((lm_np["segment_ids"] > 0).sum())
    return {
        f"TransformerClassifier, {BATCH}x{LENGTH} padded": {
            "jaxfeed Trainer step": trainer_case(classifier, cls_batch),
            "hand-written jax.jit step": hand_classifier(cls_batch, tx),
        },
        f"TransformerLM next_token, {BATCH}x{LENGTH} packed ({tokens_real} tokens)": {
            "jaxfeed Trainer step": trainer_case(lm, lm_arrays),
            "hand-written jax.jit step": hand_lm(lm_arrays, tx),
        },
    }


def ms_per_step(group: dict[str, Callable[[int], None]], steps: int,
                repeats: int) -> dict[str, tuple[float, float]]:  # fmt: skip
    """Median ``(wall ms, CPU ms)`` per step of each case, the cases taking turns in every
    repeat. The process's CPU time (all its threads) is the steadier figure on a machine other
    work keeps busy: both steps do their work on the same threads."""
    for run_steps in group.values():
        run_steps(2)  # compile and warm up
    wall: dict[str, list[float]] = {name: [] for name in group}
    cpu: dict[str, list[float]] = {name: [] for name in group}
    for _ in range(repeats):
        for name, run_steps in group.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run_steps(steps)
            wall[name].append((time.perf_counter() - start) / steps * 1e3)
            cpu[name].append((time.process_time() - start_cpu) / steps * 1e3)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n])) for n in group}


def run(steps: int, repeats: int) -> list[dict[str, Any]]:
    """Measure and print the table; returns its rows (``ratio``: Trainer / this, by wall time
    and by CPU time)."""
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    size = f"dim {SIZE['dim']}, depth {SIZE['depth']}, vocab {VOCAB}"
    print(f"\nTransformer train steps ({size}, AdamW)")
    print(f"{'model':<56}{'implementation':<27}{'ms/step':>9}{'CPU ms':>9}  Trainer / this")
    rows = []
    for model, group in cases(tx).items():
        times = ms_per_step(group, steps, repeats)
        ours, ours_cpu = times["jaxfeed Trainer step"]
        for name, (ms, cpu_ms) in times.items():
            ratio, cpu_ratio = ours / ms, ours_cpu / cpu_ms
            rows.append({"model": model, "name": name, "ms_per_step": ms, "cpu_ms_per_step": cpu_ms,
                         "ratio": ratio, "cpu_ratio": cpu_ratio})  # fmt: skip
            print(
                f"{model:<56}{name:<27}{ms:>9.1f}{cpu_ms:>9.1f}  {ratio:.3f}x ({cpu_ratio:.3f}x CPU)"
            )
    return rows
