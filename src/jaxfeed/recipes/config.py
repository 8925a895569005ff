"""The typed run configuration of ``jaxfeed train`` (one dataclass), and reading it back.

Every option of a training run is a field of :class:`RunConfig`; the command-line flags are derived
from these fields (``jaxfeed.cli.options``), ``--config FILE`` reads the same keys from JSON or YAML,
and the run folder keeps them in ``config.json`` next to what the run resolved from the data (task,
labels, preprocessing). This module imports neither JAX nor pyarrow.

>>> config = RunConfig.from_dict({"epochs": 3, "lr": "0.01"}, "example")
>>> config.epochs, config.lr, config.optimizer
(3, 0.01, 'adamw')
>>> RunConfig.from_dict({"epochs": 0}, "example")
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: example: epochs must be an integer >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

RUN_FORMAT = "jaxfeed-run"
RUN_VERSION = 2
TASKS = ("classification", "regression")


class ConfigError(ValueError):
    """A configuration value, file or flag is wrong; the message names it and what was expected."""


def option(
    default: Any,
    help: str,
    *,
    minimum: float | None = None,
    exclusive: bool = False,
    metavar: str | None = None,
    saved: bool = True,
    resumable: bool = False,
    group: str = "run",
) -> Any:
    """A :class:`RunConfig` field with what the command line and the checks need.

    ``minimum`` (with ``exclusive``: strictly above) bounds numbers; ``saved=False`` keeps the field
    out of ``config.json`` (where this process runs, not what it trains); ``resumable=True`` fields may
    differ from the saved ones on ``--resume`` (how long to train, how often to report).
    """
    meta = {
        "help": help,
        "minimum": minimum,
        "exclusive": exclusive,
        "metavar": metavar,
        "saved": saved,
        "resumable": resumable,
        "group": group,
    }
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunConfig:
    """Everything ``jaxfeed train`` needs: data, model, optimisation and run options."""

    # data
    data: str = option(
        "digits",
        "an image or audio folder, a CSV/Parquet/JSON Lines/Arrow file, a save_to_disk folder, a "
        "Hub-layout folder, a built-in name (digits, mnist, fashion_mnist, cifar10) or a cached "
        "Hub id (default: digits)",
        metavar="PATH",
        group="data",
    )
    data_dir: str | None = option(
        None, "folder of the files of mnist, fashion_mnist or cifar10", group="data"
    )
    split_train: str = option(
        "train", "split to train on; slices work: train[:80%%] (default: train)", group="data"
    )
    split_eval: str | None = option(
        None,
        "split to evaluate on (default: test or validation when the data has one, else "
        "--val-split of the train split)",
        group="data",
    )
    val_split: float | None = option(
        None,
        "carve this fraction of the train split (stratified by class) as the eval split when "
        "the data has none (default: 0.1 then)",
        minimum=0.0,
        exclusive=True,
        metavar="FRACTION",
        group="data",
    )
    input_columns: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "input column(s), comma-separated (default: the first image/array column, or every "
        "numeric column but the label of a table)",
        metavar="A,B,C",
        group="data",
    )
    label_column: str | None = option(
        None,
        "the target column (default: the first ClassLabel column, or a column named label/target)",
        metavar="NAME",
        group="data",
    )
    categorical_columns: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "table columns to one-hot encode as categories (default: text and bool columns, and "
        "integer columns of at most 10 values)",
        metavar="A,B,C",
        group="data",
    )
    missing: Literal["refuse", "impute"] = option(
        "refuse",
        "missing table cells: refuse them naming the column, or impute them (numbers: the "
        "train mean; categories: the unknown slot) (default: refuse)",
        group="data",
    )
    task: Literal["classification", "regression"] | None = option(
        None,
        "default: inferred from the label column (strings, class labels or few integers: "
        "classification; floats: regression)",
        group="data",
    )
    image_size: str | None = option(
        None,
        "resize images to N or HxW (default: the most common size of the first 64 images)",
        metavar="N|HxW",
        group="data",
    )
    image_mode: Literal["L", "RGB", "same"] | None = option(
        None,
        "decode images as L (grey) or RGB; same: refuse a folder of mixed modes (default: the "
        "widest mode of the images, said when they are mixed)",
        group="data",
    )
    # model
    model: str | None = option(
        None,
        "cnn, mlp, or FILE.py:ClassName (your own flax.nnx.Module) (default: cnn for images, mlp "
        "for tables)",
        metavar="cnn|mlp|FILE.py:ClassName",
        group="model",
    )
    api: Literal["nnx", "linen"] = option(
        "nnx", "Flax API of the built-in CNN (default: nnx)", group="model"
    )
    # optimisation
    epochs: int = option(10, "epochs in total (default: 10)", minimum=1, resumable=True)
    batch_size: int = option(64, "rows per batch (default: 64)", minimum=1)
    optimizer: Literal["adamw", "adam", "sgd"] = option("adamw", "optimizer (default: adamw)")
    lr: float = option(1e-3, "peak learning rate (default: 1e-3)", minimum=0.0, exclusive=True)
    weight_decay: float = option(
        1e-4, "decoupled weight decay (adamw; sgd: L2) (default: 1e-4)", minimum=0.0
    )
    schedule: Literal["constant", "cosine", "linear"] = option(
        "constant", "learning-rate schedule after the warmup (default: constant)"
    )
    warmup_steps: int = option(0, "optimizer steps of linear warmup from 0 (default: 0)", minimum=0)
    grad_accum: int = option(
        1,
        "accumulate gradients over K batches per optimizer step (optax.MultiSteps) (default: 1)",
        minimum=1,
        metavar="K",
    )
    precision: Literal["float32", "bfloat16"] = option(
        "float32",
        "compute dtype of forward and backward passes; parameters stay float32 (default: float32)",
    )
    patience: int | None = option(
        None,
        "stop after P epochs without a lower eval loss (default: off)",
        minimum=0,
        metavar="P",
        resumable=True,
    )
    max_steps: int | None = option(
        None,
        "stop after N optimizer steps in total, whichever of --epochs and --max-steps comes first "
        "(default: no step limit)",
        minimum=1,
        metavar="N",
        resumable=True,
    )
    eval_every: int | None = option(
        None,
        "also evaluate every N steps (default: after each epoch only)",
        minimum=1,
        metavar="N",
        resumable=True,
    )
    checkpoint_every: int | None = option(
        None,
        "also checkpoint every N steps (default: after each epoch only)",
        minimum=1,
        metavar="N",
        resumable=True,
    )
    tensorboard: bool = option(
        False,
        "write TensorBoard event files to RUN/tensorboard (needs: pip install 'jaxfeed[tensorboard]')",
        resumable=True,
    )
    seed: int = option(0, "seed of initialisation, shuffling and dropout (default: 0)", minimum=0)
    deterministic: bool = option(False, "bitwise-reproducible runs", resumable=True)
    num_workers: int = option(0, "image decoding processes (default: 0)", minimum=0, resumable=True)
    mesh: str | None = option(
        None,
        "device mesh as NAME=SIZE pairs, e.g. data=4,model=2 (one size may be -1: the devices "
        "left); batches split over its data axis (default: one data axis over every device)",
        metavar="data=N,model=M",
        resumable=True,
    )
    sharding: str | dict[str, Any] = option(  # noqa: RUF009 (option() returns a field)
        "replicate",
        "how the model and optimizer state lie on the mesh: replicate, fsdp, or logical axis "
        'rules as JSON or in a --config file, e.g. {"mlp": "model", "fsdp": true} (default: '
        "replicate)",
        metavar="replicate|fsdp|RULES",
        resumable=True,
    )
    # where and how this process runs: not saved in config.json
    out: str | None = option(
        None, "run folder (default: runs/DATA-MODEL-TIME)", saved=False, group="process"
    )
    resume: bool = option(
        False,
        "continue the run in --out from its latest checkpoint with its saved config.json",
        saved=False,
        group="process",
    )
    trust_code: bool = option(
        False,
        "--resume: import the run's own copy of a model file (code/) when the file the run "
        "names is gone; only for run folders you trust",
        saved=False,
        group="process",
    )
    num_processes: int | None = option(
        None,
        "processes of a multi-process run (or JAXFEED_NUM_PROCESSES)",
        minimum=1,
        saved=False,
        group="process",
    )
    process_id: int | None = option(
        None,
        "this process's id, 0-based (or JAXFEED_PROCESS_ID)",
        minimum=0,
        saved=False,
        group="process",
    )
    coordinator: str | None = option(
        None,
        "HOST:PORT of process 0's coordinator (or JAXFEED_COORDINATOR)",
        saved=False,
        group="process",
    )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str) -> RunConfig:
        """A config from ``values`` (defaults for the rest), each checked; errors name ``where``."""
        return cls().replace(values, where)

    def replace(self, values: dict[str, Any], where: str) -> RunConfig:
        """A copy with ``values`` (JSON/YAML values or flag strings) checked and applied."""
        known = {f.name: f for f in dataclasses.fields(self)}
        hints = _hints()
        changes = {}
        for key, value in values.items():
            name = key.replace("-", "_")
            if name not in known:
                close = [k for k in known if k.startswith(name[:4])]
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{where}: unknown option {key!r}{hint}")
            changes[name] = coerce(known[name], hints[name], value, where)
        return dataclasses.replace(self, **changes)

    def saved(self) -> dict[str, Any]:
        """The fields kept in ``config.json`` (JSON values)."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["saved"]
        }

    def differences(self, other: RunConfig) -> list[str]:
        """Saved fields whose values differ."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.metadata["saved"] and getattr(self, f.name) != getattr(other, f.name)
        ]

    def image_hw(self) -> tuple[int, int] | None:
        """``--image-size`` as ``(height, width)``.

        >>> RunConfig(image_size="32").image_hw(), RunConfig(image_size="24x32").image_hw()
        ((32, 32), (24, 32))
        """
        return None if self.image_size is None else parse_image_size(self.image_size)


def _hints() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig)


def parse_image_size(text: str) -> tuple[int, int]:
    """``"N"`` or ``"HxW"`` as ``(height, width)``; anything else raises ``ConfigError``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", str(text))
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
        raise ConfigError(
            f"expected N or HxW with positive integers (e.g. 32 or 24x32), got {text!r}"
        )
    height = int(m.group(1))
    return height, int(m.group(2)) if m.group(2) else height


