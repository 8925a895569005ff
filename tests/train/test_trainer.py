import contextlib
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import PIL.Image
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jax_compiles import compile_count, eager_operations
from jaxfeed import DataLoader, EarlyStopping, Trainer, load_dataset, plot_history
from jaxfeed.models import CNN, MLP, LinenCNN
from jaxfeed.train import NonFiniteLossError, scale_images


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def loaders(digits, batch=64, **kwargs):
    train = DataLoader(digits["train"], batch, shuffle=True, seed=0, **kwargs)
    test = DataLoader(digits["test"], 120, **{k: v for k, v in kwargs.items() if k != "drop_last"})
    return train, test


def cnn(seed=0):
    return CNN(10, input_shape=(8, 8, 1), rngs=nnx.Rngs(seed))


def params_of(model):
    return jax.tree.leaves(nnx.state(model, nnx.Param))


@pytest.fixture(scope="module")
def cnn_run(digits):
    """The CNN trained 5 epochs on digits (printing as it goes): the learning test reads it, the
    Linen test compares its history's keys and the eval-mode test predicts with it."""
    model = cnn()
    trainer = Trainer(model, optax.adamw(2e-3, weight_decay=1e-4), preprocess=scale_images)
    train, test = loaders(digits)
    printed = io.StringIO()  # not a terminal
    with contextlib.redirect_stdout(printed):
        history = trainer.fit(train, test, epochs=5)
    return model, trainer, history, printed.getvalue()


def test_cnn_learns_digits_and_compiles_once(digits, cnn_run):
    model, trainer, history, out = cnn_run
    _, test = loaders(digits)
    assert history[-1]["eval_accuracy"] >= 0.95
    assert set(history[0]) == {
        "epoch", "train_loss", "train_accuracy", "eval_loss", "eval_accuracy", "seconds", "rows_per_second", "data_wait"
    }  # fmt: skip
    assert compile_count(trainer.core.train_step) == 1  # the short last batch (1437 % 64) is padded
    assert compile_count(trainer.core.eval_step) == 1
    # not a terminal: one line per epoch
    assert out.count("\n") == 5 and "epoch 5/5" in out
    result = trainer.evaluate(test)
    assert result["accuracy"] == pytest.approx(history[-1]["eval_accuracy"])
    logits = trainer.predict(test)
    assert logits.shape == (360, 10)
    labels = np.asarray(digits["test"].with_format("numpy")["label"])
    assert (np.asarray(logits).argmax(-1) == labels).mean() == pytest.approx(result["accuracy"])
    # the user's model now holds the trained state
    model.eval()
    batch = next(iter(test))
    np.testing.assert_allclose(
        model(scale_images(batch)["image"]), trainer.predict(batch), rtol=1e-5, atol=1e-5
    )


def test_fit_counts_epochs_in_total(digits):
    trainer = Trainer(cnn(), optax.adam(1e-3), preprocess=scale_images, verbose=0)
    train = DataLoader(digits["train"].select(range(320)), 64, shuffle=True, seed=0)
    trainer.fit(train, epochs=1)
    trainer.fit(train, epochs=2)
    assert [h["epoch"] for h in trainer.history] == [1, 2] and trainer.step == 2 * len(train)
    with pytest.raises(ValueError, match=r"fit\(epochs=2\) trains nothing.*pass epochs=3"):
        trainer.fit(train, epochs=2)
    assert trainer.step == 2 * len(train)


def test_linen_trainer_same_keys(digits, cnn_run):
    train, test = loaders(digits)
    x = next(iter(train))["image"]
    trainer = Trainer.from_linen(
        LinenCNN(10), optax.adamw(2e-3), x, preprocess=scale_images, verbose=0
    )
    history = trainer.fit(train, test, epochs=3)
    assert set(history[0]) == set(cnn_run[2][0])  # the NNX trainer's, fit with an eval loader
    assert history[-1]["eval_accuracy"] > 0.9
    assert set(trainer.variables) == {"params", "batch_stats"}
    assert compile_count(trainer.core.train_step) == 1


def test_eval_mode_disables_dropout_and_uses_running_averages(digits, cnn_run):
    trainer = cnn_run[1]  # trained: its batch norm's running averages moved from their start
    _, test = loaders(digits)
    batch = next(iter(test))
    a, b = trainer.predict(batch), trainer.predict(batch)
    np.testing.assert_array_equal(a, b)  # no dropout noise
    one = {k: v[:1] for k, v in batch.items() if k != "name"}
    np.testing.assert_allclose(
        trainer.predict(one)[0], a[0], rtol=1e-4, atol=1e-4
    )  # no batch statistics


def test_early_stopping(digits):
    stop = EarlyStopping("train_loss", patience=0, min_delta=10.0)
    trainer = Trainer(cnn(), optax.adam(1e-3), preprocess=scale_images, verbose=0, callbacks=[stop])
    train = DataLoader(digits["train"].select(range(320)), 64, shuffle=True, seed=0)
    history = trainer.fit(train, epochs=10)
    assert len(history) == 2 and stop.stopped_epoch == 2


