"""Peak host memory while ``jaxfeed.models.from_pretrained`` loads a ~300M-parameter checkpoint
onto 8 (fake CPU) devices with FSDP, against the largest single tensor.

``python benchmarks/hub_load_memory.py [--folder DIR] [--layers 24] [--sharding fsdp]``

The checkpoint (BERT-large size by default: 24 layers, width 1024, MLP 4096, 30522-token
vocabulary, ~335M parameters, 1.3 GB in float32) is written once with random weights, one tensor
in memory at a time, to ``DIR`` (default: a folder under the system's temporary folder). The
load then runs in a fresh process that samples its resident memory (``/proc/self/status``) every
millisecond, and counts the bytes already placed on the devices (which, on CPU devices, also live
in host memory). The figure reported is the *overhead*: the largest value over the load of
``RSS - RSS before loading - bytes placed on devices so far``, next to the largest tensor. On CPU
devices the file pages a memory map touches count in RSS while mapped; they are reported both
with (``RSS``) and without (``anonymous``) them.
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

SIZES = {"vocab_size": 30522, "hidden_size": 1024, "num_hidden_layers": 24,
         "num_attention_heads": 16, "intermediate_size": 4096,
         "max_position_embeddings": 512, "type_vocab_size": 2}  # fmt: skip


class _Random:
    """A tensor written by ``write_safetensors`` without existing before: random float32 values
    made when its bytes are asked for."""

    def __init__(self, shape: tuple[int, ...], seed: int) -> None:
        import numpy as np

        self.shape, self.dtype, self.seed = shape, np.dtype(np.float32), seed

    def __array__(self, dtype=None, copy=None):
        import numpy as np

        rng = np.random.default_rng(self.seed)
        return (0.02 * rng.standard_normal(self.shape, dtype=np.float32)).astype(
            dtype or np.float32
        )


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


def measure(folder: Path, sharding: str) -> dict:
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
    samples: list[tuple[int, int, int]] = []  # (rss, anon, placed)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            s = _status()
            samples.append((s["VmRSS"], s["RssAnon"], placed[0]))
            time.sleep(0.001)

    base = _status()
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    model = from_pretrained(folder, sharding=sharding)
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
        "params": total // 4,
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--folder", type=Path, default=Path(tempfile.gettempdir()) / "jaxfeed-bert-large"
    )
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--sharding", default="fsdp")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.folder, args.sharding)))
        return
    if not (args.folder / "model.safetensors").is_file():
        make_checkpoint(args.folder, args.layers)
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, __file__, "--measure", "--folder", str(args.folder), "--sharding", args.sharding],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    print(json.dumps(result, indent=2))
    print(
        f"{result['params'] / 1e6:.0f}M parameters, largest tensor "
        f"{result['largest_tensor_bytes'] / mib:.0f} MiB; peak host memory over the placed weights "
        f"while loading: {result['peak_overhead_rss_bytes'] / mib:.0f} MiB RSS "
        f"({result['overhead_rss_vs_largest']:.2f}x the largest tensor), "
        f"{result['peak_overhead_anon_bytes'] / mib:.0f} MiB anonymous "
        f"({result['overhead_anon_vs_largest']:.2f}x)"
    )


if __name__ == "__main__":
    main()
