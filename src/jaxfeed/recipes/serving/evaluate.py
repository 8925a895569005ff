"""The eval and predict recipes: a run folder's model on data, files, folders or tables.

Both serve the run's export (``model/``: the best checkpoint as StableHLO with its declared
preprocessing) and need nothing else from the run: not the model file, not the training data, and
they run no code from the folder. Another checkpoint (``--checkpoint last`` or a step), or a run
whose model could not be exported, is rebuilt from ``checkpoints/``: jaxfeed's own models by
name, a model file of the user's only with ``--trust-code``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed import load_dataset
from jaxfeed.data.dataset import Dataset, DatasetDict
from jaxfeed.data.formats.files import file_format
from jaxfeed.data.load.folder import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from jaxfeed.recipes import audio as audiomod
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes import report
from jaxfeed.recipes.config import ConfigError, RunRecord
from jaxfeed.recipes.run_data import load_run_data
from jaxfeed.recipes.serving import text_serve
from jaxfeed.recipes.serving.saved import SavedRun, read_saved
from jaxfeed.serve.export import ExportError, load_exported
from jaxfeed.serve.spec import ServingSpec, SpecError, category_key

MODEL_DIR = "model"


@dataclass
class Served:
    """A run's model as eval and predict use it: raw inputs -> model outputs."""

    spec: ServingSpec
    logits: Callable[[Any], np.ndarray]
    checkpoint: dict[str, Any]  # step, epoch, which, source

    def outputs(self, raw: Any) -> np.ndarray:
        """Probabilities or regression values (label units), as predict prints them."""
        try:
            return self.spec.outputs(self.logits(raw))
        except SpecError as err:
            raise ConfigError(str(err)) from None


def serve(saved: SavedRun, checkpoint: str = "best") -> Served:
    """The run's export for ``best`` (no code imported), else checkpoint ``checkpoint`` in a
    rebuilt trainer (a user's model file only if the run was read with ``trust_code``); the run's
    kind says how its raw inputs reach the model (a text run's tokenizer turns texts into token
    ids)."""
    run, prep, kind, labels = saved.out, saved.prep, saved.kind, saved.labels
    kind.open_served(prep, run)
    folder = run / MODEL_DIR
    if checkpoint == "best" and kind.servable(folder):
        try:
            served = load_exported(folder)
        except ExportError as err:
            raise ConfigError(f"{err}; eval and predict serve model/ ({kind.retrain})") from err
        spec, logits = kind.exported_logits(served, prep, labels)
        which = {
            "step": served.config.get("checkpoint_step"),
            "epoch": served.config.get("checkpoint_epoch"),
            "which": "best",
            "source": "model/",
        }
        return Served(spec, logits, which)
    trainer = saved.trainer()
    meta = saved.restore(trainer, checkpoint)
    which = {"step": int(meta["step"]), "epoch": int(meta["epoch"]), "which": checkpoint,
             "source": "checkpoints/"}  # fmt: skip
    return Served(prep.serving(labels), kind.trained_logits(trainer, prep), which)


# ---------------------------------------------------------------------------------- eval
def evaluate(
    run_dir: str,
    *,
    checkpoint: str = "best",
    split: str | None = None,
    data: str | None = None,
    data_dir: str | None = None,
    plot: bool = True,
    trust_code: bool = False,
) -> dict[str, Any]:
    """Evaluate checkpoint ``checkpoint`` of a run on its held-out test split (its validation
    split when it has none), on ``split`` of ``data``, or on all of ``data`` when it has no
    splits."""
    saved = read_saved(run_dir, trust_code=trust_code)
    run, record, config, prep, kind = saved.out, saved.record, saved.config, saved.prep, saved.kind
    task, labels = saved.task, saved.labels
    if data is None and split is None:
        ds, split_name, note = _held_out(saved, data_dir)
    else:
        ds, split_name, note = _given_split(record, prep, data, data_dir, split)
    if ds.num_rows == 0:
        raise ConfigError(f"split {split_name!r} of {run}'s data has no rows: nothing to evaluate")
    if task == "lm":
        return text_serve.evaluate_lm(saved, ds, split_name, checkpoint)
    ds, dropped = kind.eval_rows(prep, ds, split_name)  # a text run: raw texts, served tokenized
    note = "; ".join(n for n in (note, dropped) if n) or None
    served = serve(saved, checkpoint)
    chunks = [served.logits(kind.raw_batch(prep, b)) for b in _batches(ds, config.batch_size)]
    width = len(labels) if task == "classification" else 1
    outputs = np.concatenate(chunks) if chunks else np.zeros((0, width), np.float32)
    truth = np.asarray(ds.with_format("numpy")[prep.label_column])
    out: dict[str, Any] = {
        "run": str(run),
        "checkpoint": served.checkpoint,
        "split": split_name,
        "task": task,
    }
    if note:
        out["note"] = note
    if task == "classification":
        out.update(_classification(run, record, outputs, truth, split_name, plot))
    else:
        standard = outputs.reshape(len(outputs), -1)[:, 0].astype(np.float64)
        target = (truth.astype(np.float64) - prep.target_mean) / prep.target_std
        out["loss"] = round(float(np.mean((standard - target) ** 2)) if len(truth) else 0.0, 6)
        out.update(report.regression_report(truth, served.spec.outputs(outputs)))
    return out


