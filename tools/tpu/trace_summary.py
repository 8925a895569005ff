"""Where a profiled step's device time goes: reads a folder written by
``benchmarks/accelerator.py --profile DIR`` (``step.hlo.txt`` and the profiler's
``*.trace.json.gz``) and prints the time per kind of op (matmul fusions, layout copies, other
fusions, kernels, loops' bookkeeping), per source operation (the JAX primitive behind each fusion,
from the HLO's ``op_name`` metadata) and the slowest ops, in milliseconds per step.

    python3 tools/tpu/trace_summary.py DIR/vit [--steps 3] [--top 40]

On a TPU the device's ops are the ``XLA Ops`` thread of a ``/device:TPU:0`` process; on a CPU the
thunk events that name their HLO op (``args.hlo_op``), so the script can be tried here first.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
from pathlib import Path

INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([\w\-]+)\((.*)$")
COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")


def parse_hlo(text: str) -> tuple[dict, dict]:
    """``(instructions, computations)``: each instruction's ``(opcode, computation called, op_name,
    result type)``; each computation's opcodes."""
    instructions: dict[str, tuple] = {}
    computations: dict[str, set] = collections.defaultdict(set)
    roots: dict[str, str] = {}  # computation -> its root's op_name (a fusion's when it has none)
    current = None
    for line in text.splitlines():
        m = COMPUTATION.match(line)
        if m and "=" not in line.split("{")[0]:
            current = m.group(1)
            continue
        m = INSTRUCTION.match(line)
        if not m:
            continue
        name, rtype, opcode, rest = m.groups()
        called = re.search(r"calls=%?([\w.\-]+)", rest)
        op_name = re.search(r'op_name="([^"]*)"', rest)
        target = re.search(r'custom_call_target="([^"]*)"', rest)
        instructions[name] = (opcode, called.group(1) if called else None,
                              op_name.group(1) if op_name else "",
                              rtype, target.group(1) if target else "")  # fmt: skip
        if current is not None:
            computations[current].add(opcode)
            if line.lstrip().startswith("ROOT") and op_name:
                roots[current] = op_name.group(1)
    for name, (opcode, called, op_name, rtype, target) in list(instructions.items()):
        if not op_name and called in roots:
            instructions[name] = (opcode, called, roots[called], rtype, target)
    return instructions, computations


def kind_of(name: str, instructions: dict, computations: dict) -> str:
    """``matmul``, ``copy``, ``kernel`` (a custom call), ``loop`` (while, its bookkeeping) or
    ``fusion`` (elementwise and reductions)."""
    if name not in instructions:
        base = re.sub(r"\.\d+$", "", name)
        return "copy" if base in ("copy", "transpose") else "unknown"
    opcode, called, _, _, _ = instructions[name]
    ops = computations.get(called, set()) if called else set()
    if opcode in ("convolution", "dot") or ops & {"convolution", "dot"}:
        return "matmul"
    if opcode in ("copy", "transpose", "copy-start", "copy-done") or (
        called and ops and ops <= {"copy", "transpose", "bitcast", "parameter", "tuple"}
    ):
        return "copy"
    if opcode == "custom-call":
        return "kernel"
    if opcode in ("while", "conditional", "call", "tuple", "get-tuple-element", "parameter",
                  "constant", "bitcast"):  # fmt: skip
        return "loop"
    if opcode == "fusion" and "dynamic-update-slice" in name:
        return "dynamic-update-slice"
    return "fusion"


def source_of(op_name: str) -> str:
    """The last two parts of an ``op_name`` (``transpose(jvp())/.../erf`` -> ``.../erf``)."""
    parts = [p for p in re.split(r"/", op_name) if p]
    tail = [re.sub(r"\[.*", "", p) for p in parts[-2:]]
    backward = "bwd " if "transpose(" in op_name else ""
    return backward + "/".join(tail) if tail else "?"


def device_events(trace: dict) -> list[dict]:
    """The device's op events: the ``XLA Ops`` thread of a TPU process, else the CPU's thunks."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}  # fmt: skip
    threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}  # fmt: skip
    tpu = {pid for pid, n in procs.items() if "TPU:0" in n or ("/device:" in n and "CPU" not in n)}
    ops = [e for e in events if e.get("ph") == "X" and e.get("pid") in tpu
           and threads.get((e["pid"], e.get("tid"))) == "XLA Ops"]  # fmt: skip
    if ops:
        return ops
    return [dict(e, name=e["args"]["hlo_op"]) for e in events
            if e.get("ph") == "X" and "hlo_op" in e.get("args", {})]  # fmt: skip


def summarize(folder: Path, steps: int, top: int) -> str:
    instructions, computations = parse_hlo((folder / "step.hlo.txt").read_text())
    traces = sorted(folder.glob("*.trace.json.gz"))
    if not traces:
        raise SystemExit(f"{folder}: no *.trace.json.gz (run the bench with --profile)")
    with gzip.open(traces[0]) as f:
        events = device_events(json.load(f))
    lines = [f"{folder}: {len(events)} device op events over {steps} steps"]
    if events:
        lines.append(f"event args seen: {sorted(events[0].get('args', {}))}")
    nested = {"while", "conditional", "call"}  # their events span the ops inside them
    by_kind: dict[str, float] = collections.Counter()
    by_source: dict[str, float] = collections.Counter()
    by_op: dict[str, float] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    for e in events:
        ms = e.get("dur", 0.0) / 1e3 / steps
        name = e["name"]
        kind = kind_of(name, instructions, computations)
        if instructions.get(name, ("",))[0] in nested:
            kind = "loop (spans its body)"
        else:
            by_kind[kind] += ms
        by_op[name] += ms
        count[name] += 1
        src = source_of(instructions.get(name, ("", None, "", "", ""))[2])
        by_source[f"{kind}: {src}"] += ms
    total = sum(by_kind.values())
    lines.append(f"device op time per step: {total:.2f} ms")
    for kind, ms in by_kind.most_common():
        lines.append(f"  {kind:22s} {ms:9.2f} ms  {ms / max(total, 1e-9):6.1%}")
    lines.append("by source (kind: op_name tail):")
    for src, ms in by_source.most_common(top):
        lines.append(f"  {ms:9.2f} ms  {src}")
    lines.append("slowest ops:")
    for name, ms in by_op.most_common(top):
        opcode, _, op_name, rtype, target = instructions.get(name, ("?", None, "", "", ""))
        lines.append(f"  {ms:8.2f} ms x{count[name] // steps:<3d} {name} [{opcode}"
                     f"{' ' + target if target else ''}] {rtype[:60]} {source_of(op_name)}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--steps", type=int, default=3, help="steps the trace holds")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    print(summarize(args.folder, args.steps, args.top))


if __name__ == "__main__":
    main()
