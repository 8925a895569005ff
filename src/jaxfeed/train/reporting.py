"""What the host reads of a :class:`~jaxfeed.train.Trainer`'s figures: checks and reports.

:class:`ReportMixin` brings the sums the compiled steps accumulate on the devices to the host,
refuses impossible labels and token ids and a non-finite training loss
(:class:`NonFiniteLossError`), averages them, and shows them: the progress bar and the line
printed after each epoch.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import jax
from tqdm.auto import tqdm

from jaxfeed.train import ids

REPORT_SECONDS = 0.5  # how often the progress bar reads metrics from the device


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; nothing of that state was written.

    The message names the global step and epoch where it first happened, whatever ``log_every``
    is: each step records it on the device, and the host reads it when it next reads metrics.

    >>> import numpy as np, optax
    >>> from flax import nnx
    >>> from jaxfeed import DataLoader, Dataset, Trainer
    >>> from jaxfeed.models import MLP
    >>> from jaxfeed.train import NonFiniteLossError
    >>> data = Dataset.from_dict({"x": np.full((8, 2), np.inf, np.float32), "label": [0, 1] * 4})
    >>> trainer = Trainer(MLP(2, (2,), hidden=(4,), rngs=nnx.Rngs(0)), optax.sgd(0.1), inputs="x", verbose=0)
    >>> try:
    ...     trainer.fit(DataLoader(data, 4), epochs=1)
    ... except NonFiniteLossError as err:
    ...     print(type(err).__name__)
    NonFiniteLossError
    """


class ReportMixin:
    """Host figures of the trainer: read, check, average and show (a part of
    :class:`~jaxfeed.train.Trainer`)."""

    def _check(
        self, sums: dict[str, jax.Array], epoch: int | None, first_step: int = 0
    ) -> dict[str, float]:
        """Host values of the sums: mean loss and metrics; raises on impossible labels and on a
        non-finite training loss."""
        return self._means(self._host_sums(sums, epoch, first_step))

    def _host_sums(
        self, sums: dict[str, jax.Array], epoch: int | None, first_step: int = 0
    ) -> dict[str, Any]:
        """The sums on the host, checked: raises on impossible labels and on a non-finite
        training loss."""
        host = jax.device_get(sums)
        where = "in the eval data" if epoch is None else f"at epoch {epoch}"
        if int(host["bad_id_step"]) >= 0:  # before the labels: a next-token target is an id
            at = where
            if epoch is not None:
                at += f", step {int(host['bad_id_step']) - first_step + 1} of the epoch"
            raise ValueError(ids.message(host, self.core.spec.id_columns, at))
        if int(host["bad_label_step"]) >= 0:
            step = int(host["bad_label_step"])
            if epoch is not None:
                where += f", step {step - first_step + 1} of the epoch"
            classes = int(host["classes"])
            raise ValueError(
                f"label {int(host['bad_label'])} {where} is outside the model's {classes} classes "
                f"(0..{classes - 1}; -1 means no label) in column {self.targets!r}"
            )
        bad = int(host["first_bad"])
        if epoch is not None and bad >= 0:
            raise NonFiniteLossError(
                f"the training loss is not finite at epoch {epoch}, step {bad - first_step + 1} of the "
                f"epoch (global step {bad + 1}); training stopped and this state was not written anywhere"
            )
        unlabelled = int(host["unlabelled"])
        if unlabelled and not self._warned_unlabelled:
            self._warned_unlabelled = True
            warnings.warn(
                f"{unlabelled} rows {where} have label -1 (no label) in column {self.targets!r}: "
                "they are left out of the loss and the metrics",
                stacklevel=3,
            )
        return host

    def _means(self, host: Mapping[str, Any]) -> dict[str, float]:
        count = float(host["count"])
        count = count if count > 0 else 1.0
        out = {"loss": float(host["loss"]) / count}
        for name, fn in self.core.spec.metrics.items():
            value = float(host[f"m_{name}"]) / count
            finalize = getattr(fn, "finalize", None)  # e.g. perplexity: exp of the mean loss
            out[name] = finalize(value) if finalize is not None else value
        return out

    def _check_progress(self) -> None:
        """Refuse to save a state whose epoch so far saw a non-finite loss."""
        p = self._progress
        if p is not None and p.sums is not None:
            self._host_sums(p.sums, p.epoch, p.first_step)

    def _interactive(self) -> bool:
        return self.verbose > 0 and sys.stdout.isatty()

    def _progress_bar(self, loader: Iterable, epoch: int, epochs: int | None) -> Any:
        if not self._interactive():
            return None

        total = len(loader) if hasattr(loader, "__len__") else None
        return tqdm(
            total=total,
            desc=f"epoch {epoch}/{epochs or '-'}",
            unit="batch",
            dynamic_ncols=True,
            leave=True,
        )

    def _postfix(self, host: dict[str, float], rows: int, seconds: float) -> dict[str, str]:
        shown = {k: f"{v:.4f}" for k, v in list(host.items())[:3]}
        shown["rows_s"] = f"{rows / max(seconds, 1e-9):,.0f}"
        return shown

    def _report_epoch(self, logs: dict[str, Any], epochs: int | None) -> None:
        if self.verbose <= 0:
            return
        parts = [f"epoch {logs['epoch']}/{epochs}" if epochs else f"epoch {logs['epoch']}"]
        for key, value in logs.items():
            if key.startswith(("train_", "eval_")) or key == "learning_rate":
                parts.append(
                    f"{key} {value:.4g}" if key == "learning_rate" else f"{key} {value:.4f}"
                )
        parts.append(f"{logs['seconds']:.2f} s, {logs['rows_per_second']:,.0f} rows/s")
        print("  ".join(parts), flush=True)
