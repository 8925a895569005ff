"""A run folder's ``config.json``: :class:`RunRecord` (the options and what the run resolved
from its data), :func:`read_run`, and the flat ``config.json`` of jaxfeed 0.1's first command."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxfeed import __version__
from jaxfeed.recipes.config.groups import RUN_FORMAT, RUN_VERSION, TASKS, ConfigError
from jaxfeed.recipes.config.run_config import RunConfig


@dataclass
class RunRecord:
    """A run folder's ``config.json``: the options, and what the run resolved from its data."""

    options: RunConfig
    resolved: dict[str, Any]
    version: int = RUN_VERSION

    def to_json(self) -> str:
        payload = {
            "format": RUN_FORMAT,
            "version": self.version,
            "jaxfeed": __version__,
            "options": self.options.saved(),
            **self.resolved,
        }
        return json.dumps(payload, indent=2)


RESOLVED_KEYS = (
    "task", "labels", "preprocess", "best_metric", "best_mode", "data_kind", "eval_split",
    "test_split", "class_weights", "lr_logged", "processes", "devices", "model_code",
    "data_fingerprint", "pretrained", "pretrained_eval", "budget", "early_stopping", "lr_finder",
    "baselines", "choice",
)  # fmt: skip


def _train_hint(run: Path) -> str:
    """How to make a run of ``run``: a folder of other files is data to train on (``--out``
    refuses it), anything else a run folder to train into.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _train_hint(folder / "new").startswith("train one with: jaxfeed train --data DATA --out")
    True
    >>> (folder / "cats").mkdir()
    >>> _train_hint(folder).replace(str(folder), "FOLDER")
    'it holds cats: if that is data, train on it with: jaxfeed train --data FOLDER --out runs/NAME, then give runs/NAME here'
    """
    try:
        names = sorted(p.name for p in run.iterdir()) if run.is_dir() else []
    except OSError:
        names = []
    if not names:
        return f"train one with: jaxfeed train --data DATA --out {run}"
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (
        f"it holds {shown}: if that is data, train on it with: jaxfeed train --data {run} --out "
        "runs/NAME, then give runs/NAME here"
    )


def read_run(run: str | os.PathLike) -> RunRecord:
    """The :class:`RunRecord` of a run folder; a clear ``ConfigError`` for anything else.

    Runs written by jaxfeed 0.1's first command (a flat ``config.json``) are read too.

    >>> import tempfile
    >>> try:
    ...     read_run(tempfile.mkdtemp())
    ... except ConfigError as e:
    ...     print("is not a jaxfeed run folder" in str(e))
    True
    """
    run = Path(run)
    path = run / "config.json"
    if not path.is_file():
        raise ConfigError(f"{run} is not a jaxfeed run folder (no config.json); {_train_hint(run)}")
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from err
    except RecursionError:
        raise ConfigError(f"{path} is not a run's config.json: nested too deeply to read") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(values).__name__}")
    if is_legacy_run(values):
        return legacy_record(values, path)
    if values.get("format") != RUN_FORMAT:
        raise ConfigError(
            f'{path} was not written by jaxfeed train (no "format": "{RUN_FORMAT}"); is {run} a run folder?'
        )
    version = values.get("version")
    if not isinstance(version, int) or version > RUN_VERSION:
        raise ConfigError(
            f"{path} has run format version {version!r}; this jaxfeed reads versions up to {RUN_VERSION}: "
            "upgrade jaxfeed"
        )
    options = values.get("options")
    if not isinstance(options, dict):
        raise ConfigError(f'{path}: "options" must be an object of run options')
    old_defaults = {"epochs": 10, "batch_size": 64}  # runs saved before the budget followed data
    config = RunConfig.from_dict({**old_defaults, **options}, str(path))
    resolved = {k: values[k] for k in RESOLVED_KEYS if k in values}
    missing = [k for k in ("task", "labels", "preprocess") if k not in resolved]
    if missing:
        raise ConfigError(f"{path}: missing {missing[0]!r}; the run folder is damaged")
    if not isinstance(resolved["preprocess"], dict):
        raise ConfigError(f'{path}: "preprocess" must be an object')
    if resolved["task"] not in TASKS:
        raise ConfigError(
            f"{path}: task must be one of {', '.join(TASKS)}, got {resolved['task']!r}"
        )
    return RunRecord(config, resolved, version)


# ---------------------------------------------------------------------------------- 0.1 runs
LEGACY_KEYS = {"input_column", "label_column", "input_shape", "labels", "model"}


def is_legacy_run(values: dict[str, Any]) -> bool:
    """A flat ``config.json`` of the first ``jaxfeed train`` (before run configs had a format)."""
    return "format" not in values and set(values) >= LEGACY_KEYS


def legacy_options(values: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "data", "data_dir", "split_train", "split_eval", "label_column", "model", "api", "epochs",
        "batch_size", "lr", "weight_decay", "seed", "deterministic", "num_workers",
    )  # fmt: skip
    out = {"epochs": 10, "batch_size": 64, **{k: values[k] for k in keep if k in values}}
    out["input_columns"] = [values["input_column"]]
    out["task"] = "classification"
    return out


def legacy_record(values: dict[str, Any], path: Path) -> RunRecord:
    try:
        config = RunConfig.from_dict(legacy_options(values), str(path))
        shape = [int(d) for d in values["input_shape"]]
        labels = [str(n) for n in values["labels"]]
        preprocess = {
            "kind": "image" if values.get("image_mode") else "array",
            "input_columns": [values["input_column"]],
            "label_column": values["label_column"],
            "input_shape": shape,
            "image_mode": values.get("image_mode"),
            "image_size": shape[:2] if values.get("image_mode") else None,
            "scale": str(values.get("input_dtype", "uint8")).startswith(("uint", "int")),
        }
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(
            f"{path}: a config.json of an earlier jaxfeed that cannot be read: {err}"
        ) from err
    resolved = {
        "task": "classification",
        "labels": labels,
        "preprocess": preprocess,
        "best_metric": "eval_accuracy",  # what the first jaxfeed ranked checkpoints by
        "data_kind": "legacy",
    }
    return RunRecord(config, resolved, version=1)
