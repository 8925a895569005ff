"""Compile the accelerator benchmark's hand-written train steps for a TPU v5e on this machine, with
no chip: XLA's TPU compiler (``libtpu``) compiles against a described topology. It prints what
decides a step's speed before a chip is lent: compile seconds, HBM (arguments, temporaries),
the compiler's own time estimate, and the optimized HLO's layout copies, transposes and loops
(with ``--hlo FILE`` the whole text). One-time setup (libtpu matching the installed jaxlib):

    .venv/bin/python -m pip install --no-deps --target /tmp/libtpu_site libtpu==0.0.42.1
    PYTHONPATH=/tmp/libtpu_site .venv/bin/python tools/tpu/aot.py --case vit --remat attention

The estimate sums the TPU compiler's cycle estimates of each op (a loop's body once a trip): it
read 1.47x the measured ViT-B/16 step on the v5e, so compare variants with it, and confirm on the
chip.
"""

from __future__ import annotations

import argparse
import collections
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.experimental import topologies

from jaxfeed.bench import accelerator as bench
from jaxfeed.models import attention


def tpu_device(topology: str) -> jax.Device:
    """The first chip of a described TPU topology (v5e describes hosts of 2x2 chips)."""
    return topologies.get_topology_desc(platform="tpu", topology_name=topology).devices[0]


