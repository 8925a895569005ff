"""What a run's model is trained against: the loss (``--loss``, ``--class-weights``) and the
metrics (``--metrics``) of a classifier or a regressor, a language model's, and the inputs'
conversion on the device.

>>> sorted(run_metrics(RunConfig(), True, 2.0)), run_metrics(RunConfig(metrics=["f1"]), False, None)
(['mae', 'mse', 'r2', 'rmse'], {'f1': 'f1'})
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax.numpy as jnp

from jaxfeed.recipes.config import ConfigError, RunConfig, did_you_mean
from jaxfeed.recipes.spec import INPUTS, TARGETS
from jaxfeed.train.losses import resolve_loss
from jaxfeed.train.metrics import SPLIT_METRICS, SplitMetric, rmse


def device_preprocess(scale: bool) -> Any:
    """The step's ``preprocess`` (on the device, inside the compiled step): float32 inputs, and
    integer pixels divided by 255 when ``scale``.

    >>> device_preprocess(True)({INPUTS: jnp.array([0, 255], jnp.uint8)})[INPUTS].tolist()
    [0.0, 1.0]
    """

    def preprocess(batch: dict[str, Any]) -> dict[str, Any]:
        x = batch[INPUTS]
        if scale and jnp.issubdtype(x.dtype, jnp.integer):
            x = x.astype(jnp.float32) / 255.0
        elif not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.float32)
        return {**batch, INPUTS: x}

    return preprocess


def numeric_options(config: RunConfig, prep: Any, class_weights: list[float] | None,
                    scale: bool) -> dict[str, Any]:  # fmt: skip
    """The Trainer's ``preprocess``, ``targets``, ``loss`` and ``metrics`` of a classifier or
    regressor (``scale``: integer inputs are pixels; None: no conversion, token ids).

    >>> from types import SimpleNamespace
    >>> options = numeric_options(RunConfig(), SimpleNamespace(task="classification", target_std=None), None, None)
    >>> options["preprocess"], options["loss"], options["metrics"]
    (None, 'cross_entropy', {'accuracy': 'accuracy'})
    """
    regression = prep.task == "regression"
    return {
        "preprocess": None if scale is None else device_preprocess(scale),
        "targets": TARGETS,
        "loss": run_loss(config, regression, class_weights),
        "metrics": run_metrics(config, regression, prep.target_std),
    }


LM_LOSS = "next_token"  # the Trainer's causal language-model loss
LM_METRICS = ("perplexity", "token_accuracy")


def lm_metrics(config: RunConfig) -> list[str]:
    """``--metrics`` of a language model (default: perplexity and token accuracy).

    >>> lm_metrics(RunConfig())
    ['perplexity', 'token_accuracy']
    """
    names = config.metrics or list(LM_METRICS)
    for name in names:
        if name not in LM_METRICS:
            raise ConfigError(
                f"--metrics {name}: not a language-model metric; known: {', '.join(LM_METRICS)}"
                + did_you_mean(name, LM_METRICS)
            )
    return list(names)


def label_unit_errors(std: float) -> dict[str, Any]:
    """``mse`` and ``mae`` per example in the label column's units, for a model trained on the
    standardised target (``std``: the target's deviation); the loss stays standardised.

    >>> m = label_unit_errors(10.0)
    >>> batch = {TARGETS: jnp.array([0.0, 1.0])}
    >>> m["mse"](jnp.array([[0.5], [1.0]]), batch).tolist(), m["mae"](jnp.array([0.5, 1.0]), batch).tolist()
    ([25.0, 0.0], [5.0, 0.0])
    """

    def error(outputs: Any, batch: Any) -> Any:
        y = batch[TARGETS].astype(jnp.float32)
        return (outputs.astype(jnp.float32).reshape(y.shape) - y) * std

    def mse(outputs: Any, batch: Any) -> Any:
        return jnp.square(error(outputs, batch))

    def mae(outputs: Any, batch: Any) -> Any:
        return jnp.abs(error(outputs, batch))

    return {"mse": mse, "mae": mae}


CLASSIFICATION_METRICS = ("accuracy", "f1", "precision", "recall", "auc")
REGRESSION_METRICS = ("mse", "mae", "rmse", "r2")


def run_metrics(config: RunConfig, regression: bool, std: float | None) -> dict[str, Any]:
    """``--metrics`` for the Trainer; regression errors in the label column's units (``std``: the
    target's deviation; the model learns the standardised target).

    >>> sorted(run_metrics(RunConfig(), True, 2.0)), run_metrics(RunConfig(metrics=["f1"]), False, None)
    (['mae', 'mse', 'r2', 'rmse'], {'f1': 'f1'})
    """
    if not regression:
        names = config.metrics or ["accuracy"]
        for name in names:
            if name not in CLASSIFICATION_METRICS and not re.fullmatch(r"top\d+_accuracy", name):
                raise ConfigError(
                    f"--metrics {name}: not a classification metric; known: "
                    f"{', '.join(CLASSIFICATION_METRICS)}, topK_accuracy"
                    + did_you_mean(name, CLASSIFICATION_METRICS)
                )
        return {name: name for name in names}
    scale = float(std or 1.0)
    errors = label_unit_errors(scale)
    out: dict[str, Any] = {}
    for name in config.metrics or REGRESSION_METRICS:
        if name in errors:
            out[name] = errors[name]
        elif name == "rmse":
            out[name] = SplitMetric(lambda o, t: rmse(o, t) * scale, classification=False)
        elif name == "r2":
            out[name] = SPLIT_METRICS["r2"]
        else:
            raise ConfigError(
                f"--metrics {name}: not a regression metric; known: {', '.join(REGRESSION_METRICS)}"
                + did_you_mean(name, REGRESSION_METRICS)
            )
    return out


def run_loss(config: RunConfig, regression: bool, class_weights: list[float] | None) -> Any:
    """``--loss`` (checked against the task), weighted per class by ``class_weights``."""
    name = config.loss or ("mse" if regression else "cross_entropy")
    if regression != (name != "cross_entropy"):
        task = "regression" if regression else "classification"
        raise ConfigError(
            f"--loss {name} does not fit a {task} task; use "
            + ("mse, mae or huber" if regression else "cross_entropy")
        )
    if class_weights is None:
        return name
    if regression:
        raise ConfigError("--class-weights is for classification; this task is regression")
    weights = jnp.asarray(class_weights, jnp.float32)
    base = resolve_loss("cross_entropy", TARGETS)

    def weighted(outputs: Any, batch: Any) -> Any:
        y = jnp.clip(batch[TARGETS].astype(jnp.int32), 0, len(class_weights) - 1)
        return base.per_example(outputs, batch) * weights[y]

    return dataclasses.replace(base, per_example=weighted)
