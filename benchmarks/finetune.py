"""Fine-tuning step of Hub-size models: jaxfeed's ``Trainer`` on ``from_pretrained`` against the
same step in ``transformers`` PyTorch eager, on the same machine in the same run.

``python benchmarks/finetune.py [--models bert vit llama load] [--rounds 3] [--steps 5] [--batch 8]
[--small] [--out results.json]``

* ``bert``: a BERT-base-size random checkpoint (``BertConfig()``: 12 layers, width 768, 110M
  parameters), sequence classification, batch 8 x 128 tokens;
* ``vit``: a ViT-Base-size random checkpoint (``ViTConfig()``, 86M), image classification,
  batch 8 x 224 x 224 x 3;
* ``llama``: a Llama-shape ~100M random checkpoint (the shape ``benchmarks/generate.py`` uses:
  8 layers, width 768, MLP 2048, 12 heads / 4 key-value heads, 32000-token vocabulary, untied
  embeddings: 110M parameters), causal LM with the next-token loss (jaxfeed's
  ``loss="next_token"``, ``transformers``' ``labels=input_ids``), batch 8 x 128 tokens;
* ``load``: loading time alone of a ~335M-parameter checkpoint (BERT-large size, 1.3 GB of
  float32 safetensors, random weights written one tensor at a time by
  ``benchmarks/hub_load_memory.py``): ``jaxfeed.models.from_pretrained`` (until every weight is
  on its device) against ``transformers``' ``AutoModelForSequenceClassification.from_pretrained``
  on the same files, each in a fresh process after its imports.

``--small`` runs tiny sizes (width 64, 2 layers; a 2-layer load checkpoint): a check that the
script runs, and the first step on a machine whose free memory is unknown (a BERT-base step
with AdamW needs about 3 GB in each process). ``--out`` writes the results, with the machine's
cores, memory and library versions, as JSON (``benchmarks/results/``).

Each checkpoint is saved once by ``transformers`` under the temporary folder. Each round runs a
jaxfeed process then a PyTorch process (alternating, so a noisy period hits both): each loads the
checkpoint (timed: ``from_pretrained`` against ``transformers``' ``from_pretrained`` on the same
files), compiles/warms up, then times ``--steps`` AdamW(2e-5) steps ``--repeats`` times. Reported:
median ms per step over the rounds, the ratio (PyTorch time / jaxfeed time: above 1.0 means jaxfeed
is faster), load seconds, and each process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEQ = 128
IMAGE = 224


SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 128}  # --small: a smoke run of the script itself  # fmt: skip
LLAMA = {"hidden_size": 768, "num_hidden_layers": 8, "num_attention_heads": 12,
         "num_key_value_heads": 4, "intermediate_size": 2048, "vocab_size": 32000,
         "max_position_embeddings": 2048, "tie_word_embeddings": False}  # as benchmarks/generate.py  # fmt: skip


def checkpoint(model: str, small: bool = False) -> Path:
    """The random checkpoint of ``model`` (saved once)."""
    import transformers

    sizes = SMALL if small else {}
    folder = Path(tempfile.gettempdir()) / f"jaxfeed-finetune-{model}{'-small' if small else ''}"
    if (folder / "config.json").is_file():
        return folder
    if model == "bert":
        config = transformers.BertConfig(num_labels=2, **sizes)
        net = transformers.BertForSequenceClassification(config)
    elif model == "llama":
        extra = {**sizes, "num_key_value_heads": 1, "vocab_size": 1000} if small else {}
        net = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**LLAMA, **extra}))
    else:
        net = transformers.ViTForImageClassification(transformers.ViTConfig(num_labels=2, **sizes))
    net.save_pretrained(folder)
    return folder


def batch(model: str, size: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    labels = (np.arange(size) % 2).astype(np.int64)
    if model == "llama":  # next-token loss: the targets are the ids themselves
        ids = rng.integers(3, 1000, (size, SEQ)).astype(np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if model == "bert":
        ids = rng.integers(1000, 30000, (size, SEQ)).astype(np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "label": labels}
    return {"pixel_values": rng.standard_normal((size, 3, IMAGE, IMAGE)).astype(np.float32),
            "label": labels}  # fmt: skip


LOAD_LAYERS = 24  # BERT-large size: ~335M parameters


def load_checkpoint(small: bool = False) -> Path:
    """The ~335M-parameter random checkpoint of ``load`` (2 layers with ``small``), saved once."""
    sys.path.insert(0, str(Path(__file__).parent))
    from hub_load_memory import make_checkpoint

    layers = 2 if small else LOAD_LAYERS
    folder = Path(tempfile.gettempdir()) / f"jaxfeed-finetune-load-{layers}"
    if not (folder / "config.json").is_file():
        make_checkpoint(folder, layers)
    return folder


def run_jax_load(folder: Path) -> dict:
    import jax
    from flax import nnx

    from jaxfeed.models import from_pretrained

    jax.numpy.zeros(8).block_until_ready()  # JAX's backend started before the clock
    start = time.perf_counter()
    net = from_pretrained(folder)
    jax.block_until_ready(nnx.state(net))
    load = time.perf_counter() - start
    params = sum(x.size for x in jax.tree.leaves(nnx.state(net, nnx.Param)))
    return {"load_seconds": load, "parameters": int(params), "peak_rss": peak_rss()}


def run_torch_load(folder: Path) -> dict:
    import torch
    import transformers

    torch.zeros(8)
    start = time.perf_counter()
    net = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    load = time.perf_counter() - start
    params = sum(p.numel() for p in net.parameters())
    return {"load_seconds": load, "parameters": int(params), "peak_rss": peak_rss()}


def machine() -> dict:
    """Where the figures were measured: cores, memory, library versions."""
    import importlib.metadata as md

    memory = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                memory[key] = round(int(value.split()[0]) / 2**20, 1)
    versions = {name: md.version(name) for name in ("jax", "flax", "torch", "transformers")}
    return {"cores": os.cpu_count(), "memory_gib": memory, "load_average": os.getloadavg(),
            "versions": versions}  # fmt: skip


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_jax(model: str, folder: Path, size: int, steps: int, repeats: int) -> dict:
    import optax

    from jaxfeed import Trainer
    from jaxfeed.bench._steps import trainer_case
    from jaxfeed.models import from_pretrained

    start = time.perf_counter()
    net = from_pretrained(folder, task="causal-lm" if model == "llama" else None)
    load = time.perf_counter() - start
    data = batch(model, size)
    inputs = ({"input_ids": "input_ids", "attention_mask": "attention_mask"}
              if model in ("bert", "llama") else {"pixel_values": "pixel_values"})  # fmt: skip
    loss = {"loss": "next_token"} if model == "llama" else {}
    trainer = Trainer(net, optax.adamw(2e-5), inputs=inputs, verbose=0, **loss)
    step = trainer_case(trainer, data)
    step(2)  # compile, warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(steps)
        times.append((time.perf_counter() - start) / steps * 1e3)
    return {"ms_per_step": statistics.median(times), "load_seconds": load, "peak_rss": peak_rss()}


def run_torch(model: str, folder: Path, size: int, steps: int, repeats: int) -> dict:
    import torch
    import transformers

    auto = {"bert": transformers.AutoModelForSequenceClassification,
            "llama": transformers.AutoModelForCausalLM}.get(
        model, transformers.AutoModelForImageClassification)  # fmt: skip
    start = time.perf_counter()
    net = auto.from_pretrained(folder)
    load = time.perf_counter() - start
    net.train()
    data = {k: torch.from_numpy(v) for k, v in batch(model, size).items()}
    data["labels"] = data["input_ids"] if model == "llama" else data.pop("label")
    opt = torch.optim.AdamW(net.parameters(), lr=2e-5)

    def step(n: int) -> None:
        for _ in range(n):
            loss = net(**data).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    step(2)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(steps)
        times.append((time.perf_counter() - start) / steps * 1e3)
    return {"ms_per_step": statistics.median(times), "load_seconds": load, "peak_rss": peak_rss()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert", "vit", "load"],
                        choices=["bert", "vit", "llama", "load"])  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--small", action="store_true", help="tiny models: check the script runs")
    parser.add_argument("--out", help="write the results (and the machine's figures) as JSON")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # (jax|torch, model)
    args = parser.parse_args()
    if args.worker:
        kind, model = args.worker
        if model == "load":
            run_load = run_jax_load if kind == "jax" else run_torch_load
            out = run_load(load_checkpoint(args.small))
        else:
            run = run_jax if kind == "jax" else run_torch
            out = run(model, checkpoint(model, args.small), args.batch, args.steps, args.repeats)
        print(json.dumps(out))
        return
    results: dict = {"machine": machine(), "options": vars(args)}
    for model in args.models:
        load_checkpoint(args.small) if model == "load" else checkpoint(model, args.small)
        runs: dict[str, list[dict]] = {"jax": [], "torch": []}
        for _ in range(args.rounds):
            for kind in ("jax", "torch"):
                cmd = [sys.executable, __file__, "--worker", kind, model, "--steps", str(args.steps),
                       "--repeats", str(args.repeats), "--batch", str(args.batch)]  # fmt: skip
                cmd += ["--small"] if args.small else []
                done = subprocess.run(cmd, capture_output=True, text=True,
                                      env={**os.environ, "JAX_PLATFORMS": "cpu"})  # fmt: skip
                if done.returncode != 0:
                    sys.exit(f"{model} ({kind}) failed ({done.returncode}): {done.stderr[-2000:]}")
                runs[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
        summary: dict = {
            kind: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
            for kind, rs in runs.items()
        }
        summary["runs"] = runs
        j, t = summary["jax"], summary["torch"]
        if model == "load":
            summary["ratio_torch_over_jaxfeed"] = t["load_seconds"] / j["load_seconds"]
            print(
                f"load ({j['parameters'] / 1e6:.0f}M parameters): jaxfeed {j['load_seconds']:.2f} "
                f"s, transformers {t['load_seconds']:.2f} s: "
                f"{summary['ratio_torch_over_jaxfeed']:.2f}x; peak RSS "
                f"{j['peak_rss'] / 2**30:.2f} GiB vs {t['peak_rss'] / 2**30:.2f} GiB"
            )
        else:
            summary["ratio_torch_over_jaxfeed"] = t["ms_per_step"] / j["ms_per_step"]
            print(
                f"{model}: jaxfeed {j['ms_per_step']:.0f} ms/step, PyTorch eager "
                f"{t['ms_per_step']:.0f} ms/step: {summary['ratio_torch_over_jaxfeed']:.2f}x; "
                f"load {j['load_seconds']:.1f} s vs {t['load_seconds']:.1f} s; peak RSS "
                f"{j['peak_rss'] / 2**30:.2f} GiB vs {t['peak_rss'] / 2**30:.2f} GiB"
            )
        results[model] = summary
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
