"""``jaxfeed train --lr auto`` in its own process: with a Hub checkpoint (the documented use) the
range test runs and the fine-tuning line says so (it failed formatting "auto" as a number), and
a curve without a slope (labels nothing can predict) falls back to the default rate, named,
instead of reading a rate off noise."""

import json
import random

import numpy as np
import pytest

from cli_helpers import jaxfeed


def test_lr_auto_with_a_hub_checkpoint_runs_the_range_test(tmp_path):
    pytest.importorskip("torch")
    from hub_checkpoints import save_checkpoint

    ckpt = tmp_path / "tiny-bert"
    save_checkpoint(ckpt, "bert", "sequence-classification", num_labels=2)
    rng = random.Random(0)
    rows = []
    for _ in range(64):
        label = rng.choice(["neg", "pos"])
        words = [f"w{rng.randint(20, 44)}" for _ in range(4)] + [f"w{5 if label == 'pos' else 10}"]
        rows.append(f"{' '.join(words)},{label}\n")
    data = tmp_path / "reviews.csv"
    data.write_text("review,stars\n" + "".join(rows))
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), "--text-column", "review", "--label-column",
                   "stars", "--model", str(ckpt), "--lr", "auto", "--epochs", "1",
                   "--batch-size", "8", "--out", str(out), timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fine-tuning: --lr auto (a range test picks it), --epochs 1" in done.stdout
    assert "--lr auto: " in done.stdout
    saved = json.loads((out / "config.json").read_text())
    assert isinstance(saved["options"]["lr"], float) and saved["options"]["lr"] > 0


def test_lr_auto_without_a_slope_uses_the_default_rate_and_says_so(tmp_path):
    rng = np.random.default_rng(0)
    x, labels = rng.normal(size=(200, 2)), rng.integers(0, 2, 200)  # labels unrelated to x
    table = tmp_path / "t.csv"
    rows = [f"{a:.3f},{b:.3f},{y}\n" for (a, b), y in zip(x, labels, strict=True)]
    table.write_text("a,b,label\n" + "".join(rows))
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(table), "--lr", "auto", "--epochs", "1", "--out",
                   str(out), timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = next(s for s in done.stdout.splitlines() if s.startswith("--lr auto: "))
    assert "found no slope" in line and "so the default --lr 0.001 is used" in line, line
    curve = json.loads((out / "lr_finder.json").read_text())
    assert curve["lr"] == 0.001 and curve["fallback"] == "default" and not curve["slope"]
    assert curve["loss_drop"] < 0.05
    assert json.loads((out / "config.json").read_text())["options"]["lr"] == 0.001
