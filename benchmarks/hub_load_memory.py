"""Peak host memory while ``jaxfeed.models.from_pretrained`` loads a ~300M-parameter (BERT-large)
or ~1B-parameter (Llama-shape) checkpoint onto 8 (fake CPU) devices with FSDP, against the
largest single tensor and, with ``--reference transformers``, against ``transformers``' own load.

``python benchmarks/hub_load_memory.py [--family bert|llama] [--folder DIR] [--layers N]
[--sharding fsdp] [--param-dtype bfloat16] [--reference transformers] [--out result.json]``

* ``--family bert`` (default): BERT-large size (24 layers, width 1024, MLP 4096, 30522-token
  vocabulary, ~335M parameters, 1.3 GB in float32), sequence classification;
* ``--family llama``: Llama shape (20 layers, width 2048, MLP 5632, 32 heads / 4 key-value
  heads, 32000-token vocabulary, untied embeddings: ~1.01B parameters, 2.0 GB in bfloat16),
  loaded with ``task="causal-lm"``; ``config.json`` is one ``transformers.LlamaConfig`` reads.

The checkpoint is written once with random weights, one tensor in memory at a time, to ``DIR``
(default: a folder under the system's temporary folder; delete it after). The load then runs in a
fresh process that samples its resident memory (``/proc/self/status``) every millisecond, and
counts the bytes already placed on the devices (which, on CPU devices, also live in host memory).
The figure reported is the *overhead*: the largest value over the load of ``RSS - RSS before
loading - bytes placed on devices so far``, next to the largest tensor. On CPU devices the file
pages a memory map touches count in RSS while mapped; they are reported both with (``RSS``) and
without (``anonymous``) them.

``--reference transformers`` then loads the same files in another fresh process with
``transformers``' ``AutoModelForCausalLM`` (``AutoModelForSequenceClassification`` for bert),
``dtype`` = the checkpoint's dtype (bfloat16 for llama), sampled the same way: its peak RSS
growth (up to and including one read of every parameter after ``from_pretrained`` returns, so
pages it maps lazily are counted), and that growth less the bytes of its parameters (its
overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LLAMA = {"vocab_size": 32000, "hidden_size": 2048, "num_hidden_layers": 20,
         "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 5632,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
         "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
DEFAULT_LAYERS = {"bert": 24, "llama": 20}

SIZES = {"vocab_size": 30522, "hidden_size": 1024, "num_hidden_layers": 24,
         "num_attention_heads": 16, "intermediate_size": 4096,
         "max_position_embeddings": 512, "type_vocab_size": 2}  # fmt: skip


class _Random:
    """A tensor written by ``write_safetensors`` without existing before: random values (float32,
    or ``dtype``) made when its bytes are asked for."""

    def __init__(self, shape: tuple[int, ...], seed: int, dtype=None) -> None:
        import numpy as np

        self.shape, self.seed = shape, seed
        self.dtype = np.dtype(np.float32 if dtype is None else dtype)

    def __array__(self, dtype=None, copy=None):
        import numpy as np

        rng = np.random.default_rng(self.seed)
        values = 0.02 * rng.standard_normal(self.shape, dtype=np.float32)
        return values.astype(dtype or self.dtype)


def make_llama_checkpoint(folder: Path, layers: int) -> None:
    """A random Llama-shape causal LM (:data:`LLAMA`, ``layers`` deep) in the Hub's layout:
    bfloat16 safetensors under ``transformers``' names, one tensor in memory at a time."""
    import ml_dtypes

    c = {**LLAMA, "num_hidden_layers": layers}
    h, m, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                   p + "mlp.gate_proj.weight": (m, h), p + "mlp.up_proj.weight": (m, h),
                   p + "mlp.down_proj.weight": (h, m), p + "input_layernorm.weight": (h,),
                   p + "post_attention_layernorm.weight": (h,)}  # fmt: skip
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (v, h)}
    bf16 = ml_dtypes.bfloat16
    tensors = {n: _Random(s, i, bf16) for i, (n, s) in enumerate(shapes.items())}
    from jaxfeed.models.hub.files import write_safetensors

    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"})
    config = {**c, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def make_checkpoint(folder: Path, layers: int) -> None:
    """A random BERT-large-size sequence classifier in the Hub's layout (config + safetensors)."""
    from flax import nnx

    from jaxfeed.models.hub.bert import FAMILY
    from jaxfeed.models.hub.files import write_safetensors
    from jaxfeed.models.hub.weights import variables

    folder.mkdir(parents=True, exist_ok=True)
    config = {**SIZES, "num_hidden_layers": layers, "model_type": "bert", "num_labels": 2,
              "architectures": ["BertForSequenceClassification"]}  # fmt: skip
    task = "sequence-classification"
    model = nnx.eval_shape(lambda: FAMILY.build(config, task=task, num_labels=2, dtype=None,
                                                param_dtype="float32", rngs=nnx.Rngs(0)))  # fmt: skip
    found = variables(model)
    tensors = {}
    for i, rule in enumerate(FAMILY.rules(config, task)):
        import numpy as np

        shape = found[rule.path].get_value().shape
        hf_shape = rule.transform.to_hf(np.broadcast_to(np.zeros((), np.float32), shape)).shape
        tensors[rule.hf] = _Random(tuple(hf_shape), i)
    write_safetensors(folder / "model.safetensors", tensors)
    (folder / "config.json").write_text(json.dumps(config))


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _sampler(placed: list[int]):
    """A thread sampling (RSS, anonymous RSS, bytes placed) every millisecond; its samples and
    stop event."""
    samples: list[tuple[int, int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            s = _status()
            samples.append((s["VmRSS"], s["RssAnon"], placed[0]))
            time.sleep(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return samples, stop, thread


def measure_transformers(folder: Path, family: str) -> dict:
    """``transformers``' own load of ``folder`` (the checkpoint's dtype), sampled as
    :func:`measure` samples jaxfeed's."""
    import torch
    import transformers

    from jaxfeed.models.hub.files import Weights

    w = Weights(folder)
    dtype = {w.dtype(n) for n in w.names()}.pop()
    del w
    torch_dtype = torch.bfloat16 if dtype.name == "bfloat16" else torch.float32
    auto = (transformers.AutoModelForCausalLM if family == "llama"
            else transformers.AutoModelForSequenceClassification)  # fmt: skip
    torch.zeros(8)
    base = _status()
    samples, stop, thread = _sampler([0])
    start = time.perf_counter()
    model = auto.from_pretrained(folder, dtype=torch_dtype)
    seconds = time.perf_counter() - start
    loaded = len(samples)
    with torch.no_grad():  # read every parameter once: pages it maps lazily come in
        for p in model.parameters():
            p.sum()
    stop.set()
    thread.join()
    end = _status()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    during = samples[:loaded] or [(end["VmRSS"], end["RssAnon"], 0)]
    peak_rss = max(r for r, _, _ in [*samples, (end["VmRSS"], 0, 0)]) - base["VmRSS"]
    peak_anon = max(a for _, a, _ in [*samples, (0, end["RssAnon"], 0)]) - base["RssAnon"]
    return {
        "library": f"transformers {transformers.__version__}, torch {torch.__version__}",
        "dtype": str(torch_dtype),
        "params": int(sum(p.numel() for p in model.parameters())),
        "param_bytes": int(param_bytes),
        "load_seconds": round(seconds, 2),
        "peak_rss_growth_bytes": int(peak_rss),
        "peak_anon_growth_bytes": int(peak_anon),
        "peak_overhead_rss_bytes": int(peak_rss - param_bytes),
        "peak_overhead_anon_bytes": int(peak_anon - param_bytes),
        "peak_rss_growth_in_from_pretrained_bytes": max(r for r, _, _ in during) - base["VmRSS"],
        "rss_growth_bytes": end["VmRSS"] - base["VmRSS"],
        "anon_growth_bytes": end["RssAnon"] - base["RssAnon"],
        "samples": len(samples),
    }


def measure(folder: Path, sharding: str, family: str = "bert", param_dtype=None) -> dict:
    """Load ``folder`` on 8 fake CPU devices under ``sharding``; the memory figures."""
    import jax
    import numpy as np
    from flax import nnx

    from jaxfeed.models import from_pretrained
    from jaxfeed.models.hub import weights as hub_weights
    from jaxfeed.models.hub.files import Weights

    assert len(jax.devices()) == 8, jax.devices()
    w = Weights(folder)
    largest = max(int(np.prod(w.shape(n))) * w.dtype(n).itemsize for n in w.names())
    total = sum(int(np.prod(w.shape(n))) * w.dtype(n).itemsize for n in w.names())
    count = sum(int(np.prod(w.shape(n))) for n in w.names())
    del w
    # warm up JAX and the placement path on a tiny load, so compiling is not counted
    jax.numpy.zeros(8).block_until_ready()
    placed = [0]
    original = hub_weights._put

    def counting(chunk, device):
        out = original(chunk, device)
        out.block_until_ready()
        placed[0] += out.nbytes
        return out

    hub_weights._put = counting
    base = _status()
    samples, stop, thread = _sampler(placed)  # (rss, anon, placed)
    task = "causal-lm" if family == "llama" else None
    start = time.perf_counter()
    model = from_pretrained(folder, task=task, sharding=sharding, param_dtype=param_dtype)
    seconds = time.perf_counter() - start
    stop.set()
    thread.join()
    end = _status()
    device_bytes = sum(
        s.data.nbytes
        for x in jax.tree.leaves(nnx.state(model))
        if isinstance(x, jax.Array)
        for s in x.addressable_shards
    )
    over_rss = max(r - base["VmRSS"] - p for r, _, p in samples)
    over_anon = max(a - base["RssAnon"] - p for _, a, p in samples)
    return {
        "params": count,
        "checkpoint_bytes": total,
        "largest_tensor_bytes": largest,
        "device_bytes": device_bytes,
        "load_seconds": round(seconds, 2),
        "peak_overhead_rss_bytes": over_rss,
        "peak_overhead_anon_bytes": over_anon,
        "overhead_rss_vs_largest": round(over_rss / largest, 3),
        "overhead_anon_vs_largest": round(over_anon / largest, 3),
        "rss_growth_bytes": end["VmRSS"] - base["VmRSS"],
        "samples": len(samples),
        "sharding": sharding,
        "param_dtype": str(param_dtype or "float32"),
        "family": family,
    }


def _fresh(args: argparse.Namespace, kind: str) -> dict:
    """One measurement (``jaxfeed`` or ``transformers``) in a fresh process."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"}  # fmt: skip
    cmd = [sys.executable, __file__, "--measure", kind, "--folder", str(args.folder),
           "--sharding", args.sharding, "--family", args.family]  # fmt: skip
    cmd += ["--param-dtype", args.param_dtype] if args.param_dtype else []
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"the {kind} measurement failed ({out.returncode}): {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=["bert", "llama"], default="bert")
    parser.add_argument("--folder", type=Path, default=None,
                        help="the checkpoint's folder (default: under the temporary folder)")  # fmt: skip
    parser.add_argument("--layers", type=int, default=None,
                        help="layers (default: 24 for bert, 20 for llama)")  # fmt: skip
    parser.add_argument("--sharding", default="fsdp")
    parser.add_argument("--param-dtype", default=None, help="from_pretrained's param_dtype")
    parser.add_argument("--reference", choices=["transformers"], default=None,
                        help="also measure transformers' load of the same files")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--measure", choices=["jaxfeed", "transformers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    layers = args.layers or DEFAULT_LAYERS[args.family]
    if args.folder is None:
        name = "jaxfeed-bert-large" if args.family == "bert" else f"jaxfeed-llama-{layers}"
        args.folder = Path(tempfile.gettempdir()) / name
    if args.measure == "jaxfeed":
        print(json.dumps(measure(args.folder, args.sharding, args.family, args.param_dtype)))
        return
    if args.measure == "transformers":
        print(json.dumps(measure_transformers(args.folder, args.family)))
        return
    if not (args.folder / "model.safetensors").is_file():
        (make_llama_checkpoint if args.family == "llama" else make_checkpoint)(args.folder, layers)
    result = _fresh(args, "jaxfeed")
    mib = 1 << 20
    line = (
        f"{result['params'] / 1e6:.0f}M parameters, largest tensor "
        f"{result['largest_tensor_bytes'] / mib:.0f} MiB; peak host memory over the placed weights "
        f"while loading: {result['peak_overhead_rss_bytes'] / mib:.0f} MiB RSS "
        f"({result['overhead_rss_vs_largest']:.2f}x the largest tensor), "
        f"{result['peak_overhead_anon_bytes'] / mib:.0f} MiB anonymous "
        f"({result['overhead_anon_vs_largest']:.2f}x)"
    )
    with open("/proc/meminfo") as f:
        memory = {k: round(int(v.split()[0]) / 2**20, 1) for k, _, v in
                  (line.partition(":") for line in f) if k in ("MemTotal", "MemAvailable")}  # fmt: skip
    report = {"machine": {"cores": os.cpu_count(), "memory_gib": memory,
                          "load_average": os.getloadavg()},
              "command": " ".join(["python", *sys.argv]), "jaxfeed": result}  # fmt: skip
    if args.reference:
        ref = _fresh(args, "transformers")
        report["transformers"] = ref
        line += (
            f"\ntransformers ({ref['dtype']}): peak RSS growth {ref['peak_rss_growth_bytes'] / mib:.0f}"
            f" MiB for {ref['param_bytes'] / mib:.0f} MiB of parameters (overhead "
            f"{ref['peak_overhead_rss_bytes'] / mib:.0f} MiB RSS, "
            f"{ref['peak_overhead_anon_bytes'] / mib:.0f} MiB anonymous); jaxfeed's peak RSS "
            f"growth {max(0, result['peak_overhead_rss_bytes'] + result['device_bytes']) / mib:.0f}"
            f" MiB at most, with {result['device_bytes'] / mib:.0f} MiB on the devices"
        )
    print(json.dumps(report, indent=2))
    print(line)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
