"""Accelerator figures of jaxfeed's Hub models (random weights, no downloads): compile seconds,
step time, throughput and MFU; the DataLoader's share of the device's ceiling; decoding speed
against the HBM bound.

Cases (``--cases``, comma separated):

* ``vit``: ViT-B/16 image classification, bfloat16, batch ``--vit-batch`` (128);
* ``bert``: BERT-base sequence classification, bfloat16, ``--bert-shapes`` (32x512,32x128);
* ``llama``: a Llama-shaped ~1.1B decoder (hidden 2048, ``--llama-layers`` 22, MLP 5632, vocab
  32000) trained at ``--llama-length`` (2048) tokens, batch ``--llama-batch`` (1), with remat and
  bfloat16 parameters and AdamW state (what fits 16 GiB);
* ``generate``: that decoder's greedy decoding at batch 1 and 16: prefill and decode tokens/s,
  and the decode step against the HBM bound (the weights' bytes read once per step).

Modes of a training case (``--modes``): ``reference`` is a plain JAX step of the same shapes
written without jaxfeed (:mod:`jaxfeed.bench.accelerator_reference`: the same matmuls, attention,
norms, remat and optimizer, ``jax.random.bernoulli`` dropout), in the same process; every
``device`` and ``trainer`` row then gives ``vs_reference``, its step time as a ratio of it
("of reference": the reference's time over its own). ``device`` is a hand-written ``jax.jit``
step (split once, merged inside, state donated) on one batch already on the device: the ceiling. ``trainer``
is ``Trainer.fit`` over that batch repeated (its share of the ceiling is the Trainer's overhead).
For ``vit``, ``loader`` feeds the same hand-written step from jaxfeed's ``DataLoader`` over a
folder of JPEGs (process workers: decode, random-resized crop, flip, normalise), ``fit`` runs
``Trainer.fit`` over that loader (its ``data_wait`` is printed) and ``torch`` feeds the step from a
PyTorch ``DataLoader`` doing the same per row (skipped without torch).

Compile seconds are ``jit(...).lower(...).compile()`` (for ``trainer``: its first ``fit`` of one
step); step times are medians of ``--repeats`` groups of ``--steps`` steps after a warm-up, each
group waited for with ``block_until_ready`` (for ``trainer``: the difference of fits of ``2 *
steps`` and ``steps`` steps, per step; what one ``fit`` call adds is shown apart). FLOPs per step come from XLA's ``cost_analysis`` of
the compiled step (``flops: xla``), else from ``6 * parameters * tokens`` plus attention
(``flops: 6N``; also used when XLA's count is under half of it, as for a scanned layer stack,
whose loop body XLA counts once). MFU is FLOPs per second over the chip's bfloat16 peak
(:data:`CHIPS`); an unknown chip gets no MFU. ``--attention`` picks the attention kernel
(``auto``, ``xla``, ``flash``: :mod:`jaxfeed.models.attention`), ``--no-scan`` unrolls the layers,
``--no-dropout`` trains BERT without dropout; with it, BERT's attention dropout runs inside the
fused kernel where that applies (``--attention-dropout xla``: on XLA's path, as before the fused
dropout; ``--dropout-bits``: the fused dropout's random bits, the chip's generator or a hash).

Run: ``python benchmarks/accelerator.py [--quick] [--cases vit,bert] [--out FILE.json]`` or
``jaxfeed bench accelerator``. ``--quick`` runs tiny shapes, one generation batch and no ``fit``
mode (on a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxfeed.bench._common import save_json
from jaxfeed.runtime.prng import COUNTER_HASH, dropout_impl

# (what device_kind contains, lowercased; dense bfloat16 peak TFLOP/s; HBM GB/s), first match wins
CHIPS: tuple[tuple[str, float, float], ...] = (
    ("tpu v6 lite", 918, 1640), ("tpu v6e", 918, 1640), ("tpu v5 lite", 197, 819),
    ("tpu v5e", 197, 819), ("tpu v5p", 459, 2765), ("tpu v5", 459, 2765), ("tpu v4", 275, 1228),
    ("tpu v3", 123, 900), ("tpu v2", 46, 700), ("h200", 989, 4800), ("h100", 989, 3350),
    ("a100-sxm4-80gb", 312, 2039), ("a100 80gb", 312, 2039), ("a100", 312, 1555),
    ("l4", 121, 300), ("a10g", 125, 600),
)  # fmt: skip
VIT_B16 = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
           "intermediate_size": 3072, "image_size": 224, "patch_size": 16}  # fmt: skip
BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512}  # fmt: skip
LLAMA_1B = {"vocab_size": 32000, "hidden_size": 2048, "num_attention_heads": 32,
            "num_key_value_heads": 4, "intermediate_size": 5632, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5}  # fmt: skip
QUICK = {
    "vit": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 64, "image_size": 32, "patch_size": 8},
    "bert": {"vocab_size": 500, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
    "llama": {"vocab_size": 500, "hidden_size": 32, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 128},
}  # fmt: skip


@dataclass(frozen=True)
class Chip:
    """The device's kind, its dense bfloat16 peak (TFLOP/s) and HBM bandwidth (GB/s), None when
    the chip is not in :data:`CHIPS`.

    >>> Chip.of_kind("TPU v5 lite").peak_tflops, Chip.of_kind("cpu").peak_tflops
    (197, None)
    """

    kind: str
    peak_tflops: float | None
    hbm_gbs: float | None

    @classmethod
    def of_kind(cls, kind: str) -> Chip:
        low = kind.lower()
        for pattern, peak, hbm in CHIPS:
            if pattern in low:
                return cls(kind, peak, hbm)
        return cls(kind, None, None)


# ---------------------------------------------------------------------------------- timing
def compiled_flops(compiled: Any) -> float | None:
    """FLOPs of a compiled program from XLA's cost analysis (None where it has none)."""
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return None
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    flops = (cost or {}).get("flops")
    return float(flops) if flops and flops > 0 else None


