"""Where a BERT-base fine-tuning step spends its time on CPU, jaxfeed's NNX model against
``transformers`` PyTorch eager, part by part, in one process, the cases taking turns.

``python benchmarks/finetune_breakdown.py [--batch 8] [--seq 128] [--steps 2] [--repeats 3]
[--small] [--threads N] [--out results.json]``

Parts, each timed as its own compiled program (jaxfeed) or eager loop (PyTorch) on the same
random BERT-base-size weights (``BertConfig()``, 110M parameters, float32) and batch:

* ``forward``: the loss alone (dropout on, as in training);
* ``forward+backward``: the loss and its gradients;
* ``step``: gradients and the AdamW update, the whole fine-tuning step;
* ``adamw``: the AdamW update alone, on gradients already computed;
* for jaxfeed also ``step, no dropout`` (dropout rates 0), ``step, layers unrolled``
  (``encoder.scan = False``: the layers one after another instead of a ``lax.scan``), and the
  step with dropout keys of JAX's ``rbg`` and default ``threefry`` implementations instead of
  the Trainer's counter hash (:mod:`jaxfeed.runtime.prng`).

The parts run in a first group beside PyTorch's, the variants in a second group with the step
again (``step (group 2)``, their reference). Medians of ``--repeats`` groups of ``--steps`` calls after a warm-up; the JAX and PyTorch parts
alternate within each repeat, so a noisy period hits both. The ratio column is PyTorch's time
over jaxfeed's (above 1: jaxfeed is faster). ``--small`` runs a 2-layer width-64 model (a check
of the script).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed.bench._steps import ms_per_step
from jaxfeed.models.hub import bert
from jaxfeed.runtime.prng import dropout_impl

BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512}  # fmt: skip
SMALL = {**BASE, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 128}  # fmt: skip


def make_batch(vocab: int, b: int, t: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(1, vocab, (b, t)).astype(np.int32),
            "attention_mask": np.ones((b, t), np.int32),
            "label": rng.integers(0, 2, b).astype(np.int32)}  # fmt: skip


def jax_parts(config: dict, data: dict, group: str) -> dict[str, Callable[[int], None]]:
    """jaxfeed's parts as ``run(n)`` callables (each its own compiled program): ``group``
    ``"parts"`` (forward, forward+backward, step, adamw on one model's state) or ``"variants"``
    (the step and its variants, one model each); two groups, so that one process holds at most
    five BERT-base states with their AdamW moments."""
    batch = {k: jnp.asarray(v) for k, v in data.items()}

    def build(scan: bool = True, dropout: bool = True) -> nnx.Module:
        cfg = dict(config)
        if not dropout:
            cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = bert.build(cfg, task="sequence-classification", num_labels=2,
                           dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
        model.encoder.scan = scan
        return model

    def loss_fn(model: nnx.Module, key: jax.Array) -> jax.Array:
        logits = model(batch["input_ids"], batch["attention_mask"], rngs=nnx.Rngs(dropout=key))
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

    def cases_of(model: nnx.Module, impl: Any, parts: tuple[str, ...]) -> dict[str, Callable]:
        graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adamw(2e-5), wrt=nnx.Param)))

        @partial(jax.jit, static_argnums=0)
        def call(what: str, state: nnx.State, key: jax.Array, g: Any = None) -> Any:
            m, opt = nnx.merge(graphdef, state)
            if what == "forward":
                return loss_fn(m, key)
            if what == "forward+backward":
                return nnx.grad(loss_fn)(m, key)
            opt.update(m, g if what == "adamw" else nnx.grad(loss_fn)(m, key))
            return nnx.state((m, opt))

        holder = {"state": state, "i": 0}
        fixed = call("forward+backward", state, jax.random.key(0, impl=impl))

        def case(what: str) -> Callable[[int], None]:
            def run(n: int) -> None:
                out = None
                for _ in range(n):
                    key = jax.random.fold_in(jax.random.key(0, impl=impl), holder["i"])
                    holder["i"] += 1
                    out = call(what, holder["state"], key, fixed if what == "adamw" else None)
                    if what in ("step", "adamw"):
                        holder["state"] = out
                jax.block_until_ready(out)

            return run

        return {what: case(what) for what in parts}

    impl = dropout_impl()  # the Trainer's: the counter hash on a CPU
    if group == "parts":
        parts = cases_of(build(), impl, ("forward", "forward+backward", "step", "adamw"))
        return {f"jaxfeed {what}": run for what, run in parts.items()}
    return {
        "jaxfeed step": cases_of(build(), impl, ("step",))["step"],
        "jaxfeed step, no dropout": cases_of(build(dropout=False), impl, ("step",))["step"],
        "jaxfeed step, layers unrolled": cases_of(build(scan=False), impl, ("step",))["step"],
        "jaxfeed step, rbg dropout": cases_of(build(), "rbg", ("step",))["step"],
        "jaxfeed step, threefry dropout": cases_of(build(), "threefry2x32", ("step",))["step"],
    }


def torch_parts(config: dict, data: dict) -> dict[str, Callable[[int], None]]:
    """PyTorch eager's parts (``transformers``' BERT, random weights, train mode)."""
    import torch  # optional: the baseline
    import transformers  # optional: the baseline

    torch.manual_seed(0)
    net = transformers.BertForSequenceClassification(transformers.BertConfig(**config))
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=2e-5)
    inputs = {"input_ids": torch.from_numpy(data["input_ids"]).long(),
              "attention_mask": torch.from_numpy(data["attention_mask"]).long(),
              "labels": torch.from_numpy(data["label"]).long()}  # fmt: skip

    def forward(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                net(**inputs).loss.item()

    def backward(n: int) -> None:
        for _ in range(n):
            net(**inputs).loss.backward()
            net.zero_grad(set_to_none=True)

    def step(n: int) -> None:
        for _ in range(n):
            net(**inputs).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    net(**inputs).loss.backward()  # gradients for the update-only part (the others drop theirs)
    saved = [(q, q.grad) for q in net.parameters()]
    net.zero_grad(set_to_none=True)

    def adamw(n: int) -> None:
        for q, g in saved:
            q.grad = g
        for _ in range(n):
            opt.step()
        opt.zero_grad(set_to_none=True)

    return {"PyTorch forward": forward, "PyTorch forward+backward": backward,
            "PyTorch step": step, "PyTorch adamw": adamw}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--small", action="store_true")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    config = SMALL if args.small else BASE
    data = make_batch(config["vocab_size"], args.batch, args.seq)
    parts = {**jax_parts(config, data, "parts"), **torch_parts(config, data)}
    ms = ms_per_step(parts, args.steps, args.repeats, warmup=1)  # a BERT-base step: seconds
    variants = ms_per_step(jax_parts(config, data, "variants"), args.steps, args.repeats, warmup=1)
    ms |= {
        f"{name} (group 2)" if name == "jaxfeed step" else name: v for name, v in variants.items()
    }
    load = os.getloadavg()
    print(f"BERT-base{' (small)' if args.small else ''} {args.batch}x{args.seq}, float32, CPU, "
          f"{os.cpu_count()} cores, load {load[0]:.1f}")  # fmt: skip
    print(f"{'part':<32}{'jaxfeed ms':>12}{'PyTorch ms':>12}{'ratio':>8}")
    for part in ("forward", "forward+backward", "step", "adamw"):
        j, t = ms[f"jaxfeed {part}"], ms[f"PyTorch {part}"]
        print(f"{part:<32}{j:>12.0f}{t:>12.0f}{t / j:>8.2f}")
    for name in ("step (group 2)", "step, no dropout", "step, layers unrolled", "step, rbg dropout",
                 "step, threefry dropout"):  # fmt: skip
        print(f"{name:<32}{ms[f'jaxfeed {name}']:>12.0f}")
    result = {"ms": ms, "batch": args.batch, "seq": args.seq, "load": load,
              "jax": jax.__version__, "cores": os.cpu_count()}  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
