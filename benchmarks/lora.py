"""LoRA fine-tuning: a LoRA step against a full fine-tuning step of the same model in the same run
(CPU), the optimizer state of each, int8 logits against float32, and on an accelerator the
Llama-shape 7B (LoRA rank 16 over int8 weights) and 1B (LoRA, bfloat16) steps with tokens/s,
peak device memory and MFU.

``python benchmarks/lora.py [--case cpu|load|1b|7b] [--steps 5] [--batch B] [--seq T] [--out r.json]``

* ``cpu`` (default): a Llama-shape model (4 layers, width 512, MLP 1376, 8 heads, 8000-token
  vocabulary, untied: 20.8M parameters), batch 4 x 256 tokens, AdamW: ``Trainer(trainable="all")``
  against ``Trainer(trainable="lora")`` with ``LoRA(rank=16)`` on ``q_proj,v_proj``, alternating
  rounds; then the largest logit difference of ``quantize="int8"`` against float32 weights.
* ``load``: the ``cpu`` case's model written as a checkpoint (float32, 83 MB, numpy through the
  family's rules) and loaded by ``from_pretrained`` in fresh processes, ``--rounds`` times each:
  plain, with ``LoRA(rank=16)``, and with ``LoRA(rank=16)`` over int8 (``quantize="int8"``):
  median seconds of the call (JAX imported before), the process's peak RSS (MiB) and the
  model's state bytes, and int8's ratios to the plain and LoRA loads.
* ``1b``: Llama-shape 1.1B (TinyLlama: 22 layers, width 2048, MLP 5632, 32 heads / 4 key-value
  heads, 32000 tokens), LoRA rank 16 on ``q_proj,v_proj``, weights and compute in bfloat16,
  ``remat=True``, batch 8 x 1024.
* ``7b``: Llama-shape 7B (32 layers, width 4096, MLP 11008, 32 heads, 32000 tokens), LoRA rank
  16 on ``q_proj,v_proj`` over int8 weights (``quantize="int8"``), bfloat16 compute,
  ``remat=True``, batch 1 x 2048.

``--memory`` (1b, 7b) compiles the Trainer's step on shapes alone, nothing allocated, and prints
XLA's memory analysis (weights and optimizer state, temporaries) and the compile seconds: on a
CPU a proxy of what the chip will need; ``--remat full|dots|none`` sets the recomputation.

The weights are random and made on the device, never written to disk (a 7B checkpoint is 13.5 GB
in bfloat16, 27 GB in float32): the model is built abstractly, as ``from_pretrained`` builds it,
each variable is drawn on the device in bfloat16 (a layer stack one layer at a time), and each
stacked linear layer of the transformer blocks is quantized to int8 right after its weight is
drawn (``add_lora(quantize="int8", fill=...)``, one layer at a time), so at most one stacked
module's bfloat16 weight (2.9 GB for the 7B's MLP) exists besides the int8 ones. MFU counts ``6 x parameters x tokens``
(the forward and backward of the whole model, as for full fine-tuning) against the chip's peak
(``--peak-tflops``, default 197: TPU v5e bfloat16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

CASES = {
    "cpu": {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 8, "intermediate_size": 1376, "vocab_size": 8000},
    "1b": {"hidden_size": 2048, "num_hidden_layers": 22, "num_attention_heads": 32,
           "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32000},
    "7b": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000},
}  # fmt: skip
SHAPES = {"cpu": (4, 256), "1b": (8, 1024), "7b": (1, 2048)}


def config_of(case: str) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "hidden_act": "silu", "tie_word_embeddings": False, **CASES[case]}  # fmt: skip


def _draw(path: str, var: Any, key: Any) -> None:
    """A random value for the variable at ``path`` made on the device: ones for norm scales,
    zeros for biases, else normal(0.02); a layer stack's drawn one layer at a time (no float32
    copy of a whole stack)."""
    import jax
    import jax.numpy as jnp

    shape, kind = var.get_value().shape, var.get_value().dtype
    leaf = path.rsplit(".", 1)[-1]
    if leaf in ("scale", "bias") or leaf.endswith(("_scale", "_bias")):
        fill = jnp.ones if leaf.endswith("scale") else jnp.zeros
        var.set_value(jax.jit(lambda: fill(shape, kind))())
        return

    def one(k: Any) -> Any:
        return (0.02 * jax.random.normal(k, shape[-2:], jnp.float32)).astype(kind)

    if len(shape) == 3:  # [layers, in, out]
        var.set_value(jax.jit(lambda k: jax.lax.map(one, jax.random.split(k, shape[0])))(key))
    else:
        var.set_value(jax.jit(one)(key))


def random_model(case: str, *, dtype: Any, lora: Any = None, quantize: str | None = None,
                 abstract: bool = False) -> Any:  # fmt: skip
    """A random Llama-shape model of ``case`` made on the device (see the module docstring),
    with adapters (and int8 block weights) when ``lora`` is given; ``abstract``: shapes only,
    nothing allocated (for the compiled memory analysis)."""
    import jax
    from flax import nnx

    from jaxfeed.models.hub import adapters
    from jaxfeed.models.hub.family import HubConfig
    from jaxfeed.models.hub.registry import family_of
    from jaxfeed.models.hub.weights import variables
    from jaxfeed.models.stacked import locate

    config = config_of(case)
    family = family_of(config)

    def build() -> Any:
        model = family.build(config, task="causal-lm", dtype=dtype, param_dtype=dtype,
                             rngs=nnx.Rngs(0))  # fmt: skip
        model.hub_config, model.hub_task = HubConfig(config), "causal-lm"
        return model

    if abstract:

        def adapted() -> Any:
            model = build()
            if lora is not None:
                adapters.add_lora(model, lora, quantize=quantize)
            return model

        return nnx.eval_shape(adapted)
    model = nnx.eval_shape(build)
    kernels = {locate(model, m[0] + ".kernel")[0] for m in adapters.linear_modules(model).values()}
    for path, var in variables(model).items():
        if path not in kernels:
            _draw(path, var, _key(path))
    if lora is not None:

        def fill(path: str) -> None:  # each adapted (and quantized) layer's kernel, just before
            where, var, _ = locate(model, path + ".kernel")
            _draw(where, var, _key(where))

        adapters.add_lora(model, lora, quantize=quantize, fill=fill)
    for path, var in variables(model).items():  # the kernels of the layers left plain
        if isinstance(var.get_value(), jax.ShapeDtypeStruct):
            _draw(path, var, _key(path))
    return model


def _key(path: str) -> Any:
    """The random key of a variable: the same path, the same values, whatever else is drawn."""
    import zlib

    import jax

    return jax.random.fold_in(jax.random.key(0), zlib.crc32(path.encode()) & 0x7FFFFFFF)


def step_case(model: Any, trainable: str, batch: tuple[int, int], dtype: str, remat: bool) -> Any:
    import numpy as np
    import optax

    from jaxfeed import Trainer
    from jaxfeed.bench._steps import trainer_case

    rows, seq = batch
    ids = np.random.default_rng(0).integers(3, model.vocab_size, (rows, seq)).astype(np.int32)
    trainer = Trainer(model, optax.adamw(1e-4), loss="next_token", inputs={"input_ids": "input_ids"},
                      verbose=0, trainable=trainable, precision=dtype, remat=remat)  # fmt: skip
    return trainer, trainer_case(trainer, {"input_ids": ids})


def optimizer_bytes(trainer: Any) -> int:
    import jax
    from flax import nnx

    state = nnx.state(trainer.core.optimizer, nnx.OptState)
    return int(sum(x.nbytes for x in jax.tree.leaves(state) if hasattr(x, "nbytes")))


def parameters(model: Any) -> int:
    from jaxfeed.models.hub.weights import variables

    return sum(
        int(v.get_value().size) for p, v in variables(model).items()
        if not p.endswith(("lora_a", "lora_b", "kernel_scale")) and "rngs" not in p
    )  # fmt: skip


def cpu(steps: int, rounds: int) -> dict[str, Any]:
    import jax.numpy as jnp
    import numpy as np

    from jaxfeed.models import LoRA

    lora = LoRA(rank=16, alpha=32, targets=("q_proj", "v_proj"))
    cases = {"full": (random_model("cpu", dtype=None), "all"),
             "lora": (random_model("cpu", dtype=None, lora=lora), "lora")}  # fmt: skip
    runs, times = {}, {name: [] for name in cases}
    for name, (model, trainable) in cases.items():
        runs[name] = step_case(model, trainable, SHAPES["cpu"], "float32", False)
        runs[name][1](2)  # compile, warm up
    for _ in range(rounds):
        for name, (_, step) in runs.items():
            start = time.perf_counter()
            step(steps)
            times[name].append((time.perf_counter() - start) / steps * 1e3)
    out = {name: {"ms_per_step": statistics.median(times[name]),
                  "optimizer_state_bytes": optimizer_bytes(runs[name][0])} for name in cases}  # fmt: skip
    out["parameters"] = parameters(cases["full"][0])
    ids = jnp.asarray(np.random.default_rng(1).integers(3, 8000, (2, 64)))
    full = random_model("cpu", dtype=None, lora=lora)
    int8 = random_model("cpu", dtype=None, lora=lora, quantize="int8")
    a, b = np.asarray(full(input_ids=ids)), np.asarray(int8(input_ids=ids))
    out["int8_max_abs_logit_diff"] = float(np.abs(a - b).max())
    out["int8_relative_to_max_logit"] = float(np.abs(a - b).max() / np.abs(a).max())
    return out


def _write_checkpoint(folder: Any) -> None:
    """The ``cpu`` case's model as a float32 checkpoint in ``folder``, drawn by numpy through the
    family's rules (no JAX computation)."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from jaxfeed.models.hub.files import write_safetensors
    from jaxfeed.models.hub.registry import family_of
    from jaxfeed.models.stacked import locate

    config = config_of("cpu")
    family = family_of(config)
    model = nnx.eval_shape(lambda: family.build(config, task="causal-lm", num_labels=None,
                                                dtype=None, param_dtype=jnp.float32,
                                                rngs=nnx.Rngs(0)))  # fmt: skip
    rng, tensors = np.random.default_rng(0), {}
    for rule in family.rules(config, "causal-lm"):
        _, var, index = locate(model, rule.path)  # a stacked layer's slice of its stack
        shape = var.shape if index is None else var.shape[1:]
        value = rng.normal(1.0 if len(shape) == 1 else 0.0, 0.02, shape).astype(np.float32)
        tensors[rule.hf] = np.ascontiguousarray(rule.transform.to_hf(value))
    write_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))