def median_step(run: Callable[[], Any], steps: int, repeats: int) -> float:
    """Median seconds per call of ``run`` over ``repeats`` groups of ``steps`` calls (one group
    of warm-up first); ``run`` returns what to wait for."""
    jax.block_until_ready(run())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            out = run()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def param_count(model: Any) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def param_bytes(model: Any) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def formula_flops(params: int, tokens: int, layers: int, length: int, hidden: int) -> float:
    """Training FLOPs per step: ``6 * params * tokens`` plus attention's ``12 * layers * length *
    hidden`` per token (forward and backward, no recomputation counted)."""
    return 6.0 * params * tokens + 12.0 * layers * length * hidden * tokens


def row(case: str, mode: str, *, chip: Chip, compile_s: float | None, step_s: float,
        items: int, unit: str, flops: tuple[float | None, float], **extra: Any) -> dict:  # fmt: skip
    """One result: throughput, and MFU from XLA's FLOPs (``flops[0]``) unless they are missing
    or under half the formula's (``flops[1]``)."""
    measured, formula = flops
    use_xla = measured is not None and measured >= 0.5 * formula
    per_step = measured if use_xla else formula
    mfu = None if chip.peak_tflops is None else per_step / step_s / (chip.peak_tflops * 1e12)
    return {"case": case, "mode": mode, "compile_s": compile_s, "step_ms": step_s * 1e3,
            "per_s": items / step_s, "unit": unit, "tflops_per_step": per_step / 1e12,
            "flops": "xla" if use_xla else "6N", "mfu": mfu, **extra}  # fmt: skip


# ---------------------------------------------------------------------------------- steps
def hand_step(graphdef: Any, loss_of: Callable[[Any, dict], jax.Array]) -> Callable:
    """A hand-written train step: merge, value_and_grad, optimizer update, state donated."""

    def step(state: Any, batch: dict) -> tuple[Any, jax.Array]:
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: loss_of(m, batch))(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return jax.jit(step, donate_argnums=0)


def device_ceiling(model: Any, tx: Any, loss_of: Callable, batch: dict, args: Any) -> tuple:
    """Compile the hand-written step and time it on ``batch``: (compile s, step s, XLA FLOPs,
    the compiled step and its state)."""
    graphdef, state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))
    start = time.perf_counter()
    compiled = hand_step(graphdef, loss_of).lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    holder = {"state": state}

    def run() -> jax.Array:
        holder["state"], loss = compiled(holder["state"], batch)
        return loss

    step_s = median_step(run, args.steps, args.repeats)
    return compile_s, step_s, compiled_flops(compiled), compiled, holder


def trainer_share(model: Any, tx: Any, batch: dict, args: Any, **kwargs: Any) -> tuple:
    """``Trainer.fit`` over ``batch`` repeated: (first fit of one step s, step s, data_wait,
    fit overhead s). The step is the marginal cost: fits of ``steps`` and ``2 * steps`` steps
    differ by ``steps`` steps; what each fit adds once (its epoch's end) is the overhead. Where
    noise swamps the difference (under half the long fit's mean step), the mean is kept."""
    from jaxfeed import Trainer  # import cost: the trainer, for this mode only

    trainer = Trainer(model, tx, verbose=0, **kwargs)
    start = time.perf_counter()
    trainer.fit([batch], epochs=1)
    first = time.perf_counter() - start

    def fit(n: int) -> float:
        start = time.perf_counter()
        trainer.fit([batch] * n, epochs=trainer.epoch + 1)
        jax.block_until_ready(trainer.core.state)
        return time.perf_counter() - start

    short, long, waits = [], [], []
    for _ in range(args.repeats):
        short.append(fit(args.steps))
        long.append(fit(2 * args.steps))
        waits.append(trainer.history[-1]["data_wait"])
    mean = statistics.median(long) / (2 * args.steps)  # the long fit's mean, overhead included
    step = (statistics.median(long) - statistics.median(short)) / args.steps
    if step < 0.5 * mean:  # timing noise larger than the difference: keep the mean
        step = mean
    overhead = max(statistics.median(short) - step * args.steps, 0.0)
    return first, step, statistics.median(waits), overhead


