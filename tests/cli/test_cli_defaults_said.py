"""Issue 54, item 10: the fine-tuning learning rate is described one way (README, the command
page, ``train --help``), and values the user never gave are not credited to a flag."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import PIL.Image
import pytest

from cli_helpers import jaxfeed
from hub_checkpoints import save_checkpoint
from jaxfeed import Dataset
from jaxfeed.data.features import Features, Image, Value
from jaxfeed.recipes.config import RunConfig, budget
from jaxfeed.recipes.config.model_spec import parse_model
from jaxfeed.recipes.kinds.image import ImageKind
from jaxfeed.recipes.sources.hub import HubSource
from jaxfeed.recipes.sources.hub_checkpoint import Pretrained
from jaxfeed.recipes.sources.registry import source_for

ROOT = Path(__file__).resolve().parents[2]


def test_the_fine_tuning_lr_reads_the_same_in_help_readme_and_command_page():
    done = jaxfeed("train", "--help")
    assert done.returncode == 0
    help_text = " ".join(done.stdout.split())
    assert (
        "5e-5 fine-tuning a Hub model and 2e-4 for its LoRA adapters, with --epochs 3 and a "
        "warmup over 10% of the steps" in help_text
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "(`--lr 5e-5`, `--epochs 3`, a warmup over 10% of the steps)" in readme
    page = (ROOT / "docs" / "guide" / "command.md").read_text()
    assert (
        "5e-5 for a Hub model fine-tuned and 2e-4 for its LoRA adapters (with `--epochs 3`" in page
    )
    assert "2e-5 to 5e-5 is the usual range" not in page


def test_a_checkpoint_image_size_is_credited_to_the_checkpoint(tmp_path):
    paths = []
    for i in range(2):
        paths.append(str(tmp_path / f"{i}.png"))
        PIL.Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(paths[-1])
    features = Features({"image": Image(), "label": Value("int64")})
    train = Dataset.from_dict({"image": paths, "label": [0, 1]}, features=features)
    run_data = SimpleNamespace(
        splits=SimpleNamespace(train=train),
        columns=SimpleNamespace(inputs=["image"], label="label"),
        task="classification",
    )
    config = RunConfig(image_size="16x16", image_mode="RGB")  # as the checkpoint sets them
    pretrained = Pretrained("hf:org/vit", "vit", tmp_path, image_size=(16, 16))
    _, notes = ImageKind().plan(run_data, config, pretrained)
    assert notes == [
        "images: resized to 16x16 (the size hf:org/vit takes), mode RGB (the mode hf:org/vit "
        "takes; the files are RGB)"
    ]


def test_fine_tuning_epochs_the_user_never_gave_are_not_said_given(tmp_path):
    """``--model CHECKPOINT`` without ``--epochs``: the budget line calls its 3 epochs the
    pretrained model's default, not ``(given)``; ``--batch-size``, which was given, is."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

    checkpoint = tmp_path / "tiny-bert"
    save_checkpoint(checkpoint, "bert", "masked-lm")
    data = tmp_path / "reviews.csv"
    rows = [
        f"w{5 + i % 5} w{20 + i % 7} w{30 + i % 3},{'pos' if i % 2 else 'neg'}" for i in range(40)
    ]
    data.write_text("text,label\n" + "\n".join(rows) + "\n")
    done = jaxfeed(
        "train", "--data", str(data), "--model", str(checkpoint), "--batch-size", "8",
        "--max-steps", "1", "--out", str(tmp_path / "run"), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = next(line for line in done.stdout.splitlines() if line.startswith("budget:"))
    assert "batch 8 (given)" in said, said
    assert "the 3 epochs of a pretrained model's default would make" in said, said
    assert "epochs given" not in said and "steps (given)" not in said, said


def test_the_budget_says_a_default_epoch_count_is_the_default():
    default = HubSource(parse_model("hf:org/bert")).default_epochs()
    config, plan = budget.resolve(
        RunConfig(batch_size=16), False, rows=100, batches=7, selection=True, default_epochs=default
    )
    line = plan.describe(config.monitor)
    assert config.epochs == 3 and config.patience is None  # no early stopping, as before
    assert "batch 16 (given), 3 epochs = 21 steps (a pretrained model's default)" in line, line
    assert source_for(parse_model("mlp")).default_epochs() is None