def _held_out(saved: SavedRun, data_dir: str | None) -> tuple[Dataset, str, str | None]:
    """The run's own test split (its validation split when it has none), loaded as trained."""
    run, config, prep = saved.out, saved.config, saved.prep
    if not datamod.exists_or_named(config.data):
        raise ConfigError(
            f"the run's data {config.data} is gone: give --data (a file or folder with the "
            f"columns {[*prep.input_columns[:5], prep.label_column]})"
        )
    config = dataclasses.replace(config, data_dir=data_dir or config.data_dir)
    labels = saved.labels if saved.task == "classification" else None
    splits = load_run_data(config, labels, lambda *_: saved.kind).splits
    if splits.test is not None:
        return splits.test, splits.test_name, None
    if splits.eval is not None:
        return splits.eval, splits.eval_name, None
    raise ConfigError(
        f"{run} has no test or validation split (trained with --val-split 0); give --split"
    )


def _given_split(record: RunRecord, prep: Any, data: str | None, data_dir: str | None,
                 split: str | None) -> tuple[Dataset, str, str | None]:  # fmt: skip
    """``split`` of ``data`` (the run's data by default), else its test or validation split, or
    all of it when it has no splits."""
    config, task = record.options, record.resolved["task"]
    corpus = (config.sample_by or "concat") if task == "lm" else "line"  # a .txt: as trained
    source = datamod.detect(data or config.data, data_dir or config.data_dir, corpus)
    parts: dict[str, Dataset] = dict(source.data)
    wanted = [c for c in [*prep.input_columns, prep.label_column] if c]
    for name, part in parts.items():
        absent = [c for c in wanted if c not in part.features]
        if absent:
            raise ConfigError(
                f"--data {source.path}: split {name!r} has no column {absent[0]!r} (the run "
                f"reads {wanted[:6]}{'...' if len(wanted) > 6 else ''}); its columns are "
                f"{list(part.features)[:12]}"
            )
    if task == "classification":
        parts, _ = datamod.encode_labels(parts, prep.label_column, list(record.resolved["labels"]))
    if split is not None:
        return datamod.select_split(DatasetDict(parts), split, "--split"), split, None
    if (name := next((s for s in datamod.EVAL_SPLITS if s in parts), None)) is not None:
        return parts[name], name, None
    if len(parts) == 1:
        ds = next(iter(parts.values()))
        return ds, "all", f"{source.path} has no splits: evaluating all {ds.num_rows:,} rows"
    raise ConfigError(
        f"--data {source.path} has the splits {sorted(parts)}, none of them test or "
        "validation: give --split"
    )


def _classification(run: Path, record: RunRecord, outputs: np.ndarray, truth: np.ndarray,
                    split_name: str, plot: bool) -> dict[str, Any]:  # fmt: skip
    """A classifier's loss (as trained: class-weighted, and the plain one beside it), its report
    and, with ``plot``, its confusion matrix drawn into the run folder."""
    labels = list(record.resolved["labels"])
    weights = record.resolved.get("class_weights")
    out: dict[str, Any] = {"loss": round(_cross_entropy(outputs, truth, weights), 6)}
    if weights is not None:  # the loss as trained and selected on; the plain one beside it
        out["loss_weighting"] = f"class-weighted {list(weights)} (--class-weights, as trained)"
        out["unweighted_loss"] = round(_cross_entropy(outputs, truth), 6)
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
    return out