def profile_step(compiled: Any, holder: dict, batch: dict, folder: Path, steps: int = 3) -> None:
    """Write the step's optimized HLO (``step.hlo.txt``) and a profiler trace of ``steps`` steps
    (TensorBoard's ``plugins/profile`` with a Perfetto ``perfetto_trace.json.gz``) to ``folder``:
    which fusions the step's time goes to."""
    jax.block_until_ready(holder["state"])

    def one() -> Any:
        holder["state"], loss = compiled(holder["state"], batch)
        return loss

    profile_program(compiled.as_text(), one, folder, steps)


def profile_program(hlo: str, call: Callable[[], Any], folder: Path, calls: int = 3) -> None:
    """Write a program's optimized HLO ``hlo`` (``step.hlo.txt``) and a profiler trace of
    ``calls`` runs of ``call`` (each returning what to wait for) to ``folder``; the trace files
    are copied beside the HLO too, for tools that walk less.

    >>> import tempfile
    >>> f = jax.jit(lambda x: x * 2).lower(1.0).compile()
    >>> folder = Path(tempfile.mkdtemp())
    >>> profile_program(f.as_text(), lambda: f(1.0), folder, calls=1)
    >>> (folder / "step.hlo.txt").is_file(), any(folder.glob("*.trace.json.gz"))
    (True, True)
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step.hlo.txt").write_text(hlo)
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        out = None
        for _ in range(calls):
            out = call()
        jax.block_until_ready(out)
    for trace in folder.glob("plugins/profile/*/*"):
        shutil.copyfile(trace, folder / trace.name)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels
    ).mean()


def reference_row(case: str, reference: tuple, batch: dict, args: Any, chip: Chip, items: int,
                  unit: str, formula: float, shape: str) -> dict:  # fmt: skip
    """The ``reference`` row: the plain JAX step ``reference = (init, loss, key)`` of
    :mod:`jaxfeed.bench.accelerator_reference` on ``batch`` (the same optimizer)."""
    from jaxfeed.bench.accelerator_reference import step_of  # import cost: this mode only

    init, loss, key = reference
    tx = optax.adamw(1e-4, mu_dtype=args.mu_dtype)
    params = jax.jit(init)(jax.random.key(0))
    holder = {"state": (params, tx.init(params))}
    del params
    start = time.perf_counter()
    compiled = step_of(loss, tx, key).lower(holder["state"], batch).compile()
    compile_s = time.perf_counter() - start

    def run() -> jax.Array:
        holder["state"], value = compiled(holder["state"], batch)
        return value

    step_s = median_step(run, args.steps, args.repeats)
    flops = compiled_flops(compiled)
    holder.clear()
    return row(case, "reference", chip=chip, compile_s=compile_s, step_s=step_s, items=items,
               unit=unit, flops=(flops, formula), shape=shape)  # fmt: skip


def training_rows(case: str, make_model: Callable[[], Any], loss_of: Callable, batch: dict,
                  args: Any, chip: Chip, items: int, unit: str, formula: float,
                  trainer_kwargs: dict, more: Callable | None = None,
                  reference: tuple | None = None) -> list[dict]:  # fmt: skip
    """The rows of a training case as ``--modes`` asks: ``reference`` (a plain JAX step of the
    same shapes: ``(init, loss, key)``), ``device`` (the hand-written step on ``batch``), what
    ``more(compiled, holder, ceiling_row)`` adds with that step (the loader modes), then
    ``trainer``; each mode on a fresh model. With a reference row, each other row's
    ``vs_reference`` is the reference's step time over its own."""
    out: list[dict] = []
    shape = "x".join(str(s) for s in next(iter(batch.values())).shape[:2])
    ref = None
    if "reference" in args.modes and reference is not None:
        ref = reference_row(case, reference, batch, args, chip, items, unit, formula, shape)
        out.append(ref)
    if {"device", "loader", "fit", "torch"} & set(args.modes):
        tx = optax.adamw(1e-4, mu_dtype=args.mu_dtype)
        compile_s, step_s, flops, compiled, holder = device_ceiling(
            make_model(), tx, loss_of, batch, args
        )
        ceiling = row(case, "device", chip=chip, compile_s=compile_s, step_s=step_s, items=items,
                      unit=unit, flops=(flops, formula), shape=shape)  # fmt: skip
        out.append(ceiling)
        if args.profile is not None:
            profile_step(compiled, holder, batch, args.profile / case.replace(" ", "-"))
        if more is not None:
            out += more(compiled, holder, ceiling)
        holder.clear()  # the state's memory, before the next mode's
    if "trainer" in args.modes:
        tx = optax.adamw(1e-4, mu_dtype=args.mu_dtype)
        first, step_s, wait, overhead = trainer_share(make_model(), tx, batch, args,
                                                      **trainer_kwargs)  # fmt: skip
        r = row(case, "trainer", chip=chip, compile_s=first, step_s=step_s, items=items,
                unit=unit, flops=(None, formula), shape=shape, data_wait=wait,
                fit_overhead_ms=overhead * 1e3)  # fmt: skip
        ceiling = next((x for x in out if x["mode"] == "device"), None)
        if ceiling is not None:
            r["share"] = ceiling["step_ms"] / r["step_ms"]
        out.append(r)
    for r in out:
        if ref is not None and r is not ref and r["mode"] in ("device", "trainer"):
            r["vs_reference"] = ref["step_ms"] / r["step_ms"]
    return out


