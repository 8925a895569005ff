"""``python benchmarks/generate.py``: generation speed of ``jaxfeed.text.generate`` (KV cache)
against ``transformers`` PyTorch ``generate`` on the same random weights, same machine, same run.

Two random-weight checkpoints are saved with ``transformers`` into a temporary folder and loaded
by ``jaxfeed.models.from_pretrained``: a GPT-2-small-size model (124M parameters) and a
Llama-shape ~100M model (GQA, untied embeddings). For batch 1 and 8, prompts of 128 random
tokens, 128 new tokens, greedy (every row runs the full 128: no end-of-sequence id):

* new tokens per second (batch x 128 / wall time of the whole call), median of ``--repeats``;
* time to the first token (a call with ``max_new_tokens=1``: prefill and one step), median;
* the old whole-buffer loop (``use_cache=False``) for ``--old-new`` new tokens (default 16) at
  batch 1 (``--old-batches``): its cost grows with the square of the length, 128 new tokens
  would take minutes; one timed call after the warm-up.

jaxfeed runs through ``jaxfeed.train.generation.generate_ids`` (the token-level core of
``jaxfeed.text.generate``: no tokenizer in the loop, as ``transformers`` is given ids). Compile
time is excluded (one warm-up call per shape) for both. Timings are wall-clock and noisy on a
shared machine; read the ratio measured in the same run.

Both libraries get ``--threads`` CPU threads (default 1: on a shared machine with more busy
processes than cores, PyTorch's spinning OpenMP threads run 10x slower than one thread).

Run: ``python benchmarks/generate.py [--repeats 3] [--threads 1] [--quick] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT, NEW = 128, 128


def configs(quick: bool) -> dict[str, tuple[str, str, dict]]:
    if quick:  # a smoke run of the script itself
        return {
            "gpt2-tiny": ("GPT2Config", "GPT2LMHeadModel",
                          {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000,
                           "n_positions": 512}),
            "llama-tiny": ("LlamaConfig", "LlamaForCausalLM",
                           {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "intermediate_size": 128,
                            "vocab_size": 1000, "max_position_embeddings": 512}),
        }  # fmt: skip
    return {
        "gpt2-small (124M)": ("GPT2Config", "GPT2LMHeadModel", {}),  # transformers' defaults
        "llama-shape (~100M)": ("LlamaConfig", "LlamaForCausalLM",
                                {"hidden_size": 768, "num_hidden_layers": 8,
                                 "num_attention_heads": 12, "num_key_value_heads": 4,
                                 "intermediate_size": 2048, "vocab_size": 32000,
                                 "max_position_embeddings": 2048,
                                 "tie_word_embeddings": False}),
    }  # fmt: skip


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up: compilation (jaxfeed) or first-call allocations (PyTorch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--old-new", type=int, default=16, help="new tokens for the old no-cache loop (0: skip it)"
    )
    parser.add_argument("--old-batches", type=int, nargs="+", default=[1],
                        help="batch sizes for the old no-cache loop (slow: quadratic)")  # fmt: skip
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads for both PyTorch and XLA (0: each library's default; "
        "on a shared, oversubscribed machine PyTorch's spinning threads lose 10x)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny models: check the script")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    if args.threads:  # before JAX starts
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_cpu_multi_thread_eigen=false "
            f"intra_op_parallelism_threads={args.threads}"
        ).strip()
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)

    from jaxfeed.models import from_pretrained
    from jaxfeed.train.generation import generate_ids

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config_name, model_name, extra) in configs(args.quick).items():
            torch.manual_seed(0)
            config = getattr(transformers, config_name)(**extra)
            torch_model = getattr(transformers, model_name)(config).eval()
            folder = Path(tmp) / model_name
            torch_model.save_pretrained(folder)
            model = from_pretrained(folder, task="causal-lm")
            params = sum(p.numel() for p in torch_model.parameters()) / 1e6
            for batch in args.batches:
                rng = np.random.default_rng(batch)
                prompts = rng.integers(3, config.vocab_size, (batch, PROMPT))
                ids = torch.tensor(prompts)
                mask = torch.ones_like(ids)
                listed = prompts.tolist()

                def hf(new: int, ids=ids, mask=mask, torch_model=torch_model):
                    with torch.no_grad():
                        return torch_model.generate(input_ids=ids, attention_mask=mask,
                                                    do_sample=False, max_new_tokens=new,
                                                    min_new_tokens=new, pad_token_id=0)  # fmt: skip

                def jf(new: int, cache: bool = True, listed=listed, model=model):
                    return generate_ids(model, listed, new, temperature=0, use_cache=cache)

                ours = jf(NEW).tokens
                theirs = hf(NEW)[:, PROMPT:].tolist()
                same = sum(a == b for a, b in zip(ours, theirs, strict=True))
                row = {
                    "model": name, "params_m": round(params, 1), "batch": batch,
                    "jaxfeed_tok_s": batch * NEW / median_time(lambda: jf(NEW), args.repeats),
                    "torch_tok_s": batch * NEW / median_time(lambda: hf(NEW), args.repeats),
                    "jaxfeed_ttft_ms": 1e3 * median_time(lambda: jf(1), args.repeats),
                    "torch_ttft_ms": 1e3 * median_time(lambda: hf(1), args.repeats),
                    "greedy_rows_identical": f"{same}/{batch}",
                }  # fmt: skip
                if args.old_new and batch in args.old_batches:
                    old = median_time(lambda: jf(args.old_new, cache=False), 1)
                    row["old_no_cache_tok_s"] = batch * args.old_new / old
                row["ratio"] = row["jaxfeed_tok_s"] / row["torch_tok_s"]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)

    head = ("| model | batch | jaxfeed tok/s | torch tok/s | ratio | jaxfeed TTFT ms | "
            "torch TTFT ms | old no-cache tok/s | greedy rows identical |")  # fmt: skip
    print(head)
    print("|" + "---|" * 9)
    for r in rows:
        old = f"{r['old_no_cache_tok_s']:.1f}" if "old_no_cache_tok_s" in r else "-"
        print(f"| {r['model']} | {r['batch']} | {r['jaxfeed_tok_s']:.1f} | {r['torch_tok_s']:.1f} "
              f"| {r['ratio']:.2f}x | {r['jaxfeed_ttft_ms']:.0f} | {r['torch_ttft_ms']:.0f} "
              f"| {old} | {r['greedy_rows_identical']} |")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
