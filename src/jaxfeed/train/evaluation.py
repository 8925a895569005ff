"""Evaluation and prediction of a :class:`~jaxfeed.train.Trainer` (the model in eval mode).

:class:`EvalMixin` holds ``evaluate`` (mean loss and metrics, and the metrics over a whole split)
and ``predict`` (the model's outputs, token ids checked against the vocabulary).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxfeed.train import ids
from jaxfeed.train.placement import gather


class EvalMixin:
    """``evaluate`` and ``predict`` (a part of :class:`~jaxfeed.train.Trainer`)."""

    def evaluate(self, loader: Iterable) -> dict[str, float]:
        """Mean loss and metrics over every labelled example of ``loader`` (the model in eval
        mode); whole-split metrics (``f1``, ``auc``, ``r2``, ...) from the outputs of every
        labelled row."""
        sums = None
        outputs, targets = [], []
        for batch in loader:
            arrays, n = self._batch(batch, "eval")
            if sums is None:
                sums = self._sums()
            sums = self.core.eval_step(self.core.state, sums, arrays, np.int32(n))
            if self.split_metrics:
                predicted = self.core.predict_step(self.core.state, arrays)  # whole on the host:
                outputs.append(np.asarray(gather(predicted))[:n])  # every process calls it
                targets.append(np.asarray(gather(arrays[self.targets]))[:n])
        if sums is None:
            raise ValueError("the eval loader yielded no batches")
        result = self._check(sums, None)
        if self.split_metrics:
            result.update(self._split_metrics(np.concatenate(outputs), np.concatenate(targets)))
        return result

    def _split_metrics(self, outputs: np.ndarray, targets: np.ndarray) -> dict[str, float]:
        out = {}
        for name, metric in self.split_metrics.items():
            rows = targets >= 0 if metric.classification and targets.dtype.kind in "iu" else None
            out[name] = (
                metric(outputs, targets) if rows is None else metric(outputs[rows], targets[rows])
            )
        return out

    def predict(self, data: dict[str, Any] | Iterable) -> Any:
        """The model's outputs (eval mode) for one batch dict, or for every batch of a loader
        (concatenated)."""
        if isinstance(data, dict):
            arrays, n = self._batch(data, "predict")
            self._check_ids(arrays, n)
            return _rows(self.core.predict_step(self.core.state, arrays), n)
        outputs = []
        for batch in data:
            arrays, n = self._batch(batch, "predict")
            self._check_ids(arrays, n)
            outputs.append(_rows(self.core.predict_step(self.core.state, arrays), n))
        if not outputs:
            raise ValueError("the loader yielded no batches")
        return jax.tree.map(lambda *parts: jnp.concatenate(parts), *outputs)

    def _check_ids(self, arrays: dict[str, jax.Array], n: int) -> None:
        """Refuse, naming it, a token id outside the model's vocabulary (after ``preprocess``)."""
        spec = self.core.spec
        if not spec.id_columns:
            return
        if self._id_check is None:
            self._id_check = jax.jit(
                lambda b, n: ids.first_bad(spec.preprocess(b), spec.id_columns, n)
            )
        found = jax.device_get(self._id_check(arrays, np.int32(n)))
        if int(found["found"]):
            raise ValueError(ids.message(found, spec.id_columns, "in the predict batch"))


def _rows(outputs: Any, n: int) -> Any:
    return jax.tree.map(lambda x: x[:n], outputs)