def load_child(folder: str, mode: str) -> None:
    """One load of ``folder`` (``plain``, ``lora`` or ``int8``) in this fresh process: prints its
    seconds, the process's peak RSS and the model's state bytes as JSON."""
    import resource

    import jax
    from flax import nnx

    from jaxfeed.models import LoRA, from_pretrained

    lora = None if mode == "plain" else LoRA(rank=16)
    start = time.perf_counter()
    model = from_pretrained(folder, task="causal-lm", lora=lora,
                            quantize="int8" if mode == "int8" else None)  # fmt: skip
    leaves = jax.block_until_ready(jax.tree.leaves(nnx.state(model)))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"load_s": seconds, "peak_rss_mib": peak,
                      "state_bytes": sum(int(x.nbytes) for x in leaves)}))  # fmt: skip


def load(rounds: int) -> dict[str, Any]:
    """The ``load`` case (see the module docstring)."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        _write_checkpoint(Path(tmp))
        runs: dict[str, list[dict]] = {"plain": [], "lora": [], "int8": []}
        for _ in range(rounds):  # alternating, each in a fresh process
            for mode, rows in runs.items():
                out = subprocess.run([sys.executable, __file__, "--load-child", tmp, mode],
                                     capture_output=True, text=True, check=True).stdout  # fmt: skip
                rows.append(json.loads(out.strip().splitlines()[-1]))
    result: dict[str, Any] = {
        mode: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for mode, rows in runs.items()
    }
    for base in ("plain", "lora"):
        result[f"int8_over_{base}"] = {
            key: result["int8"][key] / result[base][key] for key in result[base]
        }
    result["rounds"] = rounds
    return result


def device(case: str, steps: int, batch: tuple[int, int], peak_tflops: float,
           remat: Any = True) -> dict[str, Any]:  # fmt: skip
    import jax
    import jax.numpy as jnp

    from jaxfeed.models import LoRA

    lora = LoRA(rank=16, alpha=32, targets=("q_proj", "v_proj"))
    model = random_model(case, dtype=jnp.bfloat16, lora=lora,
                         quantize="int8" if case == "7b" else None)  # fmt: skip
    n = parameters(model)
    trainer, step = step_case(model, "lora", batch, "bfloat16", remat)
    start = time.perf_counter()
    step(1)  # compiles
    first = time.perf_counter() - start
    step(1)
    start = time.perf_counter()
    step(steps)
    seconds = (time.perf_counter() - start) / steps
    tokens = batch[0] * batch[1]
    stats = jax.devices()[0].memory_stats() or {}
    return {"parameters": n, "tokens_per_s": tokens / seconds, "ms_per_step": seconds * 1e3,
            "compile_s": first - seconds, "peak_hbm_gib": stats.get("peak_bytes_in_use", 0) / 2**30,
            "mfu": 6 * n * tokens / seconds / (peak_tflops * 1e12), "remat": str(remat),
            "optimizer_state_bytes": optimizer_bytes(trainer), "batch": list(batch)}  # fmt: skip


def memory(case: str, batch: tuple[int, int], remat: Any = True) -> dict[str, Any]:
    """The Trainer's LoRA step of ``case`` compiled for this backend on shapes alone (nothing
    allocated): compile seconds and XLA's memory analysis (the arguments, i.e. the weights and
    optimizer state, and the temporaries), in GiB."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from jaxfeed import Trainer
    from jaxfeed.models import LoRA
    from jaxfeed.train.cores import empty_sums

    lora = LoRA(rank=16, alpha=32, targets=("q_proj", "v_proj"))
    model = random_model(case, dtype=jnp.bfloat16, lora=lora, abstract=True,
                         quantize="int8" if case == "7b" else None)  # fmt: skip
    trainer = Trainer(model, optax.adamw(1e-4), loss="next_token", inputs={"input_ids": "input_ids"},
                      verbose=0, trainable="lora", precision="bfloat16", remat=remat)  # fmt: skip
    ids = jax.ShapeDtypeStruct(batch, jnp.int32)
    start = time.perf_counter()
    compiled = trainer.core.train_step.lower(trainer.core.state, empty_sums(trainer.metrics),
                                             {"input_ids": ids}, np.int32(batch[0]),
                                             np.int32(0)).compile()  # fmt: skip
    seconds = time.perf_counter() - start
    analysis = compiled.memory_analysis()
    gib = 2.0**30
    args = analysis.argument_size_in_bytes / gib
    temp = analysis.temp_size_in_bytes / gib
    return {"compile_s": seconds, "arguments_gib": args, "temporaries_gib": temp,
            "total_gib": args + temp, "remat": str(remat), "batch": list(batch),
            "backend": jax.default_backend()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted([*CASES, "load"]), default="cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--peak-tflops", type=float, default=197.0)
    parser.add_argument("--remat", choices=("full", "dots", "none"), default="full",
                        help="the 1b/7b cases' gradient checkpointing")  # fmt: skip
    parser.add_argument("--memory", action="store_true",
                        help="1b/7b: compile on shapes alone and print XLA's memory analysis "
                        "(no weights made; runs on a CPU as a proxy)")  # fmt: skip
    parser.add_argument("--out")
    parser.add_argument("--load-child", nargs=2, metavar=("FOLDER", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_child:
        load_child(*args.load_child)
        return
    import jax

    rows, seq = SHAPES.get(args.case, SHAPES["cpu"])
    shape = (args.batch or rows, args.seq or seq)
    remat = {"full": True, "none": False}.get(args.remat, args.remat)
    if args.case == "cpu":
        result = cpu(args.steps, args.rounds)
    elif args.case == "load":
        result = load(args.rounds)
    elif args.memory:
        result = memory(args.case, shape, remat)
    else:
        result = device(args.case, args.steps, shape, args.peak_tflops, remat)
    result = {"case": args.case, "device": str(jax.devices()[0].device_kind), **result}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
