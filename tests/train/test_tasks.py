"""Any supervised task: inputs/targets forms, losses, metrics, optimizers, precision, labels."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from flax import nnx

from jaxfeed import ClassLabel, DataLoader, Dataset, Features, Trainer
from jaxfeed.train.cores import CallConvention


def regression_data(rows=100, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    b = rng.normal(size=(rows, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + b.sum(1)).astype(np.float32)
    return Dataset.from_dict({"x": x, "b": b, "y": y})


class Linear(nnx.Module):
    def __init__(self, n_in, n_out, *, rngs):
        self.dense = nnx.Linear(n_in, n_out, rngs=rngs)

    def __call__(self, x):
        return self.dense(x)


class TwoInputs(nnx.Module):
    def __init__(self, *, rngs):
        self.a = nnx.Linear(4, 1, rngs=rngs)
        self.b = nnx.Linear(2, 1, rngs=rngs)

    def __call__(self, x, extra):
        return (self.a(x) + self.b(extra))[:, 0]


def test_regression_mse_has_no_accuracy_and_values_match_predictions():
    data = regression_data()
    train, test = DataLoader(data, 32, shuffle=True, seed=0), DataLoader(data, 64)
    trainer = Trainer(Linear(4, 1, rngs=nnx.Rngs(0)), optax.adam(0.05), loss="mse",
                      metrics=["mae"], inputs="x", targets="y", verbose=0)  # fmt: skip
    history = trainer.fit(train, test, epochs=30)
    assert "train_accuracy" not in history[0] and "eval_accuracy" not in history[0]
    assert history[-1]["train_loss"] < 0.1 * history[0]["train_loss"]
    y = np.asarray(data.with_format("numpy")["y"])
    predicted = np.asarray(trainer.predict(test))[:, 0]
    result = trainer.evaluate(test)  # 100 rows in batches of 64: the padded rows are masked
    assert result["loss"] == pytest.approx(np.mean((predicted - y) ** 2), rel=1e-4)
    assert result["mae"] == pytest.approx(np.mean(np.abs(predicted - y)), rel=1e-4)
    plain = Trainer(Linear(4, 1, rngs=nnx.Rngs(0)), optax.adam(0.05), loss="huber",
                    inputs="x", targets="y", verbose=0)  # fmt: skip
    assert set(plain.fit(train, epochs=1)[0]) == {"epoch", "train_loss", "seconds", "rows_per_second", "data_wait"}  # fmt: skip


def test_two_inputs_custom_loss_and_metrics():
    data = regression_data(96)
    calls = []

    def loss(outputs, batch):
        calls.append(outputs.shape)
        return jnp.abs(outputs - batch["y"])

    def within_one(outputs, batch):
        return (jnp.abs(outputs - batch["y"]) < 1.0).astype(jnp.float32)

    for inputs in (("x", "b"), {"x": "x", "extra": "b"}):
        trainer = Trainer(TwoInputs(rngs=nnx.Rngs(0)), optax.adam(0.05), loss=loss, inputs=inputs,
                          targets="y", metrics={"close": within_one, "sq": "mse"}, verbose=0)  # fmt: skip
        loader = DataLoader(data, 40)  # 96 = 40 + 40 + 16: the last batch is padded
        history = trainer.fit(loader, loader, epochs=40)
        assert history[-1]["train_loss"] < 0.5 * history[0]["train_loss"]
        assert {"train_close", "train_sq", "eval_close", "eval_sq", "eval_loss"} <= set(history[-1])
        out = np.asarray(trainer.predict(loader))
        y = np.asarray(data.with_format("numpy")["y"])
        assert out.shape == (96,)
        assert history[-1]["eval_loss"] == pytest.approx(np.mean(np.abs(out - y)), rel=1e-4)
        assert history[-1]["eval_close"] == pytest.approx(np.mean(np.abs(out - y) < 1), abs=1e-6)
    assert calls and all(shape == (40,) for shape in calls)


def test_classification_metrics_topk_and_binary():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    label = (x[:, :5].argmax(1)).astype(np.int64)
    data = Dataset.from_dict({"x": x, "label": label})
    loader = DataLoader(data, 50)
    trainer = Trainer(Linear(6, 5, rngs=nnx.Rngs(0)), optax.adam(0.02), inputs="x",
                      metrics=["accuracy", "top2_accuracy"], verbose=0)  # fmt: skip
    history = trainer.fit(loader, loader, epochs=3)
    logits = np.asarray(trainer.predict(loader))
    ranks = (logits > logits[np.arange(120), label][:, None]).sum(1)
    assert history[-1]["eval_accuracy"] == pytest.approx(
        np.mean(logits.argmax(1) == label), abs=1e-6
    )
    assert history[-1]["eval_top2_accuracy"] == pytest.approx(np.mean(ranks < 2), abs=1e-6)
    binary = Dataset.from_dict({"x": x, "target": (x[:, 0] > 0).astype(np.float32)})
    loader = DataLoader(binary, 50)
    trainer = Trainer(Linear(6, 1, rngs=nnx.Rngs(0)), optax.adam(0.05), loss="binary_cross_entropy",
                      inputs="x", targets="target", verbose=0)  # fmt: skip
    history = trainer.fit(loader, loader, epochs=20)
    assert history[-1]["eval_accuracy"] > 0.9
    out = np.asarray(trainer.predict(loader))[:, 0]
    assert history[-1]["eval_accuracy"] == pytest.approx(
        np.mean((out > 0) == (x[:, 0] > 0)), abs=1e-6
    )
    with pytest.raises(ValueError, match=r"unknown metric 'bleu'.*'f1'"):
        Trainer(Linear(6, 1, rngs=nnx.Rngs(0)), optax.adam(0.1), metrics=["bleu"])


def test_call_convention_polarity():
    assert CallConvention.inspect(lambda x, train=True: x).kwargs(train=False) == {"train": False}
    assert CallConvention.inspect(lambda x, deterministic=False: x).kwargs(train=True) == {
        "deterministic": False
    }
    assert CallConvention.inspect(lambda x, deterministic=False: x).kwargs(train=False) == {
        "deterministic": True
    }
    assert CallConvention.inspect(lambda x: x).kwargs(train=True, rngs="r") == {}

    seen = []

    class Flagged(nnx.Module):
        def __init__(self, *, rngs):
            self.dense = nnx.Linear(4, 1, rngs=rngs)

        def __call__(self, x, deterministic: bool = False):
            seen.append(deterministic)
            return self.dense(x)[:, 0] + (0.0 if deterministic else 100.0)

    data = regression_data(32)
    trainer = Trainer(Flagged(rngs=nnx.Rngs(0)), optax.sgd(0.0), loss="mse", inputs="x",
                      targets="y", verbose=0)  # fmt: skip
    trainer.fit(DataLoader(data, 32), epochs=1)
    assert seen == [False]  # traced once, in training
    out = trainer.predict(DataLoader(data, 32))
    assert seen == [False, True] and float(jnp.abs(out).max()) < 50


class Counting(nn.Module):
    """A Linen module with a `training` flag and a collection besides batch_stats."""

    @nn.compact
    def __call__(self, x, training: bool = False):
        calls = self.variable("counters", "calls", lambda: jnp.zeros((), jnp.int32))
        if training:
            calls.value += 1
        x = nn.BatchNorm(use_running_average=not training)(x)
        return nn.Dense(1)(nn.Dropout(0.5, deterministic=not training)(x))[:, 0]


def test_linen_lazy_init_training_flag_and_all_collections():
    data = regression_data(64)
    seen = []

    def preprocess(batch):
        seen.append(sorted(batch))
        return batch

    trainer = Trainer.from_linen(Counting(), optax.adam(0.01), loss="mse", inputs="x", targets="y",
                                 preprocess=preprocess, verbose=0)  # fmt: skip
    trainer.fit(DataLoader(data, 16), epochs=2)
    assert all("y" in keys for keys in seen)  # preprocess only saw real batches
    variables = trainer.variables
    assert set(variables) == {"params", "batch_stats", "counters"}
    assert int(variables["counters"]["calls"]) == trainer.step == 8


def test_multisteps_reduce_on_plateau_and_inject_hyperparams():
    data = regression_data(64)
    model = Linear(4, 1, rngs=nnx.Rngs(0))
    before = np.asarray(model.dense.kernel[...])
    one_batch = DataLoader(data.select(range(16)), 16)
    trainer = Trainer(model, optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2), loss="mse",
                      inputs="x", targets="y", verbose=0)  # fmt: skip
    trainer.fit(one_batch, epochs=1)
    np.testing.assert_array_equal(np.asarray(model.dense.kernel[...]), before)  # accumulating
    trainer.fit(one_batch, epochs=2)
    assert not np.allclose(np.asarray(model.dense.kernel[...]), before)  # applied at step 2

    plateau = optax.chain(optax.sgd(0.0), optax.contrib.reduce_on_plateau(patience=1, factor=0.5))
    trainer = Trainer(Linear(4, 1, rngs=nnx.Rngs(0)), plateau, loss="mse", inputs="x",
                      targets="y", verbose=0)  # fmt: skip
    trainer.fit(DataLoader(data, 16), epochs=3)  # the loss never improves: the scale drops
    scales = [float(v) for p, v in jax.tree_util.tree_flatten_with_path(trainer.core.state)[0]
              if "scale" in jax.tree_util.keystr(p)]  # fmt: skip
    assert scales and scales[0] < 1.0

    schedule = optax.exponential_decay(0.1, transition_steps=4, decay_rate=0.5)
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=schedule)
    trainer = Trainer(Linear(4, 1, rngs=nnx.Rngs(0)), tx, loss="mse", inputs="x", targets="y",
                      verbose=0)  # fmt: skip
    history = trainer.fit(DataLoader(data, 16), epochs=2)
    rates = [h["learning_rate"] for h in history]
    assert rates[0] == pytest.approx(float(schedule(3)), rel=1e-5)  # the rate of the 4th step
    assert rates[1] == pytest.approx(float(schedule(7)), rel=1e-5)


def test_bfloat16_computes_in_bfloat16_on_float32_parameters():
    dtypes = []

    class Probe(nnx.Module):
        def __init__(self, *, rngs):
            self.dense = nnx.Linear(4, 1, rngs=rngs)

        def __call__(self, x):
            dtypes.append((x.dtype, self.dense.kernel[...].dtype))
            return self.dense(x)[:, 0]

    model = Probe(rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adam(0.05), loss="mse", inputs="x", targets="y",
                      precision="bfloat16", verbose=0)  # fmt: skip
    history = trainer.fit(DataLoader(regression_data(64), 16), epochs=20)
    assert dtypes[0] == (jnp.bfloat16, jnp.bfloat16)
    assert history[-1]["train_loss"] < 0.2 * history[0]["train_loss"]
    assert {x.dtype for x in jax.tree.leaves(nnx.state(model, nnx.Param))} == {jnp.dtype("float32")}
    opt = [
        x
        for x in jax.tree.leaves(nnx.state(trainer.core.optimizer))
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    assert opt and {x.dtype for x in opt} == {jnp.dtype("float32")}
    with pytest.raises(ValueError, match="precision must be one of"):
        Trainer(model, optax.adam(0.1), precision="fp8")


def labelled_data(labels):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(len(labels), 6)).astype(np.float32)
    return Dataset.from_dict({"x": x, "label": labels})


def test_unlabelled_rows_are_left_out_and_bad_labels_refused():
    labels = np.array([0, 1, 2, -1, 1, -1, 0, 2] * 4)
    with_unlabelled = labelled_data(labels)
    features = Features({"x": with_unlabelled.features["x"], "label": ClassLabel(num_classes=3)})
    ds = Dataset.from_dict({"x": np.asarray(with_unlabelled.with_format("numpy")["x"]), "label": labels},
                           features=features)  # fmt: skip
    keep = np.flatnonzero(labels >= 0)
    trainer = Trainer(Linear(6, 3, rngs=nnx.Rngs(0)), optax.adam(0.01), inputs="x", verbose=0)
    with pytest.warns(UserWarning, match="8 rows at epoch 1 have label -1"):
        trainer.fit(DataLoader(ds, 16), epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        trainer.fit(DataLoader(ds, 16), epochs=2)
        full = trainer.evaluate(DataLoader(ds, 16))
    labelled = trainer.evaluate(DataLoader(ds.select(keep), 16))
    assert full["loss"] == pytest.approx(labelled["loss"], rel=1e-5)
    assert full["accuracy"] == pytest.approx(labelled["accuracy"], abs=1e-6)

    floats = Dataset.from_dict(
        {"x": np.zeros((8, 6), np.float32), "label": np.full(8, 2.7, np.float32)}
    )
    with pytest.raises(TypeError, match="integer class ids"):
        Trainer(Linear(6, 3, rngs=nnx.Rngs(0)), optax.adam(0.01), inputs="x", verbose=0).fit(
            DataLoader(floats, 8), epochs=1
        )
    wrong = labelled_data(np.array([0, 1, 57, 2] * 2))
    trainer = Trainer(Linear(6, 10, rngs=nnx.Rngs(0)), optax.adam(0.01), inputs="x", verbose=0)
    with pytest.raises(
        ValueError,
        match=r"label 57 at epoch 1, step 1 of the epoch is outside the model's 10 classes",
    ):
        trainer.fit(DataLoader(wrong, 8), epochs=1)
    with pytest.raises(ValueError, match=r"label 57 in the eval data is outside"):
        trainer.evaluate(DataLoader(wrong, 8))


def test_predict_takes_numpy_batches_and_names_a_column_that_is_not_an_array():
    trainer = Trainer(Linear(4, 2, rngs=nnx.Rngs(0)), optax.adam(1e-3), inputs="x", targets=None)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    from_numpy = trainer.predict({"x": x})
    assert isinstance(from_numpy, jax.Array) and from_numpy.shape == (5, 2)
    np.testing.assert_allclose(from_numpy, trainer.predict({"x": jnp.asarray(x)}), rtol=1e-6)
    with pytest.raises(KeyError, match="'x' is a list, not an array"):
        trainer.predict({"x": [f"row {i}" for i in range(5)]})
