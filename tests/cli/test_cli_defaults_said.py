"""Issue 54, item 10: the fine-tuning learning rate is described one way (README, the command
page, ``train --help``), and values the user never gave are not credited to a flag."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import PIL.Image

from cli_helpers import jaxfeed
from jaxfeed import Dataset
from jaxfeed.data.features import Features, Image, Value
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.image import ImageKind

ROOT = Path(__file__).resolve().parents[2]


def test_the_fine_tuning_lr_reads_the_same_in_help_readme_and_command_page():
    done = jaxfeed("train", "--help")
    assert done.returncode == 0
    help_text = " ".join(done.stdout.split())
    assert "5e-5 fine-tuning a Hub model, with --epochs 3 and a warmup over 10% of the steps" in (
        help_text
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "(`--lr 5e-5`, `--epochs 3`, a warmup over 10% of the steps)" in readme
    page = (ROOT / "docs" / "guide" / "command.md").read_text()
    assert "5e-5 for a Hub model fine-tuned (with `--epochs 3`" in page
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
    checkpoint = SimpleNamespace(spec="hf:org/vit")
    _, notes = ImageKind().plan_pretrained(checkpoint, run_data, config)
    assert notes == [
        "images: resized to 16x16 (the size hf:org/vit takes), mode RGB (the mode hf:org/vit "
        "takes; the files are RGB)"
    ]