def parse_mesh_text(text: str, where: str = "--mesh") -> dict[str, int]:
    """``"data=4,model=2"`` as ``{"data": 4, "model": 2}`` (checked; no JAX needed).

    >>> parse_mesh_text("data=-1,model=2")
    {'data': -1, 'model': 2}
    """
    axes: dict[str, int] = {}
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*(-1|[1-9]\d*)\s*", part)
        if not m or m.group(1) in axes:
            raise ConfigError(
                f"{where}: mesh must be NAME=SIZE pairs separated by commas, each name once "
                f"(e.g. data=4,model=2; one size may be -1), got {text!r}"
            )
        axes[m.group(1)] = int(m.group(2))
    if list(axes.values()).count(-1) > 1:
        raise ConfigError(f"{where}: at most one mesh axis may have size -1, got {text!r}")
    return axes


def parse_sharding(value: Any, where: str) -> str | dict[str, Any]:
    """``replicate``, ``fsdp``, or a dict (or its JSON text) of logical axis rules: each a mesh
    axis name, a list of them or null, and ``"fsdp": true|false``.

    >>> parse_sharding('{"mlp": "model", "fsdp": true}', "flag")
    {'mlp': 'model', 'fsdp': True}
    """
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise ConfigError(f"{where}: sharding rules are not valid JSON: {err}") from None
    if value in ("replicate", "fsdp"):
        return value
    if isinstance(value, dict):
        for key, entry in value.items():
            if key == "fsdp":
                ok = isinstance(entry, bool)
            else:
                items = entry if isinstance(entry, list) else [entry]
                ok = entry is None or all(isinstance(i, str) and i for i in items)
            if not ok:
                raise ConfigError(
                    f"{where}: sharding rule {key!r}: expected a mesh axis name, a list of them or "
                    f"null{' (fsdp: true or false)' if key == 'fsdp' else ''}, got {entry!r}"
                )
        return dict(value)
    raise ConfigError(
        f"{where}: sharding must be replicate, fsdp or a dict of logical axis rules "
        f'(e.g. {{"mlp": "model"}}), got {value!r}'
    )