def _batches(ds: Dataset, size: int) -> Iterator[dict[str, Any]]:
    rows = ds.with_format("numpy")
    for start in range(0, ds.num_rows, size):
        yield rows[start : start + size]


def _cross_entropy(
    logits: np.ndarray, truth: np.ndarray, class_weights: list[float] | None = None
) -> float:
    """The mean cross entropy; with ``class_weights`` each row's weighted by its class, averaged
    over rows, as the training loss is (:func:`jaxfeed.recipes.train.trainer.run_loss`).

    >>> logits, truth = np.log(np.array([[0.5, 0.5], [0.25, 0.75]])), np.array([0, 1])
    >>> round(_cross_entropy(logits, truth), 4), round(_cross_entropy(logits, truth, [2.0, 0.0]), 4)
    (0.4904, 0.6931)
    """
    if not len(truth):
        return 0.0
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    ids = truth.astype(np.int64)
    losses = -log_p[np.arange(len(truth)), ids]
    if class_weights is not None:
        losses = losses * np.asarray(class_weights, np.float64)[ids]
    return float(losses.mean())


def format_evaluation(result: dict[str, Any]) -> str:
    if result["task"] == "lm":
        return text_serve.format_lm(result)
    ck = result["checkpoint"]
    epoch = "" if ck.get("epoch") is None else f"epoch {ck['epoch']}, "
    head = (
        f"checkpoint step {ck['step']} ({epoch}{ck['which']}, from {ck.get('source', 'checkpoints/')}), "
        f"split {result['split']!r}, {result['rows']:,} rows"
    )
    if result.get("note"):
        head = f"{result['note']}\n{head}"
    if result["task"] == "classification":
        weighted = (
            f" (class-weighted, as trained; unweighted {result['unweighted_loss']:.4f})"
            if "loss_weighting" in result
            else ""
        )
        body = (
            f"loss {result['loss']:.4f}{weighted}  accuracy {result['accuracy']:.4f}\n\n"
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


# ---------------------------------------------------------------------------------- predict
def predict(
    run_dir: str,
    inputs: list[str],
    *,
    checkpoint: str = "best",
    top_k: int = 3,
    trust_code: bool = False,
    strict: bool = False,
) -> tuple[list[dict], list[str]]:
    """Predictions for image files and folders (recursively, in sorted order), or for the rows of
    tables (a run trained on a table), preprocessed as in training; returns them (one per image
    or row: ``input``, ``label`` and ``score``, or ``prediction``) and notes on what changed
    (categories unseen in training, counted per column: ``strict`` makes one an error)."""
    return list(iter_predictions(run_dir, inputs, checkpoint=checkpoint, top_k=top_k,
                                 trust_code=trust_code, notes=(notes := []),
                                 strict=strict)), notes  # fmt: skip


def iter_predictions(
    run_dir: str,
    inputs: list[str],
    *,
    checkpoint: str = "best",
    top_k: int = 3,
    trust_code: bool = False,
    notes: list[str] | None = None,
    strict: bool = False,
) -> Iterator[dict[str, Any]]:
    """:func:`predict` one batch at a time (``notes`` is filled as batches are read)."""
    saved = read_saved(run_dir, trust_code=trust_code)
    size, kind = saved.config.batch_size, saved.kind
    preprocess = saved.record.resolved["preprocess"]
    for given in inputs if kind.reads != "texts" else ():  # a text run takes texts too
        if not Path(given).exists():
            raise ConfigError(datamod.no_such_path(given))
    served = serve(saved, checkpoint)
    spec = served.spec
    notes = notes if notes is not None else []
    which = {k: served.checkpoint[k] for k in ("step", "epoch")}
    batches = READERS[kind.reads](inputs, spec, size, notes, preprocess, kind)
    unseen = Unseen(spec, strict)  # a table's categories (other kinds have none)
    for names, raw in batches:
        unseen.count(names, raw)
        outputs = served.outputs(raw)
        if spec.task == "regression":
            for name, value in zip(names, outputs, strict=True):
                yield {"input": name, "prediction": float(value), "checkpoint": which}
            continue
        k = min(top_k, len(spec.labels))
        for name, p in zip(names, outputs, strict=True):
            top = np.argsort(-p, kind="stable")[:k]
            yield {
                "input": name,
                "label": spec.labels[top[0]],
                "score": round(float(p[top[0]]), 6),
                "top": [{"class": int(i), "label": spec.labels[i], "probability": round(float(p[i]), 6)} for i in top],
                "checkpoint": which,
            }  # fmt: skip
    if unseen.note():
        notes.append(unseen.note())


UNSEEN = "unseen in training"  # the note on categories predict met that the run never saw


class Unseen:
    """Categories of a table's rows that the run never saw (encoded in the column's "unknown"
    slot), counted per column; ``strict``: the first one is an error naming its row."""

    def __init__(self, spec: ServingSpec, strict: bool) -> None:
        self.columns = [c for c in spec.columns if c.kind == "categorical"]
        self.strict = strict
        self.counts: dict[str, dict[str, int]] = {c.name: {} for c in self.columns}

    def count(self, names: list[str], raw: Any) -> None:
        for column in self.columns:
            known = set(column.vocabulary)
            for name, value in zip(names, np.asarray(raw[column.name], object).tolist(),
                                   strict=True):  # fmt: skip
                key = category_key(value)
                if key is None or key in known:
                    continue
                if self.strict:
                    raise ConfigError(
                        f"{name}: column {column.name!r} has {key!r}, a category unseen in "
                        f"training (known: {', '.join(column.vocabulary[:8])}"
                        f"{', ...' if len(column.vocabulary) > 8 else ''}); drop --strict to "
                        "predict it as unknown"
                    )
                self.counts[column.name][key] = self.counts[column.name].get(key, 0) + 1

    def note(self) -> str | None:
        """``unseen in training: city 2 rows (paris 1, lyon 1); ...`` or None."""
        parts = []
        for column, values in self.counts.items():
            if values:
                rows = sum(values.values())
                shown = ", ".join(f"{v!r} {n}" for v, n in list(values.items())[:5])
                more = ", ..." if len(values) > 5 else ""
                parts.append(f"{column!r} {plural(rows, 'row')} ({shown}{more})")
        if not parts:
            return None
        return f"{UNSEEN}, predicted as unknown (--strict refuses them): " + "; ".join(parts)


def plural(count: int, noun: str) -> str:
    """``1 row``, ``2 rows``.

    >>> plural(1, "row"), plural(1200, "row")
    ('1 row', '1,200 rows')
    """
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _image_batches(inputs: list[str], spec: ServingSpec, size: int, notes: list[str],
                   preprocess: dict, kind: Any) -> Iterator[tuple[list[str], Any]]:  # fmt: skip
    """Image files and folders, read as the kind's reader spec says (an array run's: image
    files fit to its arrays)."""
    reader = kind.reader_spec(spec)
    paths = _expand(inputs, tables=False)
    table = next((p for p in paths if file_format(Path(p)) is not None), None)
    if table is not None:
        raise ConfigError(
            f"{table} is a table; this run was trained on images: predict takes image files or "
            "folders of them"
        )
    counts = {"converted": 0, "resized": 0, "composited": 0}
    for start in range(0, len(paths), size):
        chunk = paths[start : start + size]
        try:
            arrays, chunk_counts = reader.read_images(chunk)
            if reader is not spec:  # arrays of an image's shape
                arrays = reader.fit_images(arrays)
        except SpecError as err:
            raise ConfigError(str(err)) from None
        for key, n in chunk_counts.items():
            counts[key] += n
        yield chunk, arrays
    h, w = reader.hw
    if counts["resized"]:
        notes.append(f"resized {counts['resized']} of {len(paths)} images to {h}x{w}")
    if counts["converted"]:
        notes.append(f"converted {counts['converted']} to mode {reader.image_mode}")
    if counts.get("composited"):
        rgb = ",".join(map(str, reader.image_background or ()))
        notes.append(f"composited the transparency of {counts['composited']} onto ({rgb})")


def _table_inputs(inputs: list[str], spec: ServingSpec, size: int, notes: list[str],
                  preprocess: dict, kind: Any) -> Iterator[tuple[list[str], Any]]:  # fmt: skip
    for path in _expand(inputs, tables=True):
        yield from _table_batches(path, spec, size)


def _audio_inputs(inputs: list[str], spec: ServingSpec, size: int, notes: list[str],
                  preprocess: dict, kind: Any) -> Iterator[tuple[list[str], Any]]:  # fmt: skip
    paths = _expand(inputs, tables=False, extensions=AUDIO_EXTENSIONS)
    yield from audiomod.audio_batches(paths, spec, size, notes)


def _text_inputs(inputs: list[str], spec: ServingSpec, size: int, notes: list[str],
                 preprocess: dict, kind: Any) -> Iterator[tuple[list[str], Any]]:  # fmt: skip
    yield from text_serve.text_batches(inputs, preprocess["text"]["column"], size)


def _column_inputs(inputs: list[str], spec: ServingSpec, size: int, notes: list[str],
                   preprocess: dict, kind: Any) -> Iterator[tuple[list[str], Any]]:  # fmt: skip
    """Arrays (vectors such as embeddings) or token ids: the run's input column of tables (or
    folders of them); arrays given image files (the digits') read them as images."""
    column = preprocess["input_columns"][0]
    if kind.reads == "arrays" and not any(file_format(Path(p)) for p in inputs):
        yield from _image_batches(inputs, spec, size, notes, preprocess, kind)
        return
    for path in _expand(inputs, tables=True):
        if file_format(Path(path)) is None:
            raise ConfigError(
                f"{path}: this run was trained on the column {column!r} of a table; give tables "
                "(CSV, Parquet, JSON Lines, Arrow) holding it, or folders of them"
            )
        rows = _table_of(path, [column]).with_format("numpy")
        for start in range(0, rows.num_rows, size):
            stop = min(start + size, rows.num_rows)
            yield [f"{path}:{i}" for i in range(start, stop)], rows[start:stop][column]


# what predict reads, as the run's kind names it (Kind.reads)
READERS = {"images": _image_batches, "tables": _table_inputs, "audio": _audio_inputs,
           "texts": _text_inputs, "arrays": _column_inputs,
           "token ids": _column_inputs}  # fmt: skip


def _expand(
    inputs: list[str], *, tables: bool, extensions: set[str] = IMAGE_EXTENSIONS
) -> list[str]:
    """Files as given; folders as their image (or audio) files, or data files, recursively,
    sorted."""
    out: list[str] = []
    for given in inputs:
        path = Path(given)
        if not path.is_dir():
            out.append(given)
            continue
        found = sorted(
            str(p)
            for p in path.rglob("*")
            if p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
            and (file_format(p) is not None if tables else p.suffix.lower() in extensions)
        )
        if not found:
            what = (
                "data files (CSV, Parquet, JSON Lines, Arrow)"
                if tables
                else ("images" if extensions is IMAGE_EXTENSIONS else "audio files")
            )
            raise ConfigError(f"{given} is a folder with no {what} in it")
        out += found
    return out


def _table_batches(path: str, spec: ServingSpec, size: int) -> Iterator[tuple[list[str], Any]]:
    if file_format(Path(path)) is None:
        raise ConfigError(
            f"{path}: this run was trained on a table; give tables (CSV, Parquet, JSON Lines, "
            "Arrow) or folders of them"
        )
    rows = _table_of(path, [c.name for c in spec.columns]).with_format("numpy")
    for start in range(0, rows.num_rows, size):
        stop = min(start + size, rows.num_rows)
        yield [f"{path}:{i}" for i in range(start, stop)], rows[start:stop]


def _table_of(path: str, names: list[str]) -> Dataset:
    """The ``names`` columns of the table ``path`` (one missing refused, naming it)."""
    try:
        ds = load_dataset(path, split="train")
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read {path}: {str(err).splitlines()[0]}") from err
    missing = [c for c in names if c not in ds.features]
    if missing:
        raise ConfigError(f"{path} has no column {missing[0]!r}; the run reads {names[:10]}")
    return ds.select_columns(names)
