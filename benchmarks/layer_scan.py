"""A layer stack scanned against unrolled, on this machine: the train step of a BERT-base-shaped
encoder (width 768, 12 heads, MLP 3072, dropout 0.1, AdamW, float32) with its layers as one
``lax.scan`` over the stored stacks, as a Python loop over them (unrolled), and, for the record,
held as a list of layers and scanned (the layout before the stacks were stored stacked: the
weights stacked inside each step). The cases take turns in each round; medians of ms per step.

``python benchmarks/layer_scan.py [--layers 6] [--batch 4] [--length 128] [--rounds 5]
[--steps 2] [--out r.json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def step_of(layout: str, args: Any) -> Any:
    """A jitted train step (state donated) of the encoder laid out as ``layout``: ``scan``,
    ``unrolled`` or ``list`` (scanned, stacked inside the step), and its state."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from jaxfeed.models.hub import bert
    from jaxfeed.models.stacked import unstack
    from jaxfeed.runtime.prng import dropout_impl

    config = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": args.layers,
              "num_attention_heads": 12, "intermediate_size": 3072,
              "max_position_embeddings": 512}  # fmt: skip
    model = bert.build(config, task="sequence-classification", num_labels=2, dtype=None,
                       param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    model.encoder.scan = layout != "unrolled"
    if layout == "list":
        model.encoder.layers = unstack(model.encoder.layers)
    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adamw(1e-4), wrt=nnx.Param)))
    ids = jnp.ones((args.batch, args.length), jnp.int32)
    labels = jnp.zeros((args.batch,), jnp.int32)
    key = jax.random.key(0, impl=dropout_impl())

    def step(state: Any, i: jax.Array) -> tuple[Any, jax.Array]:
        model, optimizer = nnx.merge(graphdef, state)

        def loss(m: Any) -> jax.Array:
            logits = m(ids, ids, rngs=nnx.Rngs(dropout=jax.random.fold_in(key, i)))
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), value

    return jax.jit(step, donate_argnums=0), state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    import jax

    cases, compile_s = {}, {}
    for layout in ("scan", "unrolled", "list"):
        step, state = step_of(layout, args)
        start = time.perf_counter()
        state, value = step(state, 0)
        jax.block_until_ready(value)
        compile_s[layout] = time.perf_counter() - start
        cases[layout] = [step, state]
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for layout, case in cases.items():
            start = time.perf_counter()
            for i in range(args.steps):
                case[1], value = case[0](case[1], i + 1)
            jax.block_until_ready(value)
            times[layout].append((time.perf_counter() - start) / args.steps * 1e3)
    ms = {k: statistics.median(v) for k, v in times.items()}
    result = {"backend": jax.default_backend(), "layers": args.layers,
              "batch": f"{args.batch}x{args.length}", "ms_per_step": ms,
              "first_step_s": compile_s, "scan_over_unrolled": ms["scan"] / ms["unrolled"],
              "list_over_unrolled": ms["list"] / ms["unrolled"]}  # fmt: skip
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
