"""Full-batch fits of a linear layer (``jaxfeed.train.linear_fit``): the penalised optimum is
reached (least squares against the closed form), the penalty is chosen on validation, the
standardisation folds back into the weights, a bag of columns fits as its dense twin does, and
class weights weigh the loss."""

import numpy as np
import pytest

from jax_compiles import eager_operations
from jaxfeed.train.linear_fit import Design, figures, fit_on_validation


def _classes(rng, rows, columns, classes=3, noise=1.0):
    w = rng.normal(size=(columns, classes))
    x = rng.normal(size=(rows, columns)).astype(np.float32)
    return x, (x @ w + noise * rng.normal(size=(rows, classes))).argmax(1)


def test_least_squares_reaches_the_closed_form_and_folds_the_scaling_back():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(200, 4)) * [1, 10, 0.1, 3] + [5, -2, 0, 1]).astype(np.float32)
    y = (x @ [0.5, -0.1, 4.0, 0.2] + 0.1 * rng.normal(size=200)).astype(np.float32)
    l2 = 0.01
    with eager_operations() as ran:
        fit = fit_on_validation(Design.dense(x), y, None, None, task="regression", classes=1,
                                grid=(l2,))  # fmt: skip
    assert ran == []  # the objective's arguments go in as float32 from the host: no conversion
    # the same penalty on standardised columns, solved exactly: mean squared error + l2/2 |w|^2
    mean, scale = x.mean(0), x.std(0)
    z = (x - mean) / scale
    zc, yc = z - z.mean(0), y - y.mean()
    w = np.linalg.solve(zc.T @ zc / len(y) + l2 / 2 * np.eye(4), zc.T @ yc / len(y))
    expected = np.c_[w / scale]
    assert np.allclose(fit.weights, expected, rtol=2e-3, atol=1e-4)
    assert np.allclose(fit.outputs(Design.dense(x))[:, 0], z @ w + y.mean(), atol=2e-3)


def test_the_penalty_is_chosen_on_validation_and_separable_data_is_learnt():
    rng = np.random.default_rng(1)
    x, y = _classes(rng, 400, 20, noise=0.3)
    fit = fit_on_validation(Design.dense(x[:300]), y[:300], Design.dense(x[300:]), y[300:],
                            task="classification", classes=3)  # fmt: skip
    assert fit.figures["accuracy"] > 0.85
    best = min(fit.tried, key=lambda l2: (fit.tried[l2]["loss"], -l2))
    assert fit.l2 == best and len(fit.tried) >= 2
    again = figures(fit.outputs(Design.dense(x[300:])), y[300:], "classification")
    assert again["accuracy"] == pytest.approx(fit.figures["accuracy"])
    # few rows, many noisy columns: a strong penalty wins on validation
    x, y = _classes(rng, 60, 400, noise=5.0)
    noisy = fit_on_validation(Design.dense(x[:40]), y[:40], Design.dense(x[40:]), y[40:],
                              task="classification", classes=3)  # fmt: skip
    assert noisy.l2 >= 0.1


def test_a_bag_of_columns_fits_as_its_dense_twin():
    rng = np.random.default_rng(2)
    rows, k, columns = 120, 6, 5000
    labels = rng.integers(0, 2, rows)
    index = rng.integers(0, columns, size=(rows, k))
    index[:, 0] = 10 + labels  # one column tells the class
    value = np.full((rows, k), 1 / np.sqrt(k), np.float32)
    value[:, -1] = 0  # a padding slot: no weight
    dense = np.zeros((rows, columns), np.float32)
    np.add.at(dense, (np.repeat(np.arange(rows), k), index.ravel()), value.ravel())
    bag = fit_on_validation(Design.sparse(index, value, columns), labels, None, None,
                            task="classification", classes=2, grid=(0.01,))  # fmt: skip
    assert bag.weights.shape == (columns, 2)
    unused = np.setdiff1d(np.arange(columns), index[:, :-1])
    assert not bag.weights[unused].any()  # a column no train row uses keeps no weight
    assert np.allclose(bag.outputs(Design.sparse(index, value, columns)), dense @ bag.weights
                       + bag.bias, atol=1e-5)  # fmt: skip
    assert figures(dense @ bag.weights + bag.bias, labels, "classification")["accuracy"] == 1.0


def test_class_weights_weigh_the_loss():
    outputs = np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))
    y = np.array([0, 1])
    plain = figures(outputs, y, "classification")["loss"]
    weighted = figures(outputs, y, "classification", np.array([1.0, 3.0]))["loss"]
    assert plain == pytest.approx((np.log(2) + np.log(10)) / 2)
    assert weighted == pytest.approx((np.log(2) + 3 * np.log(10)) / 2)
    rng = np.random.default_rng(3)
    x, labels = _classes(rng, 300, 5, classes=2, noise=3.0)
    args = {"task": "classification", "classes": 2, "grid": (0.01,)}
    base = fit_on_validation(Design.dense(x), labels, None, None, **args)
    heavy = fit_on_validation(Design.dense(x), labels, None, None, class_weights=[1.0, 10.0],
                              **args)  # fmt: skip
    said = lambda fit: (fit.outputs(Design.dense(x)).argmax(1) == 1).mean()  # noqa: E731
    assert said(heavy) > said(base)  # class 1 weighs more: predicted more often
