"""Issue 54, item 4: a text classifier compiles few step shapes (each is seconds of compiling and
memory kept), and its budget line says the cost it expects, counted from the model and its
padded rows and timed against this machine."""

from __future__ import annotations

import json
import random
import re

import pytest

from cli_helpers import jaxfeed

SMALL = ["--model", "transformer", "--model.init_args.dim", "16", "--model.init_args.depth", "1",
         "--model.init_args.num_heads", "2"]  # fmt: skip


def write_long_tailed(path, rows: int = 800, seed: int = 0):
    """Texts of 4 classes (one word gives each away), most of 5-30 words, one in eight of
    100-160: as paragraphs of licences are."""
    rng = random.Random(seed)
    lines = ["text,label"]
    for i in range(rows):
        label = i % 4
        words = [f"w{rng.randint(10, 60)}" for _ in range(rng.randint(5, 30))]
        if rng.random() < 0.125:
            words += [f"w{rng.randint(10, 60)}" for _ in range(rng.randint(100, 160))]
        words.insert(rng.randrange(len(words)), f"k{label}")
        lines.append(f"{' '.join(words)},c{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cost")
    data = write_long_tailed(folder / "paragraphs.csv")
    done = jaxfeed(
        "train", "--data", str(data), "--val-split", "0.25", "--batch-size", "8", "--epochs", "1",
        "--vocab-size", "300", *SMALL, "--out", str(folder / "run"),
        env={"JAX_LOG_COMPILES": "1"}, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done, folder / "run"


def compiled(stderr: str, name: str) -> list[str]:
    """The shapes JAX compiled ``name`` for (JAX_LOG_COMPILES' lines)."""
    return re.findall(rf"Compiling jit\({name}\) with global shapes and types \((.*?)\)\.", stderr)


def test_the_validation_split_compiles_one_evaluation_shape(run):
    done, _ = run
    padding = next(line for line in done.stdout.splitlines() if line.startswith("padding:"))
    assert padding.startswith("padding: to 2 lengths"), padding  # 75 train batches: 2 lengths
    assert len(compiled(done.stderr, "train_step")) == 2, done.stderr[-3000:]
    # 25 validation batches padded to the longest length alone: one more compile, not two
    assert len(compiled(done.stderr, "eval_step")) == 1, compiled(done.stderr, "eval_step")


def test_the_budget_line_says_the_cost_it_expects(run):
    done, out = run
    budget = next(line for line in done.stdout.splitlines() if line.startswith("budget:"))
    found = re.search(
        r"expected at most (\d[\d.]*) (s|min|h) of steps here \(([\d.]+) (G|T)FLOP at ([\d.,]+) "
        r"GFLOP/s: 25% of the ([\d.,]+) GFLOP/s a matmul timed on this machine gave; compiling "
        r"adds to it\)",
        budget,
    )
    assert found, budget
    recorded = json.loads((out / "config.json").read_text())["budget"]
    assert recorded["epoch_flops"] > 0 and recorded["matmul_rate"] > 1e8
    seconds = recorded["epoch_flops"] / (0.25 * recorded["matmul_rate"])  # one epoch
    shown = float(found[1]) * {"s": 1, "min": 60, "h": 3600}[found[2]]
    assert shown == pytest.approx(max(1.0, seconds), rel=0.06, abs=0.6)  # a wait under 1 s: '1 s'