def vit_case(args: Any, chip: Chip) -> list[dict]:
    from jaxfeed.models.hub import vit  # import cost: the Hub models

    config = {"model_type": "vit", **(QUICK["vit"] if args.quick else VIT_B16)}

    def make_model() -> Any:
        model = vit.FAMILY.build(config, task="image-classification", num_labels=1000,
                                 dtype=jnp.bfloat16, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
        model.vit.encoder.scan, model.vit.encoder.remat = args.scan, remat_of(args, "vit")
        return model

    size, b = config["image_size"], args.vit_batch
    rng = np.random.default_rng(0)
    batch = {"image": jnp.asarray(rng.normal(size=(b, size, size, 3)), jnp.float32),
             "label": jnp.asarray(rng.integers(0, 1000, b), jnp.int32)}  # fmt: skip

    def loss_of(m: Any, batch: dict) -> jax.Array:
        return cross_entropy(m(pixel_values=batch["image"]), batch["label"])

    tokens = (size // config["patch_size"]) ** 2 + 1
    formula = formula_flops(param_count(nnx.eval_shape(make_model)), b * tokens, config["num_hidden_layers"],
                            tokens, config["hidden_size"])  # fmt: skip

    def more(compiled: Any, holder: dict, ceiling: dict) -> list[dict]:
        return loader_rows(compiled, holder, ceiling, make_model, size, args, chip, formula)

    from jaxfeed.bench import accelerator_reference as plain  # import cost: this case only

    init, loss = plain.vit(config, scan=args.scan, remat=remat_of(args, "vit"))
    return training_rows("vit", make_model, loss_of, batch, args, chip, b, "images", formula,
                         {"inputs": {"pixel_values": "image"}, "remat": remat_of(args, "vit")},
                         more, reference=(init, loss, jax.random.key(0)))  # fmt: skip


def bert_case(args: Any, chip: Chip) -> list[dict]:
    from jaxfeed.bench import accelerator_reference as plain  # import cost: this case only
    from jaxfeed.models.hub import bert  # import cost: the Hub models

    config = dict(QUICK["bert"] if args.quick else BERT_BASE)
    if args.no_dropout:  # then the fused attention kernel applies on a TPU
        config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    rows = []
    for shape in args.bert_shapes.split(","):
        b, t = (int(x) for x in shape.lower().split("x"))

        def make_model() -> Any:
            model = bert.build(config, task="sequence-classification", num_labels=2,
                               dtype=jnp.bfloat16, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
            model.encoder.scan, model.encoder.remat = args.scan, remat_of(args, "bert")
            return model

        rng = np.random.default_rng(0)
        batch = {"input_ids": jnp.asarray(rng.integers(1, config["vocab_size"], (b, t)), jnp.int32),
                 "attention_mask": jnp.ones((b, t), jnp.int32),
                 "label": jnp.asarray(rng.integers(0, 2, b), jnp.int32)}  # fmt: skip
        key = jax.random.key(0, impl=DROPOUT_PRNG[args.dropout_prng]())

        def loss_of(m: Any, batch: dict, key: Any = key) -> jax.Array:
            logits = m(batch["input_ids"], batch["attention_mask"], rngs=nnx.Rngs(dropout=key))
            return cross_entropy(logits, batch["label"])

        formula = formula_flops(param_count(nnx.eval_shape(make_model)), b * t, config["num_hidden_layers"], t,
                                config["hidden_size"])  # fmt: skip
        inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
        init, loss = plain.bert(config, scan=args.scan, remat=remat_of(args, "bert"))
        rows += training_rows(f"bert {b}x{t}", make_model, loss_of, batch, args, chip, b * t,
                              "tokens", formula, {"inputs": inputs, "remat": remat_of(args, "bert")},
                              reference=(init, loss, key))  # fmt: skip
    return rows


#: ``--dropout-prng``: the key implementation of the hand-written BERT step's dropout (the
#: ``Trainer`` draws its keys with :func:`jaxfeed.runtime.prng.dropout_impl`, ``auto`` here).
DROPOUT_PRNG: dict[str, Callable[[], Any]] = {
    "auto": dropout_impl,
    "rbg": lambda: "rbg",
    "counter": lambda: COUNTER_HASH,
    "threefry": lambda: "threefry2x32",
}


#: Each case's gradient checkpointing unless ``--remat`` says otherwise: the 1B Llama at 2048
#: tokens does not fit the 16 GiB of a v5e without it.
DEFAULT_REMAT = {"vit": False, "bert": False, "llama": True}


def remat_of(args: Any, case: str) -> bool | str:
    """The ``remat`` setting of ``case``: ``--remat`` (none, full, dots) or the case's default."""
    if args.remat is None:
        return DEFAULT_REMAT[case]
    return {"none": False, "full": True}.get(args.remat, args.remat)


def llama_model(args: Any, layers: int) -> Any:
    from jaxfeed.models.hub import decoder  # import cost: the Hub models

    config = dict(QUICK["llama"] if args.quick else LLAMA_1B, num_hidden_layers=layers)
    spec = decoder.llama_like_spec(config)
    model = decoder.CausalLM(spec, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    model.scan = args.scan
    if getattr(args, "unstacked", False):  # the layout before the layers were stored stacked
        from jaxfeed.models.stacked import unstack  # import cost: the Hub models

        model.layers = unstack(model.layers)
    return model


def llama_case(args: Any, chip: Chip) -> list[dict]:
    def make_model() -> Any:
        model = llama_model(args, args.llama_layers)
        model.remat = remat_of(args, "llama")
        return model

    model = nnx.eval_shape(make_model)  # shapes only
    b, t = args.llama_batch, args.llama_length
    rng = np.random.default_rng(0)
    batch = {"input_ids": jnp.asarray(rng.integers(1, model.vocab_size, (b, t)), jnp.int32)}

    def loss_of(m: Any, batch: dict) -> jax.Array:
        ids = batch["input_ids"]
        return cross_entropy(m(input_ids=ids)[:, :-1], ids[:, 1:])

    spec = model.spec
    formula = formula_flops(param_count(model), b * t, spec.num_layers, t, spec.hidden_size)
    kwargs = {
        "inputs": {"input_ids": "input_ids"},
        "loss": "next_token",
        "remat": remat_of(args, "llama"),
    }
    from jaxfeed.bench import accelerator_reference as plain  # import cost: this case only

    config = dict(QUICK["llama"] if args.quick else LLAMA_1B, num_hidden_layers=args.llama_layers)
    init, loss = plain.llama(config, scan=args.scan, remat=remat_of(args, "llama"))
    return training_rows("llama", make_model, loss_of, batch, args, chip, b * t, "tokens",
                         formula, kwargs, reference=(init, loss, jax.random.key(0)))  # fmt: skip


# ---------------------------------------------------------------------------------- loaders
class TorchJpegs:
    """What a PyTorch user writes: decode with Pillow, the same per-row transform."""

    def __init__(self, paths: list[str], labels: list[int], transform: Callable) -> None:
        self.paths, self.labels, self.transform = paths, labels, transform
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict:
        from jaxfeed.bench.augment import pil_decode  # import cost: Pillow

        row = self.transform(
            {"image": pil_decode(self.paths[i]), "label": self.labels[i]}, self.rng
        )
        return {"image": np.ascontiguousarray(row["image"]), "label": np.int32(row["label"])}


def _fed_seconds(compiled: Any, holder: dict, batches: Iterable, args: Any) -> float:
    """Seconds per step of the hand-written step fed by ``batches`` (two warm-up steps)."""
    stream, loss = iter(batches), None
    for _ in range(2):
        holder["state"], loss = compiled(holder["state"], next(stream))
    jax.block_until_ready(loss)
    n = args.steps * args.repeats
    start = time.perf_counter()
    for _ in range(n):
        holder["state"], loss = compiled(holder["state"], next(stream))
    jax.block_until_ready(loss)
    seconds = (time.perf_counter() - start) / n
    getattr(batches, "close", lambda: None)()  # ends the epoch the generator is in
    return seconds


def _forever(make: Callable[[], Iterable], keys: tuple[str, ...]) -> Iterable[dict]:
    while True:
        for batch in make():
            yield {k: jnp.asarray(batch[k]) for k in keys}


def loader_rows(compiled: Any, holder: dict, ceiling: dict, make_model: Callable, size: int,
                args: Any, chip: Chip, formula: float) -> list[dict]:  # fmt: skip
    """The ViT step fed from JPEGs: jaxfeed's DataLoader (``loader``), ``Trainer.fit`` over it
    (``fit``) and PyTorch's DataLoader (``torch``), each as a share of the device ceiling."""
    from jaxfeed import DataLoader, Dataset, Features, Image, Value  # import cost
    from jaxfeed import transforms as T  # import cost: the loader's transforms
    from jaxfeed.bench.augment import listing, make_folder  # import cost: Pillow

    b, rows = args.vit_batch, []
    paths, labels = listing(make_folder(args.images))
    transform = T.compose(T.random_resized_crop(size), T.horizontal_flip(),
                          T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD))  # fmt: skip
    features = Features({"image": Image(), "label": Value("int32")})
    ds = Dataset.from_dict({"image": paths, "label": labels}, features=features)
    loader = DataLoader(ds, b, shuffle=True, drop_last=True, row_transform=transform,
                        num_workers=args.workers)  # fmt: skip

    def add(mode: str, seconds: float, **extra: Any) -> None:
        r = row("vit", mode, chip=chip, compile_s=None, step_s=seconds, items=b, unit="images",
                flops=(None, formula), share=ceiling["step_ms"] / (seconds * 1e3), **extra)  # fmt: skip
        rows.append(r)

    if "loader" in args.modes:
        add(f"loader ({args.workers} workers)",
            _fed_seconds(compiled, holder, _forever(lambda: loader, ("image", "label")), args))  # fmt: skip
    if "torch" in args.modes:
        try:
            import torch.utils.data  # optional: the bench extra
        except ImportError:
            print("  torch not installed: the torch column is skipped")
        else:
            torch_loader = torch.utils.data.DataLoader(
                TorchJpegs(paths, labels, transform), batch_size=b, shuffle=True, drop_last=True,
                num_workers=args.workers, persistent_workers=args.workers > 0,
            )  # fmt: skip
            stream = _forever(lambda: ({k: v.numpy() for k, v in x.items()} for x in torch_loader),
                              ("image", "label"))  # fmt: skip
            add(f"torch ({args.workers} workers)", _fed_seconds(compiled, holder, stream, args))
    if "fit" in args.modes:
        holder.clear()
        seconds, extra = _fit_over(loader, make_model, args)
        add(f"fit ({args.workers} workers)", seconds, **extra)
    loader.close()
    return rows


def _fit_over(loader: Any, make_model: Callable, args: Any) -> tuple[float, dict]:
    """``Trainer.fit`` over ``loader``: seconds per step of its last epoch (the first compiles)
    and that epoch's ``data_wait``."""
    from jaxfeed import Trainer  # import cost: the trainer, for this mode only

    trainer = Trainer(make_model(), optax.adamw(1e-4, mu_dtype=args.mu_dtype),
                      inputs={"pixel_values": "image"}, verbose=0)  # fmt: skip
    trainer.fit(loader, epochs=2)
    logs = trainer.history[-1]
    return logs["seconds"] / len(loader), {"data_wait": logs["data_wait"]}


# ---------------------------------------------------------------------------------- generation
def _generation_programs(graphdef: Any, b: int, prompt: int, new: int) -> tuple[Callable, Callable]:
    """Jitted prefill of ``(b, prompt)`` ids into a fresh cache, and greedy decoding of ``new``
    tokens from there (one ``fori_loop``: no host round trip per token)."""
    slots = prompt + new

    def prefill(state: Any, ids: jax.Array) -> tuple[jax.Array, Any]:
        model = nnx.merge(graphdef, state)
        cache = model.init_cache(b, slots)
        positions = jnp.broadcast_to(jnp.arange(prompt, dtype=jnp.int32), (b, prompt))
        logits, cache = model.decode(ids, positions, jnp.ones((b, slots), jnp.int32), cache,
                                     jnp.int32(0))  # fmt: skip
        return jnp.argmax(logits, -1).astype(jnp.int32), cache

    def decode(state: Any, token: jax.Array, cache: Any) -> jax.Array:
        model = nnx.merge(graphdef, state)
        mask = jnp.ones((b, slots), jnp.int32)

        def body(i: jax.Array, carry: tuple) -> tuple:
            tok, cache, out = carry
            at = jnp.int32(prompt) + i
            logits, cache = model.decode(tok[:, None], jnp.full((b, 1), at), mask, cache, at)
            tok = jnp.argmax(logits, -1).astype(jnp.int32)
            return tok, cache, out.at[:, i].set(tok)

        out = jnp.zeros((b, new), jnp.int32)
        return jax.lax.fori_loop(0, new, body, (token, cache, out))[2]

    return jax.jit(prefill), jax.jit(decode)


def generate_case(args: Any, chip: Chip) -> list[dict]:
    """Greedy decoding of the Llama-shaped model: prefill and decode tokens/s per batch size, and
    the decode step against the HBM bound (weights read once per step). The layers are laid out
    as ``jaxfeed generate`` lays them (:func:`~jaxfeed.text.decode_layout`: a list of their own
    buffers on a TPU) unless ``--stacked-decode``."""
    from jaxfeed.models.stacked import Stack  # import cost: the Hub models
    from jaxfeed.text import decode_layout  # import cost: as the Hub models

    model = llama_model(args, args.llama_layers)
    model.eval()
    if not getattr(args, "stacked_decode", False):
        decode_layout(model)
    layout = "stacked" if isinstance(model.layers, Stack) else "list"
    weight_bytes = param_bytes(model)
    graphdef, state = nnx.split(model)
    prompt, new, rows = args.prompt, args.new_tokens, []
    for b in (int(x) for x in args.gen_batches.split(",")):
        ids = jnp.asarray(np.random.default_rng(0).integers(1, model.vocab_size, (b, prompt)),
                          jnp.int32)  # fmt: skip
        prefill, decode = _generation_programs(graphdef, b, prompt, new)
        start = time.perf_counter()
        prefill_c = prefill.lower(state, ids).compile()
        token, cache = prefill_c(state, ids)
        decode_c = decode.lower(state, token, cache).compile()
        compile_s = time.perf_counter() - start
        prefill_s = median_step(lambda: prefill_c(state, ids), 1, args.repeats)  # noqa: B023
        decode_s = median_step(lambda: decode_c(state, token, cache), 1, args.repeats) / new  # noqa: B023
        if args.profile is not None:  # one decode call: `new` tokens, the step's fusions
            profile_program(decode_c.as_text(), lambda: decode_c(state, token, cache),  # noqa: B023
                            args.profile / f"generate-b{b}", calls=1)  # fmt: skip
        bound = None if chip.hbm_gbs is None else weight_bytes / (chip.hbm_gbs * 1e9)
        rows.append({
            "case": "generate", "mode": f"greedy b={b}", "shape": f"{b}x{prompt}+{new}",
            "layout": layout,
            "compile_s": compile_s, "step_ms": decode_s * 1e3, "per_s": b / decode_s,
            "unit": "tokens", "prefill_per_s": b * prompt / prefill_s,
            "hbm_fraction": None if bound is None else bound / decode_s,
            "weight_gb": weight_bytes / 1e9, "mfu": None, "flops": "-",
        })  # fmt: skip
    return rows


# ---------------------------------------------------------------------------------- command
CASES = {"vit": vit_case, "bert": bert_case, "llama": llama_case, "generate": generate_case}
MODES = ("reference", "device", "trainer", "loader", "fit", "torch")


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict], chip: Chip) -> None:
    peak = "unknown chip: no MFU" if chip.peak_tflops is None else f"{chip.peak_tflops} TFLOP/s"
    print(f"\n{chip.kind} (bf16 peak {peak}; JAX {jax.__version__}, {jax.default_backend()})")
    head = ("case", "mode", "shape", "compile s", "step ms", "per s", "MFU", "flops", "notes")
    print(f"{head[0]:<14}{head[1]:<20}{head[2]:<14}{head[3]:>10}{head[4]:>10}{head[5]:>16}"
          f"{head[6]:>7}  {head[7]:<6}{head[8]}")  # fmt: skip
    for r in rows:
        notes = []
        for key, label, spec in (("vs_reference", "of reference", ".2f"),
                                 ("share", "of ceiling", ".2f"), ("data_wait", "data_wait", ".3f"),
                                 ("fit_overhead_ms", "ms per fit call", ".1f"),
                                 ("prefill_per_s", "prefill tok/s", ",.0f"),
                                 ("hbm_fraction", "of HBM bound", ".2f")):  # fmt: skip
            if r.get(key) is not None:
                notes.append(f"{label} {format(r[key], spec)}")
        if r.get("layout"):
            notes.append(f"layers {r['layout']}")
        per = f"{r['per_s']:,.0f} {r['unit'][:3]}"
        print(f"{r['case']:<14}{r['mode']:<20}{r.get('shape', ''):<14}"
              f"{_fmt(r['compile_s'], '.1f'):>10}{r['step_ms']:>10.2f}{per:>16}"
              f"{_fmt(r['mfu'], '.3f'):>7}  {r['flops']:<6}{'; '.join(notes)}")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny shapes (runs on a CPU)")
    p.add_argument("--cases", default="vit,bert,llama,generate")
    p.add_argument("--modes", default="reference,device,trainer,loader,fit,torch")
    p.add_argument("--steps", type=int, default=10, help="steps per timed group")
    p.add_argument("--repeats", type=int, default=3, help="timed groups (median)")
    p.add_argument("--vit-batch", type=int, default=128)
    p.add_argument("--bert-shapes", default="32x512,32x128")
    p.add_argument("--llama-layers", type=int, default=22)
    p.add_argument("--llama-batch", type=int, default=1)
    p.add_argument("--llama-length", type=int, default=2048)
    p.add_argument("--gen-batches", default="1,16")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--images", type=int, default=2048, help="JPEGs in the loader's folder")
    p.add_argument("--attention", choices=("auto", "xla", "flash"), default="auto")
    p.add_argument("--no-scan", dest="scan", action="store_false", help="unroll the layers")
    p.add_argument("--stacked-decode", action="store_true",
                   help="decode over the layers stored stacked (default: as jaxfeed generate, "
                   "a list of per-layer buffers on a TPU)")  # fmt: skip
    p.add_argument("--unstacked", action="store_true",
                   help="Llama's layers as a list of modules of their own, not stored stacked")  # fmt: skip
    p.add_argument(
        "--unroll",
        type=int,
        default=1,
        help="layers per scan iteration (1: one layer's code; ignored with --no-scan)",
    )
    p.add_argument(
        "--remat",
        choices=("none", "full", "dots", "attention"),
        help="gradient checkpointing (default: llama full, the others none)",
    )
    p.add_argument("--dropout-prng", choices=sorted(DROPOUT_PRNG), default="auto",
                   help="the hand-written BERT step's dropout keys (auto: rbg off CPU)")  # fmt: skip
    p.add_argument("--no-dropout", action="store_true", help="BERT without dropout (0.1 default)")
    p.add_argument("--mu-dtype", choices=("float32", "bfloat16"), default="bfloat16",
                   help="AdamW's first moment (the second follows the parameters)")  # fmt: skip
    p.add_argument("--out", type=Path, help="also write the results to this JSON file")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="write each case's optimized HLO and a trace of 3 device steps under DIR")  # fmt: skip
    p.add_argument("--flash-block", type=int, default=None,
                   help="the fused kernel's longest block (default: attention.FLASH_BLOCK)")  # fmt: skip
    p.add_argument("--fused-kernel", choices=("flash", "splash"), default=None,
                   help="the kernel --attention flash runs (default: attention.FUSED_KERNEL)")  # fmt: skip
    p.add_argument("--attention-dropout", choices=("fused", "xla"), default="fused",
                   help="attention dropout inside the fused kernel, or on XLA's path (old)")  # fmt: skip
    p.add_argument("--dropout-bits", choices=("hardware", "hash"), default=None,
                   help="the fused dropout's random bits (default: attention.DROPOUT_BITS)")  # fmt: skip
    p.add_argument("--no-short-kernel", action="store_true",
                   help="XLA's path where splash is refused (not the short-sequence kernel)")  # fmt: skip
    p.add_argument("--logits-float32", action="store_true",
                   help="XLA attention's logits written in float32 (default: the inputs' dtype)")  # fmt: skip
    args = p.parse_args(argv)
    if args.quick:
        for name, value in (("steps", 2), ("repeats", 2), ("vit_batch", 8), ("bert_shapes", "4x32"),
                            ("llama_layers", 2), ("llama_length", 64), ("gen_batches", "1"),
                            ("modes", "reference,device,trainer,loader,torch"),
                            ("prompt", 16), ("new_tokens", 8), ("images", 32),
                            ("workers", min(args.workers, 2))):  # fmt: skip
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    args.cases, args.modes = args.cases.split(","), args.modes.split(",")
    for name, known in (("cases", CASES), ("modes", MODES)):
        unknown = [x for x in getattr(args, name) if x not in known]
        if unknown:
            p.error(f"--{name}: unknown {unknown}; known: {', '.join(known)}")
    args.mu_dtype = jnp.bfloat16 if args.mu_dtype == "bfloat16" else jnp.float32
    if args.scan and args.unroll > 1:
        args.scan = args.unroll  # run_layers: an int scans that many layers per iteration
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    from jaxfeed.models import attention  # import cost: models
    from jaxfeed.models.attention import use_attention  # import cost: models

    args = parse_args(argv)
    settings = {
        "LOGITS_IN_FLOAT32": args.logits_float32,
        "FLASH_BLOCK": args.flash_block or attention.FLASH_BLOCK,
        "FUSED_KERNEL": args.fused_kernel or attention.FUSED_KERNEL,
        "FUSED_DROPOUT": args.attention_dropout == "fused",
        "DROPOUT_BITS": args.dropout_bits or attention.DROPOUT_BITS,
        "SHORT_KERNEL": attention.SHORT_KERNEL and not args.no_short_kernel,
    }
    before = {name: getattr(attention, name) for name in settings}
    chip = Chip.of_kind(jax.devices()[0].device_kind)
    rows: list[dict] = []
    try:  # the attention settings for this run only (a caller's process keeps its own)
        for name, value in settings.items():
            setattr(attention, name, value)
        with use_attention(args.attention):
            for name in args.cases:
                rows += CASES[name](args, chip)
                print_table(rows, chip)
        bits = attention.DROPOUT_BITS
    finally:
        for name, value in before.items():
            setattr(attention, name, value)
    payload = {"chip": chip.kind, "peak_tflops": chip.peak_tflops, "jax": jax.__version__,
               "quick": args.quick, "attention": args.attention, "scan": args.scan, "remat": args.remat,
               "attention_dropout": args.attention_dropout, "dropout_bits": bits,
               "short_kernel": settings["SHORT_KERNEL"],
               "rows": rows}  # fmt: skip
    save_json("accelerator" + ("-quick" if args.quick else ""), payload)
    if args.out is not None:
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2))
        tmp.replace(args.out)
    return rows


if __name__ == "__main__":
    main()
