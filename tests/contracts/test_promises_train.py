"""Core promises of training: padding, dropout keys, eval mode, non-finite losses, exact resume,
early stopping.

Each test names the promise it guards and fails on a plausible one-line bug
(listed in ``tools/mutation/mutations.py``). References are computed independently of the trainer
(hand-written gradient steps, direct model calls), never by running the trainer twice. Models and
data are tiny, so the file runs in seconds.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from flax import nnx

from jax_compiles import compile_count
from jaxfeed import DataLoader, Dataset, EarlyStopping, Trainer
from jaxfeed.models import MLP
from jaxfeed.train import NonFiniteLossError
from jaxfeed.train.checkpoint import CheckpointManager


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4, 4)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int32)
    return x, y


def dataset(x, y):
    return Dataset.from_dict({"image": x, "label": y})


def mlp(seed=0, dropout=0.0):
    return MLP(3, (4, 4), hidden=(16,), dropout_rate=dropout, rngs=nnx.Rngs(seed))


class TinyLinen(nn.Module):
    dropout_rate: float = 0.0

    @nn.compact
    def __call__(self, x, train=True):
        x = nn.relu(nn.Dense(16)(x.reshape((x.shape[0], -1))))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return nn.Dense(3)(x)


def per_example(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def params_of(model):
    return [np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))]


# ------------------------------------------------------------------------------ padding
@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_promise_a_padded_last_batch_trains_on_its_real_rows_only(api):
    """Promise: a short last batch is padded to the batch size (no recompilation) and masked out
    of the loss, the gradients and the metrics: 11 rows in batches of 8 give exactly the two SGD
    steps a hand-written loop takes on rows 0-7 and 8-10, and the epoch's train_loss and
    train_accuracy are means over the 11 real rows."""
    x, y = data(11)
    lr = 0.5
    loader = DataLoader(dataset(x, y), 8)
    losses, correct = [], []
    if api == "nnx":
        model, reference = mlp(), mlp()
        trainer = Trainer(model, optax.sgd(lr), verbose=0)
        history = trainer.fit(loader, epochs=1)
        for idx in (slice(0, 8), slice(8, 11)):
            logits = reference(x[idx])
            losses += per_example(logits, y[idx]).tolist()
            correct += (np.asarray(logits).argmax(-1) == y[idx]).tolist()
            grads = nnx.grad(lambda m, idx=idx: per_example(m(x[idx]), y[idx]).mean())(reference)
            params = nnx.state(reference, nnx.Param)
            nnx.update(reference, jax.tree.map(lambda p, g: p - lr * g, params, grads))
        got, want = params_of(model), params_of(reference)
    else:
        module = TinyLinen()
        trainer = Trainer.from_linen(module, optax.sgd(lr), x[:1], verbose=0)
        params = jax.tree.map(np.array, trainer.variables["params"])  # copies: the step donates
        history = trainer.fit(loader, epochs=1)
        for idx in (slice(0, 8), slice(8, 11)):
            logits = module.apply({"params": params}, x[idx], train=False)
            losses += per_example(logits, y[idx]).tolist()
            correct += (np.asarray(logits).argmax(-1) == y[idx]).tolist()
            grads = jax.grad(
                lambda p, idx=idx: per_example(
                    module.apply({"params": p}, x[idx], train=True), y[idx]
                ).mean()
            )(params)
            params = jax.tree.map(lambda p, g: p - lr * g, params, grads)
        got = [np.asarray(p) for p in jax.tree.leaves(trainer.variables["params"])]
        want = [np.asarray(p) for p in jax.tree.leaves(params)]
    assert compile_count(trainer.core.train_step) == 1  # padded, not recompiled
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert history[0]["train_loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert history[0]["train_accuracy"] == pytest.approx(np.mean(correct))


def test_promise_evaluate_counts_each_real_row_once():
    """Promise: ``evaluate`` reports the mean loss and accuracy over the loader's rows, whatever
    the batch size: with 9 rows in batches of 8, the last batch (padded with copies of row 8)
    counts row 8 once. The reference is the model called directly in eval mode."""
    x, y = data(9, seed=1)
    model = mlp(seed=2, dropout=0.5)
    model.eval()
    logits = np.asarray(model(x))
    y = y.copy()
    y[8] = logits[8].argmax()  # row 8 right: counting its padded copies would inflate accuracy
    y[:8] = (logits[:8].argmax(-1) + 1) % 3  # rows 0-7 wrong
    trainer = Trainer(model, optax.sgd(0.1), verbose=0)
    result = trainer.evaluate(DataLoader(dataset(x, y), 8))
    assert result["accuracy"] == pytest.approx(1 / 9)
    assert result["loss"] == pytest.approx(float(per_example(logits, y).mean()), rel=1e-5)
    predicted = trainer.predict(DataLoader(dataset(x, y), 8))
    assert predicted.shape == (9, 3)
    np.testing.assert_allclose(np.asarray(predicted), logits, rtol=1e-5, atol=1e-6)


def test_promise_rows_without_a_label_count_nowhere():
    """Promise: rows whose class id is -1 (no label) are masked out of the loss and the metrics,
    like padding (with a warning saying how many): ``evaluate`` averages over labelled rows."""
    x, y = data(12, seed=4)
    model = mlp(seed=5)
    model.eval()
    logits = np.asarray(model(x))
    y = y.copy()
    y[[1, 4, 10]] = -1
    labelled = y >= 0
    trainer = Trainer(model, optax.sgd(0.1), verbose=0)
    with pytest.warns(UserWarning, match="3 rows in the eval data have label -1"):
        result = trainer.evaluate(DataLoader(dataset(x, y), 5))
    want = per_example(logits[labelled], y[labelled])
    assert result["loss"] == pytest.approx(float(want.mean()), rel=1e-5)
    accuracy = (logits[labelled].argmax(-1) == y[labelled]).mean()
    assert result["accuracy"] == pytest.approx(float(accuracy))


# ------------------------------------------------------------------------------ dropout keys
def test_promise_dropout_keys_come_from_the_trainer_seed():
    """Promise: dropout keys are derived from the Trainer's ``seed`` (and the step): the same seed
    reproduces a run bitwise, another seed gives another run from the same initial weights."""
    x, y = data(32)
    runs = {}
    for seed in (0, 0, 5):
        model = mlp(seed=1, dropout=0.5)
        trainer = Trainer(model, optax.adam(1e-2), seed=seed, verbose=0)
        trainer.fit(DataLoader(dataset(x, y), 8), epochs=1)
        runs.setdefault(seed, []).append(params_of(model))
    for a, b in zip(*runs[0], strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(runs[0][0], runs[5][0], strict=True))


@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_promise_predict_runs_the_model_in_eval_mode(api):
    """Promise: ``predict`` (and ``evaluate``) run the model in eval mode: no dropout, so its
    outputs equal a direct eval-mode call of the trained model, which differs from a train-mode
    (dropout) call. Calling predict twice and comparing would not show dropout left on."""
    x, y = data(24)
    loader = DataLoader(dataset(x, y), 8)
    if api == "nnx":
        model = mlp(seed=3, dropout=0.5)
        trainer = Trainer(model, optax.adam(1e-2), verbose=0)
        trainer.fit(loader, epochs=1)
        model.eval()
        want = np.asarray(model(x))
        model.train()
        noisy = np.asarray(model(x, rngs=nnx.Rngs(dropout=1)))
    else:
        module = TinyLinen(dropout_rate=0.5)
        trainer = Trainer.from_linen(module, optax.adam(1e-2), x[:1], verbose=0)
        trainer.fit(loader, epochs=1)
        want = np.asarray(module.apply(trainer.variables, x, train=False))
        noisy = np.asarray(
            module.apply(trainer.variables, x, train=True, rngs={"dropout": jax.random.key(1)})
        )
    assert not np.allclose(want, noisy, atol=1e-3)  # dropout changes the outputs
    np.testing.assert_allclose(np.asarray(trainer.predict(loader)), want, rtol=1e-5, atol=1e-6)
    one = trainer.predict({"image": jnp.asarray(x[5:6]), "label": jnp.asarray(y[5:6])})
    np.testing.assert_allclose(np.asarray(one)[0], want[5], rtol=1e-5, atol=1e-6)
    losses = per_example(jnp.asarray(want), y)
    assert trainer.evaluate(loader)["loss"] == pytest.approx(float(losses.mean()), rel=1e-5)


# ------------------------------------------------------------------------------ non-finite loss
def test_promise_a_non_finite_loss_names_its_step_in_the_epoch_and_writes_nothing(tmp_path):
    """Promise: a NaN loss stops training with ``NonFiniteLossError`` naming the epoch, the step in
    that epoch and the global step; the non-finite state is written nowhere (no checkpoint, no
    metrics line, not into the user's model). Here the NaN comes at epoch 2, step 3 (global 7),
    where the step in the epoch and the global step differ."""
    x, y = data(16)
    # the learning rate becomes NaN at the 6th update: the loss of the 7th step is NaN
    tx = optax.sgd(lambda count: jnp.where(count >= 5, jnp.nan, 0.01))
    model = mlp()
    trainer = Trainer(model, tx, verbose=0, out_dir=tmp_path / "run")
    with pytest.raises(NonFiniteLossError, match=r"epoch 2, step 3 of the epoch \(global step 7\)"):
        trainer.fit(
            DataLoader(dataset(x, y), 4, shuffle=True),
            epochs=3,
            checkpoint_dir=tmp_path / "ckpt",
            checkpoint_options={"async_save": False},
        )
    assert CheckpointManager(tmp_path / "ckpt").all_steps == [4]  # epoch 1 only
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"epoch": 1' in lines[0]
    assert all(np.isfinite(p).all() for p in params_of(model))


# ------------------------------------------------------------------------------ exact resume
def test_promise_resuming_from_a_checkpoint_continues_bitwise_with_the_loader_position(tmp_path):
    """Promise: a run stopped after epoch 1 and resumed from its checkpoint (new process: new
    model, optimizer and loader objects) ends bitwise identical to an uninterrupted run; this needs
    the loader's position (epoch, hence the shuffle order) in the checkpoint, the step (dropout
    keys) and the optimizer state."""
    x, y = data(48)

    def run(epochs, **kwargs):
        model = mlp(seed=4, dropout=0.3)
        trainer = Trainer(model, optax.adam(1e-2), seed=2, verbose=0)
        loader = DataLoader(dataset(x, y), 16, shuffle=True, seed=9)
        history = trainer.fit(loader, epochs=epochs, **kwargs)
        return params_of(model), history

    reference, ref_history = run(2)
    options = {"checkpoint_dir": tmp_path / "ckpt", "checkpoint_options": {"async_save": False}}
    run(1, **options)
    resumed, history = run(2, resume=True, **options)
    for a, b in zip(reference, resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [h["train_loss"] for h in history] == [h["train_loss"] for h in ref_history]


# ------------------------------------------------------------------------------ early stopping
class _Run:
    stop_training = False


def stops_at(callback, key, values):
    """The epoch at which ``callback`` stops a run whose metric ``key`` takes ``values``."""
    run = _Run()
    callback.on_fit_start(run)
    for epoch, value in enumerate(values, 1):
        callback.on_epoch_end(run, {"epoch": epoch, key: value})
        if run.stop_training:
            return epoch
    return None


def test_promise_early_stopping_waits_patience_epochs_without_improvement():
    """Promise (documented): training stops once the metric has not improved for more than
    ``patience`` epochs in a row; an improvement resets the count."""
    stop = EarlyStopping("eval_loss", patience=2)
    assert stops_at(stop, "eval_loss", [1.0, 0.9, 0.95, 0.96, 0.97, 0.5]) == 5
    assert stop.best == 0.9 and stop.stopped_epoch == 5
    # improvements at epochs 4 and 7 reset the wait
    values = [1.0, 1.1, 1.2, 0.8, 0.9, 0.95, 0.7, 0.8, 0.9, 1.0]
    assert stops_at(EarlyStopping("eval_loss", patience=2), "eval_loss", values) == 10
    assert stops_at(EarlyStopping("eval_loss", patience=0), "eval_loss", [1.0, 0.9, 0.9]) == 3
    assert stops_at(EarlyStopping("eval_loss", patience=5), "eval_loss", [1.0] * 6) is None


def test_promise_early_stopping_mode_and_min_delta():
    """Promise: ``mode`` picks the direction ("auto": min for losses, max otherwise) and an
    improvement must exceed ``min_delta``."""
    rising = [0.5, 0.6, 0.7, 0.8, 0.9]
    assert stops_at(EarlyStopping("eval_accuracy", patience=0), "eval_accuracy", rising) is None
    assert stops_at(EarlyStopping("eval_accuracy", 0, mode="max"), "eval_accuracy", rising) is None
    assert stops_at(EarlyStopping("eval_accuracy", 0, mode="min"), "eval_accuracy", rising) == 2
    falling = [0.9, 0.8, 0.7]
    assert stops_at(EarlyStopping("eval_accuracy", 0), "eval_accuracy", falling) == 2
    assert stops_at(EarlyStopping("eval_loss", 0, mode="max"), "eval_loss", falling) == 2
    small = EarlyStopping("eval_loss", patience=0, min_delta=0.1)
    assert stops_at(small, "eval_loss", [1.0, 0.95]) == 2  # 0.05 is not an improvement
    assert stops_at(small, "eval_loss", [1.0, 0.85, 0.7, 0.55]) is None
