"""Issue 54, item 5: a small image folder whose classes differ by shape only (squares against
discs of random colours, sizes and places: ``benchmarks/quality.py``'s ``shapes`` case) is learnt
by ``jaxfeed train`` with no flag. The article's CNN (two blocks, flattened, BatchNorm after the
ReLU) in 200 steps reached 0.59 to 0.73 on it; the built-in ``cnn`` is now three blocks averaged
over their positions with BatchNorm before the ReLU, and an augmented run sees at least 8,000
images (1,000 steps of 8 here), without early stopping and with BatchNorm's momentum at 0.9."""

import json

import numpy as np
import pytest
from flax import nnx

from cli_helpers import train_with_defaults
from jaxfeed.bench.small_data import shape_folder
from jaxfeed.models import CNN
from jaxfeed.recipes.config import RunConfig, budget
from jaxfeed.recipes.kinds.array import ArrayKind
from jaxfeed.recipes.kinds.image import IMAGE_CNN, Augmented, ImageKind, augmented_floor
from jaxfeed.recipes.spec import INPUTS, Preprocessing


@pytest.mark.slow
def test_defaults_learn_squares_against_discs(tmp_path):
    """The quality benchmark's shapes folder (44 train images) with 25 test images a class
    instead of 50 (the figure's resolution is 0.02; the training, the cost, is the same)."""
    data = shape_folder(tmp_path / "shapes", test=25)
    out = tmp_path / "run"
    said, test = train_with_defaults(data, out)
    assert (
        "budget: 39 train rows: batch 8 (about a tenth of the rows), 200 epochs = 1000 steps (a "
        "floor of 1000 optimizer steps; augmented images: 8,000 seen at least, no early stopping "
        "before it)\n"
    ) in said
    assert "model cnn(widths=[32, 64, 128], head='mean', norm='before') (nnx)" in said
    # the quality benchmark's figure over seeds 0-4 is 0.91-0.99 (benchmarks page); a machine
    # whose float rounding differs trains another trajectory, so this guards the 0.59-0.73 of the
    # old defaults without betting on one seed's 0.95
    assert test["test_accuracy"] >= 0.85, said[-3000:]
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["model"] == {"class_path": "cnn", "init_args": IMAGE_CNN}
    assert saved["budget"]["floor"] == 1000


def test_a_new_image_run_records_the_built_in_cnn_s_design_and_a_resumed_one_keeps_its_own():
    kind = ImageKind()
    new = kind.before_plan(RunConfig(), resumed=False)
    assert new.model == {"class_path": "cnn", "init_args": IMAGE_CNN}
    given = RunConfig(model={"class_path": "cnn", "init_args": {"head": "flatten"}})
    assert kind.before_plan(given, resumed=False).model["init_args"] == {
        **IMAGE_CNN, "head": "flatten"
    }  # fmt: skip
    # a run recorded before the defaults changed rebuilds the model it trained
    old = RunConfig(model={"class_path": "cnn", "init_args": {"momentum": 0.5}})
    assert kind.before_plan(old, resumed=True).model == old.model
    assert kind.before_plan(RunConfig(model="mlp"), resumed=False).model == "mlp"
    # arrays (the digits demo, mnist, cifar10) keep the article's model
    assert ArrayKind().before_plan(RunConfig(), resumed=False).model is None


def test_the_cnn_class_keeps_the_article_s_model_and_builds_the_command_s():
    """The class's defaults are the article's parameters (old checkpoints and the PyTorch twin);
    the command's design averages the last map, so its dense layer does not grow with the image."""

    def shapes(*args, **kwargs):
        """The parameters' shapes of ``CNN(*args, **kwargs)``, built abstractly (nnx.eval_shape:
        no initialiser runs, nothing compiles)."""
        model = nnx.eval_shape(lambda: CNN(*args, rngs=nnx.Rngs(0), **kwargs))
        return {
            ".".join(map(str, path)): tuple(value.shape)
            for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param))
        }

    article = shapes(10, (28, 28, 1))
    assert article["conv2.kernel"] == (3, 3, 32, 64) and article["linear1.kernel"] == (3136, 128)
    assert sorted({k.split(".")[0] for k in article}) == [
        "bn1", "bn2", "conv1", "conv2", "linear1", "linear2"
    ]  # fmt: skip
    ours = shapes(2, (24, 24, 3), **IMAGE_CNN)
    assert ours["conv3.kernel"] == (3, 3, 64, 128) and ours["linear1.kernel"] == (128, 128)
    big = shapes(2, (96, 96, 3), **IMAGE_CNN)
    assert big == ours
    with pytest.raises(ValueError, match="head in"):
        CNN(2, (24, 24, 3), head="max", rngs=nnx.Rngs(0))


def test_an_augmented_run_sees_8000_images_at_least():
    """39 images at batch 8 (5 steps an epoch): 200 epochs, not 40; no early stopping (a
    validation split of 5 images is too noisy to stop on) and BatchNorm keeps its momentum of 0.9
    (the budget's 0.5 made the statistics follow the last two batches: the quality benchmark's
    shapes reached 0.95, 0.94, 0.94 test accuracy over three seeds, 0.99, 0.95, 0.99 at 0.9);
    batches of 64 keep the budget's floor of 200 steps, its early stopping and its momentum."""
    config = RunConfig(model="cnn", batch_size=8)
    config, plan = budget.resolve(config, True, 39, 5, True, floor=augmented_floor(8))
    assert (config.epochs, plan.steps, plan.floor, config.patience) == (200, 1000, 1000, None)
    assert plan.momentum is None and config.model == "cnn"
    line = plan.describe("eval_loss", "images")
    assert (
        "200 epochs = 1000 steps (a floor of 1000 optimizer steps; augmented images: 8,000 seen "
        "at least, no early stopping before it)"
    ) in line and "early stopping after" not in line
    config = RunConfig(model="cnn", batch_size=64)
    config, plan = budget.resolve(config, True, 441, 7, True, floor=augmented_floor(64))
    assert (config.epochs, config.patience) == (29, 6) and not plan.floor_holds
    assert plan.momentum == config.model["init_args"]["momentum"] == 0.518
    assert augmented_floor(64)[0] == budget.STEP_FLOOR and augmented_floor(16, 2)[0] == 250


def test_a_crop_pads_with_the_edge_pixels_not_black():
    """Zeros would draw a straight dark border into the image: an edge of no shape."""
    prep = Preprocessing("array", ["x"], "y", [8, 8, 3], "classification")
    batch = {"x": np.full((16, 8, 8, 3), 200, np.uint8), "y": np.zeros(16, np.int64)}
    out = Augmented(prep, ["crop"])(batch, np.random.default_rng(0))
    assert out[INPUTS].min() == 200