def test_non_finite_loss_stops_without_writing(digits, tmp_path):
    model = cnn()
    before = [np.asarray(p) for p in params_of(model)]

    def exploding(logits, batch):
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]) * jnp.nan

    trainer = Trainer(
        model,
        optax.adam(1e-3),
        loss=exploding,
        preprocess=scale_images,
        verbose=0,
        out_dir=tmp_path,
    )
    train, _ = loaders(digits)
    with pytest.raises(NonFiniteLossError, match="not finite at epoch 1, step 1 of the epoch"):
        trainer.fit(train, epochs=2)
    for old, new in zip(before, params_of(model), strict=True):
        np.testing.assert_array_equal(old, np.asarray(new))
    assert not (tmp_path / "metrics.jsonl").exists()


def test_deterministic_runs_are_bitwise_identical(digits):
    results = []
    for _ in range(2):
        model = cnn(3)
        trainer = Trainer(
            model, optax.adamw(1e-3), preprocess=scale_images, verbose=0, deterministic=True, seed=5
        )
        trainer.fit(loaders(digits)[0], epochs=1)
        results.append([np.asarray(p) for p in params_of(model)])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def _train_two_epochs(digits, **kwargs):
    model = cnn(1)
    trainer = Trainer(model, optax.adam(1e-3), preprocess=scale_images, verbose=0)
    train = DataLoader(digits["train"], 64, shuffle=True, seed=0, drop_last=True, **kwargs)
    history = trainer.fit(train, epochs=2)
    return trainer, (history[-1]["train_loss"], [np.asarray(p) for p in params_of(model)])


@pytest.fixture(scope="module")
def one_device_run(digits):
    """The run both meshes below are compared with: trained once for the file."""
    return _train_two_epochs(digits)[1]


@pytest.mark.parametrize("make_mesh", ["Mesh", "jax.make_mesh"])
def test_data_parallel_over_8_devices_matches_one_device(digits, one_device_run, make_mesh):
    if make_mesh == "Mesh":
        mesh = Mesh(np.array(jax.devices()), ("data",))  # Auto axes
    else:
        mesh = jax.make_mesh((8,), ("data",))  # Explicit axes (the default of jax.make_mesh)
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    trainer, sharded = _train_two_epochs(digits, sharding=sharding)
    leaf = jax.tree.leaves(trainer.core.state)[0]
    assert len(leaf.devices()) == 8
    final = [one_device_run, sharded]
    assert final[0][0] == pytest.approx(final[1][0], rel=1e-4)
    for a, b in zip(final[0][1], final[1][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4)


def test_outputs_history_files_and_curves(digits, tmp_path):
    trainer = Trainer(MLP(10, (8, 8), hidden=(32,), rngs=nnx.Rngs(0)), optax.adam(1e-2), preprocess=scale_images,
                      verbose=0, out_dir=tmp_path / "run")  # fmt: skip
    train, test = loaders(digits)
    trainer.fit(train, test, epochs=2)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    assert (
        (tmp_path / "run" / "history.csv")
        .read_text()
        .startswith("epoch,train_loss,train_accuracy,eval_loss")
    )
    with PIL.Image.open(tmp_path / "run" / "curves.png") as image:
        assert image.format == "PNG" and image.size[0] > 800 and image.size[1] > 300


def test_plot_history_draws_both_panels(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    history = [{"epoch": e, "train_loss": 1 / e, "eval_loss": 1.2 / e, "train_accuracy": 1 - 1 / (e + 1),
                "eval_accuracy": 1 - 1.2 / (e + 1)} for e in range(1, 6)]  # fmt: skip
    draws, draw = [], Figure.draw
    monkeypatch.setattr(
        Figure, "draw", lambda fig, renderer: draws.append(1) or draw(fig, renderer)
    )
    path = plot_history(history, tmp_path / "c.png")
    assert len(draws) == 1  # laid out once, drawn once (savefig drew twice after tight_layout)
    with PIL.Image.open(path) as image:
        pixels = np.asarray(image.convert("L"))
    left, right = pixels[:, : pixels.shape[1] // 2], pixels[:, pixels.shape[1] // 2 :]
    assert (left < 200).mean() > 0.01 and (right < 200).mean() > 0.01  # ink in both panels


def test_the_epoch_accumulator_is_built_on_the_host_and_put_on_the_device_at_once():
    from jaxfeed.train.cores import empty_sums

    with eager_operations() as ran:
        sums = empty_sums(("accuracy",))
    assert ran == []  # ~20 jnp.zeros each epoch, each dispatched (and compiled) on its own, before
    assert all(isinstance(v, jax.Array) and v.shape == () for v in sums.values())
    assert {k: v.dtype.name for k, v in sums.items()} == {
        **dict.fromkeys(("loss", "count", "rows", "m_accuracy"), "float32"),
        **{k: "int32" for k in sums if k not in ("loss", "count", "rows", "m_accuracy")},
    }
    negative = {"first_bad", "bad_label_step", "bad_id_step"}
    assert {k: int(v) for k, v in sums.items()} == {k: -1 if k in negative else 0 for k in sums}


def test_bad_arguments(digits):
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        Trainer(cnn(), optax.adam(1e-3), loss="hinge")
    with pytest.raises(TypeError, match=r"optimizer must be an optax\.GradientTransformation"):
        Trainer(cnn(), "adam")
    trainer = Trainer(cnn(), optax.adam(1e-3), inputs="pixels", verbose=0)
    with pytest.raises(KeyError, match="needs the columns 'pixels'"):
        trainer.fit(loaders(digits)[0], epochs=1)
