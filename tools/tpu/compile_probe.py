"""Compile seconds and HBM temporaries of BERT-base's hand-written train step (32x128, bfloat16
compute, float32 parameters, AdamW, XLA attention) scanned, with remat and without dropout: the
probe behind the compile figures of the accelerator benchmarks page. Run on the TPU machine after
tools/tpu/setup.sh, from the project root: PYTHONPATH=src python3 tools/tpu/compile_probe.py
"""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed.bench import accelerator as bench
from jaxfeed.models.hub import bert

BATCH, LENGTH = 32, 128
CASES = [(12, True, False, True), (12, True, True, True), (12, True, False, False),
         (4, True, False, True)]  # (layers, scan, remat, dropout)  # fmt: skip


def probe(layers: int, scan: bool, remat: bool, dropout: bool) -> str:
    config = dict(bench.BERT_BASE, num_hidden_layers=layers)
    model = bert.build(config, task="sequence-classification", num_labels=2, dtype=jnp.bfloat16,
                       param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    model.encoder.scan, model.encoder.remat = scan, remat
    rng = np.random.default_rng(0)
    batch = {"input_ids": jnp.asarray(rng.integers(1, 30522, (BATCH, LENGTH)), jnp.int32),
             "attention_mask": jnp.ones((BATCH, LENGTH), jnp.int32),
             "label": jnp.zeros((BATCH,), jnp.int32)}  # fmt: skip

    def loss_of(m, b):
        rngs = nnx.Rngs(dropout=jax.random.key(0, impl="rbg")) if dropout else None
        if not dropout:
            m.eval()
        logits = m(b["input_ids"], b["attention_mask"], rngs=rngs)
        return bench.cross_entropy(logits, b["label"])

    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adamw(1e-4), wrt=nnx.Param)))
    start = time.perf_counter()
    compiled = bench.hand_step(graphdef, loss_of).lower(state, batch).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes / 1e9
    return (f"layers={layers} scan={scan} remat={remat} dropout={dropout}: compile "
            f"{time.perf_counter() - start:.1f} s, temporaries {temp:.2f} GB")  # fmt: skip


if __name__ == "__main__":
    os.environ["JAXFEED_ATTENTION"] = "xla"
    for case in CASES:
        print(probe(*case), flush=True)
