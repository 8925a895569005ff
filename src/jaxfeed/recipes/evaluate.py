"""The eval and predict recipes: a run folder's checkpoint on data or files."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed.recipes import data as datamod
from jaxfeed.recipes import report
from jaxfeed.recipes.config import ConfigError, read_run
from jaxfeed.recipes.preprocess import INPUTS, TARGETS
from jaxfeed.recipes.run import build_run_trainer, load_run_data, restore


def evaluate(
    run_dir: str,
    *,
    checkpoint: str = "best",
    split: str | None = None,
    data: str | None = None,
    data_dir: str | None = None,
    plot: bool = True,
) -> dict[str, Any]:
    """Evaluate checkpoint ``checkpoint`` of a run on its held-out test split, or its validation
    split when it has none (or ``split`` of ``data``)."""
    from jaxfeed import DataLoader

    run = Path(run_dir)
    record = read_run(run)
    config = record.options
    if data is not None or data_dir is not None:
        config = dataclasses.replace(
            config, data=data or config.data, data_dir=data_dir or config.data_dir
        )
    task, labels = record.resolved["task"], record.resolved["labels"]
    run_data = load_run_data(config, labels if task == "classification" else None)
    if split is None:
        splits = run_data.splits
        if splits.test is not None:
            ds, split_name = splits.test, splits.test_name
        elif splits.eval is not None:
            ds, split_name = splits.eval, splits.eval_name
        else:
            raise ConfigError(
                f"{run} has no test or validation split (trained with --val-split 0); give --split"
            )
    else:
        from jaxfeed.dataset import DatasetDict

        source = dict(run_data.source.data)
        if task == "classification":
            source, _ = datamod.encode_labels(source, run_data.columns.label, labels)
        ds, split_name = datamod.select_split(DatasetDict(source), split, "--split"), split
    trainer, prep = build_run_trainer(record, run)
    ds = prep.prepare(ds)
    meta = restore(trainer, run, record, checkpoint)
    loader = DataLoader(ds, config.batch_size, transform=prep)
    result = trainer.evaluate(loader)
    outputs = np.asarray(trainer.predict(loader))
    truth = np.asarray(ds.with_format("numpy")[prep.label_column])
    out: dict[str, Any] = {
        "run": str(run),
        "checkpoint": {"step": int(meta["step"]), "epoch": int(meta["epoch"]), "which": checkpoint},
        "split": split_name,
        "task": task,
        "loss": round(float(result["loss"]), 6),
    }
    if task == "classification":
        out.update(report.classification_report(truth, outputs.argmax(-1), labels))
        if plot:
            path = run / f"confusion-{split_name.replace('/', '_')}.png"
            try:
                report.plot_confusion(
                    np.asarray(out["confusion_matrix"]), labels, path,
                    f"{run.name}: {split_name}, accuracy {out['accuracy']:.4f}",
                )  # fmt: skip
                out["plot"] = str(path)
            except OSError as err:  # a read-only run folder: the report is still the result
                out["plot"] = None
                out["plot_error"] = (
                    f"not writing the confusion matrix PNG into {run}: {err.strerror or err}"
                )
    else:
        out.update(
            report.regression_report(truth, prep.unscale(outputs.reshape(len(outputs), -1)[:, 0]))
        )
    return out


def format_evaluation(result: dict[str, Any]) -> str:
    ck = result["checkpoint"]
    head = (
        f"checkpoint step {ck['step']} (epoch {ck['epoch']}, {ck['which']}), split {result['split']!r}, "
        f"{result['rows']:,} rows"
    )
    if result["task"] == "classification":
        body = (
            f"loss {result['loss']:.4f}  accuracy {result['accuracy']:.4f}\n\n"
            + report.format_classification(result)
        )
        if result.get("plot"):
            body += f"\n\nwrote {result['plot']}"
        elif result.get("plot_error"):
            body += f"\n\n{result['plot_error']}"
    else:
        r2 = "n/a" if result["r2"] is None else f"{result['r2']:.4f}"
        body = f"loss {result['loss']:.4f} (standardised)  MSE {result['mse']:.6g}  RMSE {result['rmse']:.6g}  MAE {result['mae']:.6g}  R2 {r2}"
    return f"{head}\n{body}"


def predict(
    run_dir: str, inputs: list[str], *, checkpoint: str = "best", top_k: int = 3
) -> tuple[list[dict], list[str]]:
    """Predictions of checkpoint ``checkpoint`` for image files (or rows of data files, for a run
    trained on a table), preprocessed as in training; returns them and what was changed."""
    run = Path(run_dir)
    record = read_run(run)
    trainer, prep = build_run_trainer(record, run)
    task, labels = record.resolved["task"], record.resolved["labels"]
    if prep.kind == "table":
        x, names, notes = _table_inputs(inputs, prep)
    else:
        x, notes = prep.image_files(inputs)
        names = list(inputs)
    import jax

    meta = restore(trainer, run, record, checkpoint)
    outputs = []
    size = record.options.batch_size
    for i in range(0, len(x), size):
        chunk = x[i : i + size]
        batch = jax.device_put({INPUTS: chunk, TARGETS: np.zeros(len(chunk), np.int32)})
        outputs.append(np.asarray(trainer.predict(batch)))
    logits = np.concatenate(outputs)
    which = {"step": int(meta["step"]), "epoch": int(meta["epoch"])}
    results = []
    if task == "regression":
        values = prep.unscale(logits.reshape(len(logits), -1)[:, 0])
        for name, v in zip(names, values, strict=True):
            results.append({"input": name, "prediction": float(v), "checkpoint": which})
        return results, notes
    probabilities = np.asarray(jax.nn.softmax(logits, axis=-1))
    k = min(top_k, len(labels))
    for name, p in zip(names, probabilities, strict=True):
        top = np.argsort(-p, kind="stable")[:k]
        results.append({
            "input": name,
            "top": [{"class": int(i), "label": labels[i], "probability": round(float(p[i]), 6)} for i in top],
            "checkpoint": which,
        })  # fmt: skip
    return results, notes


def _table_inputs(paths: list[str], prep: Any) -> tuple[np.ndarray, list[str], list[str]]:
    from jaxfeed import load_dataset

    arrays, names = [], []
    for path in paths:
        try:
            ds = load_dataset(path, split="train")
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read {path}: {str(err).splitlines()[0]}") from err
        missing = [c for c in prep.input_columns if c not in ds.features]
        if missing:
            raise ConfigError(
                f"{path} has no column {missing[0]!r}; the run reads {prep.input_columns}"
            )
        columns = ds.select_columns(prep.input_columns).with_format("numpy")[:]
        arrays.append(prep.inputs(columns))
        names += [f"{path}:{i}" for i in range(ds.num_rows)]
    return np.concatenate(arrays), names, []
