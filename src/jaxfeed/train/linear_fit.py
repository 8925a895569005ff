"""Full-batch fits of a linear layer on fixed features: multinomial logistic regression (weighted
cross-entropy) or least squares, with an L2 penalty, by L-BFGS (``scipy.optimize``'s, the
objective and its gradient compiled by JAX); :func:`fit_on_validation` picks the penalty on a
validation split. Dense features are standardised for the fit and the scaling folded back into
the weights; sparse ones (a bag of n-grams: ``index`` and ``value`` per row) are fitted over the
columns the train rows use.

>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(200, 3)).astype(np.float32)
>>> y = (x[:, 0] - x[:, 1] > 0).astype(np.int32)
>>> fit = fit_on_validation(Design.dense(x[:150]), y[:150], Design.dense(x[150:]), y[150:],
...                         task="classification", classes=2)
>>> fit.weights.shape, fit.bias.shape, fit.figures["accuracy"] > 0.9
((3, 2), (2,), True)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

L2_GRID = (1.0, 0.1, 0.01, 1e-3, 1e-4)  # penalties tried, strongest first (each fit warm-starts
# the next; two in a row worse on validation end the search); on standardised features, added
# to the mean loss as lambda / 2 * |W|^2
MAX_ITER = 200  # L-BFGS iterations per penalty


@dataclass(frozen=True)
class Design:
    """The features of some rows: dense (``values``: ``(rows, columns)``) or sparse (``index``
    and ``value``, ``(rows, k)`` each: row ``i`` has ``value[i, j]`` in column ``index[i, j]``,
    repeated columns adding up)."""

    values: np.ndarray
    index: np.ndarray | None = None
    columns: int = 0

    @classmethod
    def dense(cls, values: Any) -> Design:
        values = np.asarray(values, np.float32)
        return cls(values.reshape(len(values), -1), None, int(np.prod(values.shape[1:])))

    @classmethod
    def sparse(cls, index: Any, value: Any, columns: int) -> Design:
        return cls(np.asarray(value, np.float32), np.asarray(index, np.int64), int(columns))

    @property
    def rows(self) -> int:
        return len(self.values)


@dataclass
class LinearFit:
    """A fitted layer: ``weights`` ``(columns, outputs)`` and ``bias`` on the features as given;
    the penalty chosen, the validation figures (``loss``, and ``accuracy`` for a classifier) of
    each penalty tried and of the one chosen, and the seconds it took."""

    weights: np.ndarray
    bias: np.ndarray
    l2: float
    figures: dict[str, float] = field(default_factory=dict)
    tried: dict[float, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0

    def outputs(self, design: Design) -> np.ndarray:
        """The layer's outputs on ``design``'s rows."""
        return _host_outputs(design, self.weights, self.bias)


def _host_outputs(design: Design, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    if design.index is None:
        return design.values @ weights + bias
    out = np.zeros((design.rows, weights.shape[1]), np.float32)
    for start in range(0, design.rows, 1024):  # (rows, k, outputs) a block at a time
        part = slice(start, start + 1024)
        out[part] = np.einsum("rk,rkc->rc", design.values[part], weights[design.index[part]])
    return out + bias


def figures(outputs: np.ndarray, y: np.ndarray, task: str,
            weights: np.ndarray | None = None) -> dict[str, float]:  # fmt: skip
    """``loss`` (the cross-entropy, each row weighted by its class's ``weights``, or the mean
    squared error) and, for a classifier, ``accuracy`` of ``outputs`` against ``y``.

    >>> figures(np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 0]), "classification")["accuracy"]
    0.5
    """
    outputs = np.asarray(outputs, np.float64)
    if task != "classification":
        error = outputs.reshape(len(y), -1)[:, 0] - np.asarray(y, np.float64)
        return {"loss": float(np.mean(error**2)) if len(y) else 0.0}
    shifted = outputs - outputs.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    y = np.asarray(y, np.int64)
    rows = log_p[np.arange(len(y)), y]
    w = np.ones(len(y)) if weights is None else np.asarray(weights, np.float64)[y]
    return {
        "loss": float(np.mean(-rows * w)) if len(y) else 0.0,
        "accuracy": float(np.mean(outputs.argmax(axis=1) == y)) if len(y) else 0.0,
    }


class _Problem:
    """One design, targets and task as an objective of flat parameters: its value and gradient
    computed by one compiled JAX function (the data passed in as arguments, so that the
    compilation is per shape and JAX's persistent cache keeps it), float64 on the host."""

    def __init__(self, design: Design, y: np.ndarray, task: str, outputs: int,
                 class_weights: np.ndarray | None) -> None:  # fmt: skip
        self.shape = (design.columns, outputs)
        classification = task == "classification"
        target = np.asarray(y, np.int64 if classification else np.float32)
        weight = np.ones(design.rows, np.float32)
        if class_weights is not None and classification:
            weight = np.asarray(class_weights, np.float32)[target]
        if classification:  # one-hot: no gather to compile
            target = np.eye(outputs, dtype=np.float32)[target]
        data: dict[str, Any] = {"y": target, "weight": weight, "values": design.values}
        if design.index is not None:
            data["index"] = design.index.astype(np.int32)
        self.data = jax.device_put(data)
        self._value_and_grad = _objective(self.shape, classification, design.index is not None)

    def __call__(self, flat: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
        # float32 on the host: jnp.asarray of float64 compiled a conversion (a program per run)
        value, grad = self._value_and_grad(np.asarray(flat, np.float32), np.float32(l2), self.data)
        return float(value), np.asarray(grad, np.float64)

    def split(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        size = self.shape[0] * self.shape[1]
        return (
            np.asarray(flat[:size], np.float32).reshape(self.shape),
            np.asarray(flat[size:], np.float32),
        )


@functools.lru_cache(maxsize=8)
def _objective(shape: tuple[int, int], classification: bool, sparse: bool) -> Any:
    """The compiled value and gradient of the penalised mean loss, ``(flat, l2, data)``."""
    size = shape[0] * shape[1]

    def objective(flat: jax.Array, l2: jax.Array, data: dict[str, jax.Array]) -> jax.Array:
        w, b = flat[:size].reshape(shape), flat[size:]
        if sparse:  # a bag of columns per row: the rows' weights gathered and summed
            z = jnp.einsum("rk,rkc->rc", data["values"], w[data["index"]]) + b
        else:
            z = data["values"] @ w + b
        if classification:
            z = z - jax.lax.stop_gradient(z.max(axis=1, keepdims=True))
            loss = jnp.log(jnp.exp(z).sum(axis=1)) - (data["y"] * z).sum(axis=1)
        else:
            loss = (z[:, 0] - data["y"]) ** 2
        return jnp.mean(loss * data["weight"]) + 0.5 * l2 * jnp.sum(w * w)

    return jax.jit(jax.value_and_grad(objective))


def _minimise(problem: _Problem, start: np.ndarray, l2: float, max_iter: int,
              memory: int = 10) -> np.ndarray:  # fmt: skip
    """L-BFGS from ``start``: the two-loop recursion over the last ``memory`` steps, a
    backtracking (Armijo) line search, stopping when the objective no longer falls by a relative
    1e-7 (about float32's resolution) or the gradient is below 1e-5. Written here rather than scipy's L-BFGS-B, whose
    multithreaded BLAS calls on a few thousand numbers took 10x longer on a busy 2-core machine
    (1.2 s against 0.1 s with one thread), or optax's jitted ``lbfgs``, whose loop took 8 s to
    compile there for a 227 x 576 problem that then ran in 0.1 s; the vector steps are numpy's
    element-wise operations, the objective JAX's."""
    x = np.asarray(start, np.float64)
    f, g = problem(x, l2)
    pairs: list[tuple[np.ndarray, np.ndarray, float]] = []
    for _ in range(max_iter):
        d = _direction(g, pairs)
        slope = float((g * d).sum())
        if slope >= 0:  # not a descent direction: start the memory again
            pairs, d, slope = [], -g, -float((g * g).sum())
        step = 1.0 if pairs else min(1.0, 1.0 / max(float(np.abs(g).sum()), 1e-12))
        while True:
            trial = x + step * d
            f_new, g_new = problem(trial, l2)
            if f_new <= f + 1e-4 * step * slope or step < 1e-10:
                break
            step *= 0.5
        s, y = trial - x, g_new - g
        sy = float((s * y).sum())
        if sy > 1e-10:
            pairs = [*pairs[-(memory - 1) :], (s, y, 1.0 / sy)]
        done = f - f_new <= 1e-7 * abs(f) or float(np.abs(g_new).max()) < 1e-5
        x, f, g = trial, f_new, g_new
        if done:
            break
    return x


def _direction(g: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray, float]]) -> np.ndarray:
    """L-BFGS's two-loop recursion: minus the inverse Hessian estimate times ``g``."""
    q = g.copy()
    alphas = []
    for s, y, rho in reversed(pairs):
        a = rho * float((s * q).sum())
        q -= a * y
        alphas.append(a)
    if pairs:
        s, y, _ = pairs[-1]
        q *= float((s * y).sum()) / max(float((y * y).sum()), 1e-30)
    for (s, y, rho), a in zip(pairs, reversed(alphas), strict=True):
        q += (a - rho * float((y * q).sum())) * s
    return -q


def _standardised(design: Design) -> tuple[Design, np.ndarray, np.ndarray]:
    """A dense design with each column centred and scaled to unit deviation (a constant column:
    centred only), and the mean and scale; a sparse one as it is (its columns kept apart)."""
    if design.index is not None:
        return design, np.zeros(0, np.float32), np.ones(0, np.float32)
    mean = design.values.mean(axis=0)
    scale = design.values.std(axis=0)
    scale = np.where(scale > 1e-6, scale, 1.0).astype(np.float32)
    return Design.dense((design.values - mean) / scale), mean.astype(np.float32), scale


def _used_columns(train: Design, *others: Design) -> tuple[np.ndarray, list[Design]]:
    """A sparse design's columns that some train row uses (with a non-zero value), and the
    designs re-indexed over them (a column no train row uses gets no weight: it stays 0)."""
    used = np.unique(train.index[train.values != 0])
    out = []
    for design in (train, *others):
        where = np.searchsorted(used, design.index).clip(0, max(len(used) - 1, 0))
        known = (used[where] == design.index) if len(used) else np.zeros_like(design.index, bool)
        value = np.where(known, design.values, 0.0)
        out.append(Design.sparse(np.where(known, where, 0), value, max(len(used), 1)))
    return used, out


def fit_on_validation(
    train: Design, y_train: np.ndarray, val: Design | None, y_val: np.ndarray | None, *,
    task: str, classes: int, class_weights: Sequence[float] | None = None,
    grid: Sequence[float] = L2_GRID, max_iter: int = MAX_ITER,
) -> LinearFit:  # fmt: skip
    """Fit the layer on ``train`` once per penalty of ``grid`` (strongest first, each from the
    last one's weights; two in a row worse than the best end the search) and keep the one of
    lowest validation loss (the strongest on ties);
    without a validation split, the middle penalty of ``grid``. ``classes`` outputs for a
    classifier, 1 for a regressor (``y``: standardised targets)."""
    start_time = time.perf_counter()
    outputs = classes if task == "classification" else 1
    weights = None if class_weights is None else np.asarray(class_weights, np.float32)
    columns = train.columns
    used = None
    if train.index is not None:
        used, (train, *rest) = _used_columns(train, *([val] if val is not None else []))
        val = rest[0] if rest else None
    fitted, mean, scale = _standardised(train)
    if val is not None and val.index is None:
        val = Design.dense((val.values - mean) / scale)
    problem = _Problem(fitted, y_train, task, outputs, weights)
    flat = np.zeros(fitted.columns * outputs + outputs)
    penalties = list(grid) if val is not None else [sorted(grid)[len(grid) // 2]]
    best: tuple[float, float, np.ndarray] | None = None
    tried: dict[float, dict[str, float]] = {}
    worse = 0
    for l2 in penalties:
        flat = _minimise(problem, flat, l2, max_iter)
        if val is None:
            best = (0.0, l2, flat)
            break
        w, b = problem.split(flat)
        tried[l2] = figures(_host_outputs(val, w, b), y_val, task, weights)
        worse = 0 if best is None or tried[l2]["loss"] < best[0] else worse + 1
        if worse == 0:
            best = (tried[l2]["loss"], l2, flat)
        elif worse == 2:  # the validation loss rises as the penalty falls: past its best
            break
    assert best is not None
    w, b = problem.split(best[2])
    if used is None:  # the standardisation folded into the weights
        w = w / scale[:, None]
        b = b - mean @ w
    else:  # the used columns' weights back in their places
        full = np.zeros((columns, outputs), np.float32)
        full[used] = w[: len(used)]
        w = full
    return LinearFit(
        w.astype(np.float32), b.astype(np.float32), best[1], tried.get(best[1], {}), tried,
        time.perf_counter() - start_time,
    )  # fmt: skip


__all__ = ["L2_GRID", "Design", "LinearFit", "figures", "fit_on_validation"]
