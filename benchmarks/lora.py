"""LoRA fine-tuning: a LoRA step against a full fine-tuning step of the same model in the same run
(CPU), the optimizer state of each, int8 logits against float32, and on an accelerator the
Llama-shape 7B (LoRA rank 16 over int8 weights) and 1B (LoRA, bfloat16) steps with tokens/s,
peak device memory and MFU.

``python benchmarks/lora.py [--case cpu|1b|7b] [--steps 5] [--batch B] [--seq T] [--out r.json]``

* ``cpu`` (default): a Llama-shape model (4 layers, width 512, MLP 1376, 8 heads, 8000-token
  vocabulary, untied: 20.8M parameters), batch 4 x 256 tokens, AdamW: ``Trainer(trainable="all")``
  against ``Trainer(trainable="lora")`` with ``LoRA(rank=16)`` on ``q_proj,v_proj``, alternating
  rounds; then the largest logit difference of ``quantize="int8"`` against float32 weights.
* ``1b``: Llama-shape 1.1B (TinyLlama: 22 layers, width 2048, MLP 5632, 32 heads / 4 key-value
  heads, 32000 tokens), LoRA rank 16 on ``q_proj,v_proj``, weights and compute in bfloat16,
  ``remat=True``, batch 8 x 1024.
* ``7b``: Llama-shape 7B (32 layers, width 4096, MLP 11008, 32 heads, 32000 tokens), LoRA rank
  16 on ``q_proj,v_proj`` over int8 weights (``quantize="int8"``), bfloat16 compute,
  ``remat=True``, batch 1 x 1024.

The weights are random and made on the device, never written to disk (a 7B checkpoint is 13.5 GB
in bfloat16, 27 GB in float32): the model is built abstractly, as ``from_pretrained`` builds it,
each variable is drawn on the device in bfloat16, and each transformer-block linear layer is
quantized to int8 right after its weight is drawn (``LoRALinear(quantize="int8")``), so at most
one layer's bfloat16 weight exists besides the int8 ones. MFU counts ``6 x parameters x tokens``
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
SHAPES = {"cpu": (4, 256), "1b": (8, 1024), "7b": (1, 1024)}


def config_of(case: str) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "hidden_act": "silu", "tie_word_embeddings": False, **CASES[case]}  # fmt: skip


def random_model(case: str, *, dtype: Any, lora: Any = None, quantize: str | None = None) -> Any:
    """A random Llama-shape model of ``case`` made on the device (see the module docstring),
    with adapters (and int8 block weights) when ``lora`` is given."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jaxfeed.models.hub import adapters
    from jaxfeed.models.hub.family import HubConfig
    from jaxfeed.models.hub.registry import family_of
    from jaxfeed.models.hub.weights import variables
    from jaxfeed.models.lora import LoRALinear

    config = config_of(case)
    family = family_of(config)
    model = nnx.eval_shape(lambda: family.build(config, task="causal-lm", dtype=dtype,
                                                param_dtype=dtype, rngs=nnx.Rngs(0)))  # fmt: skip
    model.hub_config, model.hub_task = HubConfig(config), "causal-lm"
    key = jax.random.key(0)

    def draw(var: Any, i: int) -> None:
        shape, kind = var.get_value().shape, var.get_value().dtype
        make = jax.jit(lambda k: (0.02 * jax.random.normal(k, shape, jnp.float32)).astype(kind))
        var.set_value(
            jnp.ones(shape, kind) if len(shape) == 1 else make(jax.random.fold_in(key, i))
        )

    later = (
        set()
        if lora is None
        else {p + ".kernel" for p, _, _ in adapters.linear_modules(model).values()}
    )  # drawn just before their layer is wrapped (and quantized)
    for i, (path, var) in enumerate(variables(model).items()):
        if path not in later and isinstance(var.get_value(), jax.ShapeDtypeStruct):
            draw(var, i)
    if lora is None:
        return model
    for i, (name, (path, fan, _)) in enumerate(adapters.linear_modules(model).items()):
        parent, attr, node = adapters._module(model, path)
        if isinstance(node.kernel.get_value(), jax.ShapeDtypeStruct):
            draw(node.kernel, 10_000 + i)
        wanted = adapters.matches(name, lora.targets)
        in_block = quantize if ".layers." in f".{path}." else None
        setattr(parent, attr, LoRALinear(node, lora if wanted else None, key=jax.random.fold_in(key, i),
                                         quantize=in_block, fan_in_fan_out=fan))  # fmt: skip
    model.hub_lora, model.trainable_with_lora = lora, ()
    return model


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


def device(case: str, steps: int, batch: tuple[int, int], peak_tflops: float) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from jaxfeed.models import LoRA

    lora = LoRA(rank=16, alpha=32, targets=("q_proj", "v_proj"))
    model = random_model(case, dtype=jnp.bfloat16, lora=lora,
                         quantize="int8" if case == "7b" else None)  # fmt: skip
    n = parameters(model)
    trainer, step = step_case(model, "lora", batch, "bfloat16", True)
    step(2)
    start = time.perf_counter()
    step(steps)
    seconds = (time.perf_counter() - start) / steps
    tokens = batch[0] * batch[1]
    stats = jax.devices()[0].memory_stats() or {}
    return {"parameters": n, "tokens_per_s": tokens / seconds, "ms_per_step": seconds * 1e3,
            "peak_hbm_gib": stats.get("peak_bytes_in_use", 0) / 2**30,
            "mfu": 6 * n * tokens / seconds / (peak_tflops * 1e12),
            "optimizer_state_bytes": optimizer_bytes(trainer), "batch": list(batch)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), default="cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--peak-tflops", type=float, default=197.0)
    parser.add_argument("--out")
    args = parser.parse_args()
    import jax

    rows, seq = SHAPES[args.case]
    shape = (args.batch or rows, args.seq or seq)
    if args.case == "cpu":
        result = cpu(args.steps, args.rounds)
    else:
        result = device(args.case, args.steps, shape, args.peak_tflops)
    result = {"case": args.case, "device": str(jax.devices()[0].device_kind), **result}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
