"""Metrics over the whole eval split (F1, precision, recall, AUC, R², RMSE) in the Trainer, and
as the monitor of the best checkpoint."""

import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Dataset, EarlyStopping, Trainer, load_dataset
from jaxfeed.models import MLP
from jaxfeed.train import scale_images
from jaxfeed.train.checkpoint import CheckpointManager
from jaxfeed.train.metrics import SplitMetric, f1, precision, r2, recall, roc_auc


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_f1_and_auc_are_over_the_whole_split_not_a_mean_of_batches(digits, tmp_path):
    model = MLP(10, input_shape=(8, 8), hidden=(32,), rngs=nnx.Rngs(0))
    trainer = Trainer(
        model, optax.adam(3e-3), preprocess=scale_images, verbose=0,
        metrics=["accuracy", "f1", "precision", "recall", "auc"],
    )  # fmt: skip
    train = DataLoader(digits["train"], 64, shuffle=True, seed=0)
    test = DataLoader(digits["test"], 100)  # 360 rows: batches of 100, 100, 100, 60
    history = trainer.fit(
        train, test, epochs=3, checkpoint_dir=tmp_path / "ck",
        checkpoint_options={"best_metric": "eval_f1"},
    )  # fmt: skip
    assert {"eval_f1", "eval_auc", "eval_precision", "eval_recall"} <= set(history[-1])
    assert "train_f1" not in history[-1]  # whole-split metrics are computed on evaluation
    result = trainer.evaluate(test)
    outputs = np.asarray(trainer.predict(test))
    labels = np.asarray(digits["test"].with_format("numpy")["label"])
    assert result["f1"] == pytest.approx(f1(outputs, labels), abs=1e-9)
    assert result["precision"] == pytest.approx(precision(outputs, labels), abs=1e-9)
    assert result["recall"] == pytest.approx(recall(outputs, labels), abs=1e-9)
    assert result["auc"] == pytest.approx(roc_auc(outputs, labels), abs=1e-9)
    per_batch = [f1(outputs[i : i + 100], labels[i : i + 100]) for i in range(0, 360, 100)]
    assert abs(np.mean(per_batch) - result["f1"]) > 1e-4  # what a per-batch mean would report
    # one best rule: the checkpoint manager, History.best and EarlyStopping agree on eval_f1
    with CheckpointManager(tmp_path / "ck", best_metric="eval_f1") as ckpt:
        assert ckpt.best_mode == "max"
        assert ckpt.meta(ckpt.best_step)["epoch"] == history.best("eval_f1")["epoch"]
    assert EarlyStopping("eval_f1").mode == "max" and EarlyStopping().monitor == "eval_loss"


def test_metrics_against_hand_computed_values():
    truth = np.array([0, 0, 1, 1, 2, 2])
    logits = np.eye(3)[[0, 1, 1, 1, 2, 0]]  # predicted: 0 1 1 1 2 0
    # class 0: p 1/2 r 1/2; class 1: p 2/3 r 1; class 2: p 1 r 1/2
    assert precision(logits, truth) == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert recall(logits, truth) == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)
    assert f1(logits, truth) == pytest.approx((1 / 2 + 0.8 + 2 / 3) / 3)
    scores = np.array([0.1, 0.4, 0.35, 0.8])  # the classic example: AUC 0.75
    assert roc_auc(scores, np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    assert roc_auc(np.array([0.5, 0.5]), np.array([0, 1])) == pytest.approx(0.5)  # a tie: half
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert r2(y, y) == 1.0 and r2(np.full(4, y.mean()), y) == pytest.approx(0.0)


def test_regression_r2_and_a_custom_split_metric():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.1 * rng.normal(size=300)).astype(np.float32)
    data = Dataset.from_dict({"x": x, "y": y})

    class Linear(nnx.Module):
        def __init__(self, *, rngs):
            self.linear = nnx.Linear(3, 1, rngs=rngs)

        def __call__(self, x):
            return self.linear(x)[:, 0]

    largest = SplitMetric(lambda o, t: float(np.abs(o - t).max()), classification=False)
    trainer = Trainer(
        Linear(rngs=nnx.Rngs(0)), optax.adam(0.05), loss="mse", inputs="x", targets="y",
        metrics={"mae": "mae", "r2": "r2", "max_error": largest}, verbose=0,
    )  # fmt: skip
    history = trainer.fit(DataLoader(data, 32, shuffle=True), DataLoader(data, 64), epochs=15)
    out = np.asarray(trainer.predict(DataLoader(data, 64)))
    result = trainer.evaluate(DataLoader(data, 64))
    assert result["r2"] == pytest.approx(r2(out, y), abs=1e-6) and result["r2"] > 0.95
    assert result["max_error"] == pytest.approx(np.abs(out - y).max(), rel=1e-6)
    assert history.best("eval_r2") is max(history, key=lambda r: r["eval_r2"])