def _describe(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    base = args[0] if type(None) in typing.get_args(tp) and len(args) == 1 else tp
    if typing.get_origin(base) is Literal:
        return "one of " + ", ".join(typing.get_args(base))
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        base, "a list of column names"
    )


def coerce(f: dataclasses.Field, tp: Any, value: Any, where: str) -> Any:
    """``value`` (a JSON value or a flag's text) as field ``f``'s type, checked against its bounds."""
    name = f.name
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    optional = type(None) in typing.get_args(tp)
    base = args[0] if (optional and len(args) == 1) else tp
    if name == "sharding":
        return parse_sharding(value, where)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        if optional:
            return None
        raise ConfigError(f"{where}: {name} cannot be empty; expected {_describe(tp)}")
    origin = typing.get_origin(base)
    try:
        if origin is Literal:
            if value not in typing.get_args(base):
                raise ValueError
            out: Any = value
        elif base is bool:
            if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
                value = value.lower() in ("true", "yes", "1")
            if not isinstance(value, bool):
                raise ValueError
            out = value
        elif base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            out = int(value)
        elif base is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
        elif origin is list:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ValueError
            out = [i.strip() for i in items if i.strip()]
            if not out:
                raise ValueError
        else:
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError
            out = str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name} must be {_describe(tp)}, got {value!r}") from None
    low = f.metadata.get("minimum")
    if low is not None and isinstance(out, int | float):
        bad = out <= low if f.metadata.get("exclusive") else out < low
        if bad or out != out:
            sign = ">" if f.metadata.get("exclusive") else ">="
            kind = "an integer" if base is int else "a number"
            raise ConfigError(f"{where}: {name} must be {kind} {sign} {low:g}, got {value!r}")
    if name == "val_split" and out >= 1:
        raise ConfigError(f"{where}: val_split must be a fraction between 0 and 1, got {value!r}")
    if name == "image_size":
        parse_image_size(out)
    if name == "mesh":
        parse_mesh_text(out, where)
    if (
        name == "model"
        and out not in ("cnn", "mlp")
        and not re.fullmatch(r".+\.py:[A-Za-z_]\w*", out)
    ):
        raise ConfigError(f"{where}: model must be cnn, mlp or FILE.py:ClassName, got {value!r}")
    return out