def abstract(tree: object, device: jax.Device) -> object:
    """``tree``'s arrays as shape-dtype structures placed on ``device``."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def case_of(args: argparse.Namespace) -> tuple:
    """``(make_model, loss_of, batch)`` of the benchmark's ViT-B/16 or BERT-base case."""
    if args.case == "vit":
        from jaxfeed.models.hub import vit  # import cost: the Hub models

        config = {"model_type": "vit", **bench.VIT_B16}

        def make_model() -> nnx.Module:
            model = vit.FAMILY.build(config, task="image-classification", num_labels=1000,
                                     dtype=jnp.bfloat16, param_dtype=jnp.float32,
                                     rngs=nnx.Rngs(0))  # fmt: skip
            model.vit.encoder.scan, model.vit.encoder.remat = args.scan, args.remat
            return model

        b, size = args.batch, config["image_size"]
        batch = {"image": np.zeros((b, size, size, 3), np.float32), "label": np.zeros(b, np.int32)}

        def loss_of(m: nnx.Module, batch: dict) -> jax.Array:
            return bench.cross_entropy(m(pixel_values=batch["image"]), batch["label"])

        return make_model, loss_of, batch
    from jaxfeed.models.hub import bert  # import cost: the Hub models

    b, t = (int(x) for x in args.shape.split("x"))
    config = dict(bench.BERT_BASE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    def make_bert() -> nnx.Module:
        model = bert.build(config, task="sequence-classification", num_labels=2,
                           dtype=jnp.bfloat16, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
        model.encoder.scan, model.encoder.remat = args.scan, args.remat
        return model

    batch = {"input_ids": np.ones((b, t), np.int32), "attention_mask": np.ones((b, t), np.int32),
             "label": np.zeros(b, np.int32)}  # fmt: skip

    def bert_loss(m: nnx.Module, batch: dict) -> jax.Array:
        out = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return bench.cross_entropy(out, batch["label"])

    return make_bert, bert_loss, batch


def hlo_census(text: str) -> dict[str, int]:
    """Counts of the optimized HLO's instructions that move data without computing."""
    ops = collections.Counter(re.findall(r"= [^=]*? (copy|transpose|while|custom-call|"
                                         r"dynamic-update-slice|concatenate)\(", text))  # fmt: skip
    ops["copy fusions"] = len(re.findall(r"%copy[\w.\-]*fusion[\w.\-]* = ", text))
    ops["transpose fusions"] = len(re.findall(r"%transpose[\w.\-]*fusion[\w.\-]* = ", text))
    return dict(ops)


def estimated_ms(text: str, trips: int, clock_hz: float = 1.5e9) -> tuple[float, dict, list]:
    """The compiler's per-op cycle estimates (``estimated_cycles`` in each op's backend config)
    summed over the program, a while loop's body ``trips`` times: ``(ms, ms per kind of op,
    [(ms, op, source)] slowest first)`` at ``clock_hz``. On the v5e it read 1.47x the measured
    ViT-B/16 step (235 against 160 ms): compare variants, not absolutes."""
    import trace_summary as ts  # beside this file (tools/tpu is no package)

    instructions, opcodes = ts.parse_hlo(text)
    bodies: dict[str, list[str]] = {}
    entry, current = None, None
    for line in text.splitlines():
        m = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if m and not line.startswith(" "):
            current = m.group(2)
            bodies[current] = []
            entry = current if m.group(1) else entry
        elif line.startswith("}"):
            current = None
        elif current is not None:
            bodies[current].append(line)
    kinds: dict[str, float] = collections.Counter()
    ops: dict[tuple, float] = collections.Counter()

    def walk(computation: str, times: int) -> None:
        for line in bodies[computation]:
            m = ts.INSTRUCTION.match(line)
            if not m:
                continue
            name, _, opcode, rest = m.groups()
            if opcode == "while":
                walk(re.search(r"body=%?([\w.\-]+)", rest).group(1), times * trips)
                continue
            cycles = re.search(r'"estimated_cycles":"(\d+)"', line)
            ms = (int(cycles.group(1)) if cycles else 0) * times / clock_hz * 1e3
            kinds[ts.kind_of(name, instructions, opcodes)] += ms
            ops[(name, ts.source_of(instructions[name][2]) if name in instructions else "")] += ms

    walk(entry, 1)
    slowest = [(ms, name, src) for (name, src), ms in ops.most_common()]
    return sum(kinds.values()), dict(kinds), slowest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=("vit", "bert"), default="vit")
    p.add_argument("--batch", type=int, default=128, help="ViT's batch")
    p.add_argument("--shape", default="32x512", help="BERT's batch x length")
    p.add_argument("--remat", default="attention", help="none, full, dots, attention")
    p.add_argument("--unroll", type=int, default=1, help="layers a scan iteration; 0: a loop")
    p.add_argument("--attention", choices=("auto", "xla", "flash"), default="auto")
    p.add_argument("--topology", default="v5e:2x2")
    p.add_argument("--no-short-kernel", action="store_true", help="attention.SHORT_KERNEL off")
    p.add_argument("--hlo", type=Path, help="write the optimized HLO here")
    p.add_argument("--top", type=int, default=0, help="list the N slowest ops by the estimate")
    args = p.parse_args()
    args.remat = {"none": False, "full": True}.get(args.remat, args.remat)
    args.scan = args.unroll if args.unroll > 1 else bool(args.unroll)
    device = tpu_device(args.topology)
    jax.default_backend = lambda: "tpu"  # the models' "auto" choices as on the chip
    make_model, loss_of, batch = case_of(args)
    tx = optax.adamw(1e-4, mu_dtype=jnp.bfloat16)
    graphdef, state = nnx.split(
        nnx.eval_shape(lambda: (lambda m: (m, nnx.Optimizer(m, tx, wrt=nnx.Param)))(make_model()))
    )
    attention.SHORT_KERNEL = not args.no_short_kernel
    with attention.use_attention(args.attention):
        start = time.perf_counter()
        lowered = bench.hand_step(graphdef, loss_of).lower(abstract(state, device),
                                                           abstract(batch, device))  # fmt: skip
        compiled = lowered.compile()
    seconds = time.perf_counter() - start
    text = compiled.as_text()
    if args.hlo is not None:
        args.hlo.write_text(text)
    memory = compiled.memory_analysis()
    gib = 2**30
    print(f"{args.case} remat={args.remat} scan={args.scan} attention={args.attention}: "
          f"compile {seconds:.1f} s; HBM arguments {memory.argument_size_in_bytes / gib:.2f} GiB, "
          f"temporaries {memory.temp_size_in_bytes / gib:.2f} GiB; {hlo_census(text)}")  # fmt: skip
    total, kinds, slowest = estimated_ms(text, 12 // max(args.unroll, 1) if args.unroll else 1)
    print(
        f"summed op estimates: {total:.1f} ms: "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    )
    for ms, name, src in slowest[: args.top]:
        print(f"  {ms:7.2f} ms  {name}  {src}")


if __name__ == "__main__":
    main()