# ---------------------------------------------------------------------------------- files
def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The options in a JSON or YAML file (a run's ``config.json`` works too: its options)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it: {err.strerror or err}") from err
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml  # only for YAML files: yaml's import is not free

        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as err:
            first = str(err).strip().splitlines()[0]
            raise ConfigError(f"--config {path}: not valid YAML: {first}") from err
    else:
        try:
            values = json.loads(text)
        except ValueError as err:
            raise ConfigError(f"--config {path}: not valid JSON: {err}") from err
    if not isinstance(values, dict):
        raise ConfigError(
            f"--config {path}: expected a mapping of option names to values, got {type(values).__name__}"
        )
    if values.get("format") == RUN_FORMAT:  # a run's config.json: its options
        values = values.get("options", {})
    elif is_legacy_run(values):
        values = legacy_options(values)
    return values


@dataclass
class RunRecord:
    """A run folder's ``config.json``: the options, and what the run resolved from its data."""

    options: RunConfig
    resolved: dict[str, Any]
    version: int = RUN_VERSION

    def to_json(self) -> str:
        from jaxfeed import __version__

        payload = {
            "format": RUN_FORMAT,
            "version": self.version,
            "jaxfeed": __version__,
            "options": self.options.saved(),
            **self.resolved,
        }
        return json.dumps(payload, indent=2)


RESOLVED_KEYS = (
    "task", "labels", "preprocess", "best_metric", "data_kind", "eval_split", "processes",
    "devices", "model_code",
)  # fmt: skip


def read_run(run: str | os.PathLike) -> RunRecord:
    """The :class:`RunRecord` of a run folder; a clear ``ConfigError`` for anything else.

    Runs written by jaxfeed 0.1's first command (a flat ``config.json``) are read too.
    """
    run = Path(run)
    path = run / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"{run} is not a jaxfeed run folder (no config.json); train one with: jaxfeed train --out {run}"
        )
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from err
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
    config = RunConfig.from_dict(options, str(path))
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
    out = {k: values[k] for k in keep if k in values}
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
