"""The typed run configuration of ``jaxfeed train`` (one dataclass), parsed by jsonargparse.

Every option of a training run is a field of :class:`RunConfig`. :func:`run_parser` derives a
`jsonargparse <https://jsonargparse.readthedocs.io>`_ parser from the fields (their types, help and
defaults), and the same parser checks the command line (``jaxfeed.cli.options``), ``--config``
files (JSON or YAML) and a run's ``config.json``; :func:`check` adds the bounds the types cannot
say. A field added to the dataclass is a flag, a config key and a ``config.json`` entry at once.
The run folder keeps the options in ``config.json`` next to what the run resolved from the data
(task, labels, preprocessing). This module imports neither JAX nor pyarrow.

>>> config = RunConfig.from_dict({"epochs": 3, "lr": 0.01}, "example")
>>> config.epochs, config.lr, config.optimizer
(3, 0.01, 'adamw')
>>> RunConfig.from_dict({"epochs": 0}, "example")
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: example: epochs must be an integer >= 1, got 0
>>> RunConfig.from_dict({"epoch": 3}, "example")
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: example: unknown option 'epoch' (did you mean 'epochs'?)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

RUN_FORMAT = "jaxfeed-run"
RUN_VERSION = 2
TASKS = ("classification", "regression", "lm")
COMPONENTS = ("model", "optimizer", "schedule")  # fields that take {class_path, init_args}
MAX_CONFIG_NODES = 100_000  # values a config file may expand to (YAML aliases count each time)
MAX_CONFIG_ALIASES = 100


class ConfigError(ValueError):
    """A configuration value, file or flag is wrong; the message names it and what was expected."""


def option(
    default: Any,
    help: str,
    *,
    minimum: float | None = None,
    exclusive: bool = False,
    below: float | None = None,
    metavar: str | None = None,
    saved: bool = True,
    resumable: bool = False,
    group: str = "run",
) -> Any:
    """A :class:`RunConfig` field with what the command line and the checks need.

    ``minimum`` (with ``exclusive``: strictly above) and ``below`` (strictly) bound numbers;
    ``saved=False`` keeps the field out of ``config.json`` (where this process runs, not what it
    trains); ``resumable=True`` fields may differ from the saved ones on ``--resume`` (how long to
    train, how often to report).
    """
    meta = {
        "help": help,
        "minimum": minimum,
        "exclusive": exclusive,
        "below": below,
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
        "train", "split to train on; slices work: train[:80%] (default: train)", group="data"
    )
    split_eval: str | None = option(
        None,
        "the validation split the best checkpoint is chosen on; split expressions work "
        "(default: the data's validation split, else --val-split of train); the data's test "
        "split is held out and read once, at the end",
        group="data",
    )
    val_split: float | None = option(
        None,
        "carve this fraction of the train split (stratified by class) as the validation split "
        "the model is selected on, when the data has no validation split (default: 0.1 then); "
        "0: no validation split, no selection, the last epoch is kept",
        minimum=0.0,
        below=1.0,
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
    task: Literal["classification", "regression", "lm"] | None = option(
        None,
        "default: inferred from the label column (strings, class labels or few integers: "
        "classification; floats: regression); lm: a causal language model of a text column or "
        "a .txt corpus (no label)",
        group="data",
    )
    text_column: str | None = option(
        None,
        "the column of free text to learn from (default: a string column of free text, found "
        "and announced; a .txt corpus: its lines)",
        metavar="NAME",
        group="data",
    )
    tokenizer: str | None = option(
        None,
        "a tokenizer.json (the Hub's tokenizers format) for text (default: a byte-level BPE "
        "trained on the train split into the run folder)",
        metavar="FILE",
        group="data",
    )
    vocab_size: int = option(
        8000,
        "the trained tokenizer's vocabulary size (at most; default: 8000)",
        minimum=261,
        group="data",
    )
    seq_len: int | None = option(
        None,
        "tokens: --task lm: the packed row length (default 128); a text column: the longest "
        "text kept, longer ones cut (default: the longest train text, at most 512)",
        minimum=2,
        metavar="N",
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
    sample_rate: int | None = option(
        None,
        "audio: resample every clip to this rate in Hz before its log-mel features (default: "
        "16000)",
        minimum=1,
        metavar="HZ",
        group="data",
    )
    clip_seconds: float | None = option(
        None,
        "audio: crop (at random in training, the centre in evaluation) or pad every clip to this "
        "many seconds (default: the longest clip of the train split, at most 30)",
        minimum=0.0,
        exclusive=True,
        metavar="SECONDS",
        group="data",
    )
    # model
    model: str | dict[str, Any] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "cnn, mlp, audio_cnn, transformer, transformer_lm, FILE.py:ClassName or "
        "package.module.ClassName (your own flax.nnx.Module), or {class_path: ..., init_args: "
        "{...}} with constructor arguments (also --model.init_args.NAME VALUE) (default: cnn for "
        "images, mlp for tables, audio_cnn for audio, transformer for text)",
        metavar="NAME|SPEC",
        group="model",
    )
    api: Literal["nnx", "linen"] = option(
        "nnx", "Flax API of the built-in CNN (default: nnx)", group="model"
    )
    # optimisation
    epochs: int = option(10, "epochs in total (default: 10)", minimum=1, resumable=True)
    batch_size: int = option(64, "rows per batch (default: 64)", minimum=1)
    optimizer: str | dict[str, Any] = option(  # noqa: RUF009 (option() returns a field)
        "adamw",
        "any optax optimizer by name (adamw, adam, sgd, lion, adafactor, ...), or {class_path: "
        "NAME, init_args: {...}} with its arguments (also --optimizer.init_args.NAME VALUE); it "
        "gets --lr as learning_rate and --weight-decay when it takes one (default: adamw)",
        metavar="NAME|SPEC",
    )
    lr: float = option(1e-3, "peak learning rate (default: 1e-3)", minimum=0.0, exclusive=True)
    weight_decay: float = option(
        1e-4, "decoupled weight decay (adamw; sgd: L2) (default: 1e-4)", minimum=0.0
    )
    schedule: str | dict[str, Any] = option(  # noqa: RUF009 (option() returns a field)
        "constant",
        "learning-rate schedule: constant, cosine, linear, or any optax schedule by name "
        "(cosine_decay_schedule, exponential_decay, warmup_cosine_decay_schedule, ...) or "
        "{class_path: NAME, init_args: {...}} with its arguments (also --schedule.init_args.NAME "
        "VALUE); --lr, the run's length and --warmup-steps fill the ones left out "
        "(default: constant)",
        metavar="NAME|SPEC",
    )
    loss: Literal["cross_entropy", "mse", "mae", "huber"] | None = option(
        None, "training loss (default: cross_entropy for classes, mse for regression)"
    )
    metrics: list[str] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "metrics besides the loss, comma-separated: accuracy, topK_accuracy, f1, precision, "
        "recall, auc (classification), mse, mae, rmse, r2 (regression); f1, precision, recall, "
        "auc, rmse and r2 over the whole split (default: accuracy for classes; mse, mae, rmse, r2 "
        "for regression)",
        metavar="A,B,C",
    )
    grad_clip: float | None = option(
        None,
        "clip gradients to this global norm (optax.clip_by_global_norm) (default: off)",
        minimum=0.0,
        exclusive=True,
        metavar="NORM",
    )
    class_weights: str | list[float] | None = option(  # noqa: RUF009 (option() returns a field)
        None,
        "weigh the loss per class: balanced (rows / (classes x class rows) of the train split), "
        "or one weight per class, comma-separated (default: equal)",
        metavar="balanced|W1,W2,...",
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
    monitor: str = option(
        "eval_loss",
        "the validation metric that chooses the best checkpoint (and --patience watches): "
        "eval_loss, eval_accuracy, eval_f1, eval_auc, eval_r2, ... (default: eval_loss)",
        metavar="METRIC",
    )
    monitor_mode: Literal["min", "max"] | None = option(
        None, "min or max (default: min for losses and errors, max otherwise)"
    )
    patience: int | None = option(
        None,
        "stop after P epochs without a better --monitor (default: off)",
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
    log_every: int | None = option(
        None,
        "also write a train row (loss, metrics, learning rate) every N steps to metrics.jsonl "
        "and TensorBoard (default: per epoch only)",
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
        """A copy with ``values`` (JSON/YAML values, or flags as parsed) checked and applied."""
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: expected a mapping of option names to values")
        values = {str(k).replace("-", "_"): v for k, v in values.items()}
        known = {f.name: f for f in dataclasses.fields(self)}
        for key in values:
            if key not in known:
                raise ConfigError(
                    f"{where}: unknown option {_short(key)}{did_you_mean(key, known)}"
                )
        values = as_typed(values)
        for name in COMPONENTS:  # {init_args} alone: arguments for the class already chosen
            part = values.get(name)
            if isinstance(part, dict) and "class_path" not in part:
                path, args = self.component(name)
                if path is None:
                    raise ConfigError(
                        f"{where}: {name}.init_args needs a {name} (the class to build): give "
                        f"--{name} NAME or {name}: {{class_path: NAME, init_args: ...}}"
                    )
                values[name] = {
                    "class_path": path,
                    "init_args": {**args, **(part.get("init_args") or {})},
                }
        parser = run_parser()
        try:
            namespace = parser.parse_object(values, defaults=False)
        except Exception as err:  # jsonargparse's errors: one line, no whole value
            raise ConfigError(f"{where}: {parse_error(err)}") from None
        changes = {k: namespace[k] for k in values}
        return check(dataclasses.replace(self, **changes), where, set(changes))

    def as_dict(self) -> dict[str, Any]:
        """Every field (JSON values)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

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

    def component(self, name: str) -> tuple[str | None, dict[str, Any]]:
        """``model`` or ``optimizer`` as ``(class_path, init_args)``.

        >>> RunConfig(model={"class_path": "net.py:Net", "init_args": {"width": 8}}).component("model")
        ('net.py:Net', {'width': 8})
        >>> RunConfig().component("optimizer")
        ('adamw', {})
        """
        value = getattr(self, name)
        if isinstance(value, dict):
            return value["class_path"], dict(value.get("init_args") or {})
        return value, {}


def as_typed(values: dict[str, Any]) -> dict[str, Any]:
    """Spellings the types do not take, as they mean: ``"a,b"`` for a list of names, ``64`` for
    a string field (``image_size: 64`` in YAML).

    >>> as_typed({"input_columns": "a, b", "image_size": 64, "epochs": 3})
    {'input_columns': ['a', 'b'], 'image_size': '64', 'epochs': 3}
    """
    hints, out = _hints(), dict(values)
    for key, value in values.items():
        base = _base(hints.get(key))
        if base is str and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = str(value)
        elif typing.get_origin(base) is list and isinstance(value, str):
            out[key] = [v.strip() for v in value.split(",") if v.strip()]
    return out


def _hints() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig)


def _base(hint: Any) -> Any:
    """``X`` of ``X | None``; the hint itself otherwise."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if type(None) in typing.get_args(hint) and len(args) == 1 else hint


def flag(name: str) -> str:
    """A field's command-line flag: ``split_train`` -> ``--split-train``."""
    return "--" + name.replace("_", "-")


@functools.cache
def run_parser() -> Any:
    """The jsonargparse parser of :class:`RunConfig` (config files and ``config.json``)."""
    return new_run_parser()


GROUPS = {
    "data": "data",
    "model": "model",
    "run": "optimisation and run",
    "process": "run folder and processes",
}


def new_run_parser(**kwargs: Any) -> Any:
    """A jsonargparse parser of :class:`RunConfig`: one ``--field_name`` per field, typed by its
    hint, with its help and default (booleans also take ``--no_field_name``), in help groups.
    ``kwargs`` go to ``ArgumentParser``. The command line spells the flags with dashes
    (``jaxfeed.cli.options`` maps them)."""
    # jsonargparse's import takes ~0.25 s: only a command or a config read builds the parser
    from jsonargparse import ActionYesNo, ArgumentParser

    parser = ArgumentParser(
        **{"prog": "jaxfeed train", "exit_on_error": False, "allow_abbrev": False, **kwargs}
    )
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    hints = _hints()
    for f in dataclasses.fields(RunConfig):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        kwargs: dict[str, Any] = {"default": default, "help": f.metadata["help"]}
        group = groups[f.metadata.get("group", "run")]
        if _base(hints[f.name]) is bool:
            group.add_argument(f"--{f.name}", action=ActionYesNo(no_prefix="no_"), **kwargs)
        else:
            if f.metadata.get("metavar"):
                kwargs["metavar"] = f.metadata["metavar"]
            group.add_argument(f"--{f.name}", type=hints[f.name], **kwargs)
    return parser


def did_you_mean(name: str, known: typing.Iterable[str], *, quote: bool = True) -> str:
    """`` (did you mean 'x'?)`` for the nearest known name, or nothing.

    >>> did_you_mean("lerning_rate", ["lr", "learning_rate"])
    " (did you mean 'learning_rate'?)"
    """
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {close[0]!r}?)" if quote else f" (did you mean {close[0]}?)"


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error never shows a whole value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def parse_error(err: BaseException) -> str:
    """A jsonargparse error as one line naming the option (its long messages list every union
    member and repeat the whole value)."""
    text = str(err).strip()
    key = re.search(r'[Kk]ey "([\w.]+)"', text)
    if key:
        name = key.group(1).split(".")[0]
        hint = _hints().get(name)
        got = re.search(r"(?:Given|Got) value: (.*)", text)
        value = got.group(1).strip() if got else None
        return f"{name} must be {describe(hint)}" + (
            f", got {_short(value)}" if value is not None else ""
        )
    first = text.splitlines()[0] if text else type(err).__name__
    return first[:200]


def describe(hint: Any) -> str:
    """What a field's type accepts, in words."""
    base = _base(hint)
    if typing.get_origin(base) is Literal:
        return "one of " + ", ".join(typing.get_args(base))
    simple = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if base in simple:
        return simple[base]
    if typing.get_origin(base) is list:
        return "a list"
    return (
        "a name or a {class_path, init_args} mapping"
        if dict in map(typing.get_origin, typing.get_args(base))
        else "a valid value"
    )


def check(config: RunConfig, where: str, names: typing.Iterable[str] | None = None) -> RunConfig:
    """Bounds and forms the types do not say, for fields ``names`` (default: all); normalises
    comma-separated lists and ``{class_path, init_args}`` specs."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    for name in fields if names is None else names:
        f, value = fields[name], getattr(config, name)
        low, below = f.metadata.get("minimum"), f.metadata.get("below")
        if isinstance(value, int | float) and not isinstance(value, bool):
            kind = "an integer" if isinstance(value, int) else "a number"
            if low is not None and (value <= low if f.metadata["exclusive"] else value < low):
                sign = ">" if f.metadata["exclusive"] else ">="
                raise ConfigError(f"{where}: {name} must be {kind} {sign} {low:g}, got {value!r}")
            if below is not None and value >= below:
                raise ConfigError(f"{where}: {name} must be {kind} < {below:g}, got {value!r}")
            if value != value:
                raise ConfigError(f"{where}: {name} must be a number, got nan")
        if name in ("input_columns", "metrics") and isinstance(value, str):
            value = changes[name] = [v.strip() for v in value.split(",") if v.strip()]
            if not value:
                raise ConfigError(f"{where}: {name} must name at least one column or metric")
        if name == "class_weights" and value is not None:
            changes[name] = _class_weights(value, where)
        if name == "image_size" and value is not None:
            try:
                parse_image_size(value)
            except ConfigError as err:
                raise ConfigError(f"{where}: image_size: {err}") from None
        if name in COMPONENTS and value is not None:
            changes[name] = _component(name, value, where)
        if name == "mesh" and value is not None:
            parse_mesh_text(value, where)
        if name == "sharding":
            changes[name] = parse_sharding(value, where)
    return dataclasses.replace(config, **changes) if changes else config


BUILTIN_MODELS = ("cnn", "mlp", "audio_cnn", "transformer", "transformer_lm")
MODEL_FORMS = f"{', '.join(BUILTIN_MODELS)}, FILE.py:ClassName or package.module.ClassName"


def _component(name: str, value: Any, where: str) -> str | dict[str, Any]:
    """A name, or ``{class_path, init_args}`` (a name alone when there are no arguments)."""
    if isinstance(value, dict):
        unknown = set(value) - {"class_path", "init_args"}
        if unknown or not isinstance(value.get("class_path"), str):
            raise ConfigError(
                f"{where}: {name} must be a name or {{class_path: NAME, init_args: {{...}}}}, got "
                f"keys {sorted(map(str, value))[:5]}"
            )
        args = value.get("init_args") or {}
        if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
            raise ConfigError(f"{where}: {name}.init_args must map argument names to values")
        path = _component(name, value["class_path"], where)
        return {"class_path": path, "init_args": dict(args)} if args else path
    path = str(value).strip()
    if name == "model" and not (
        path in BUILTIN_MODELS
        or re.fullmatch(r".+\.py:[A-Za-z_]\w*", path)
        or re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", path)
    ):
        raise ConfigError(f"{where}: model must be {MODEL_FORMS}, got {_short(path)}")
    if name in ("optimizer", "schedule") and not re.fullmatch(
        r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*", path
    ):
        raise ConfigError(
            f"{where}: {name} must be the name of an optax {name}, got {_short(path)}"
        )
    return path


def _class_weights(value: Any, where: str) -> str | list[float]:
    if isinstance(value, str):
        if value.strip() == "balanced":
            return "balanced"
        value = value.split(",")
    try:
        weights = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: class_weights must be balanced or numbers, one per class, got {_short(value)}"
        ) from None
    if not weights or any(not (w >= 0) for w in weights):
        raise ConfigError(f"{where}: class_weights must be numbers >= 0, got {_short(value)}")
    return weights


def parse_image_size(text: str) -> tuple[int, int]:
    """``"N"`` or ``"HxW"`` as ``(height, width)``; anything else raises ``ConfigError``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", str(text))
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
        raise ConfigError(
            f"expected N or HxW with positive integers (e.g. 32 or 24x32), got {_short(text)}"
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


# ---------------------------------------------------------------------------------- files
class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses more than :data:`MAX_CONFIG_ALIASES` aliases (an alias
    "bomb" of a few hundred bytes expands to billions of values)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases = getattr(self, "aliases", 0) + 1
            if self.aliases > MAX_CONFIG_ALIASES:
                raise ConfigError(f"more than {MAX_CONFIG_ALIASES} YAML aliases (*name)")
        return super().compose_node(parent, index)


def load_yaml(text: str, where: str) -> Any:
    """YAML ``text``, safely: no Python objects, at most :data:`MAX_CONFIG_ALIASES` aliases and
    :data:`MAX_CONFIG_NODES` values once expanded; errors name ``where`` and never the value.

    >>> load_yaml("a: &x [1, 2]\\nb: *x", "run.yaml")
    {'a': [1, 2], 'b': [1, 2]}
    >>> bomb = "a: &a [x, x]\\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}]\\n"
    ...                                    for p, c in zip("abcdefghij", "bcdefghijk"))
    >>> load_yaml(bomb, "bomb.yaml")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: bomb.yaml: refused: it expands to more than 100,000 values (YAML aliases)
    """
    try:
        values = yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader: no Python objects
    except ConfigError as err:
        raise ConfigError(f"{where}: refused: {err}") from None
    except yaml.YAMLError as err:
        first = str(err).strip().splitlines()[0][:200]
        raise ConfigError(f"{where}: not valid YAML: {first}") from None
    _check_size(values, where)
    return values


def _check_size(values: Any, where: str) -> None:
    """Refuse a value that expands to more than :data:`MAX_CONFIG_NODES` values (each alias counts
    every time it is used), without expanding it."""
    count, stack = 0, [values]
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ConfigError(
                f"{where}: refused: it expands to more than {MAX_CONFIG_NODES:,} values (YAML aliases)"
            )
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The options in a JSON or YAML file (a run's ``config.json`` works too: its options); YAML
    is read by :func:`load_yaml` (no alias bombs)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it: {err.strerror or err}") from err
    if path.suffix.lower() in (".yaml", ".yml"):
        values = load_yaml(text, f"--config {path}")
    else:
        try:
            values = json.loads(text)
        except ValueError as err:
            raise ConfigError(f"--config {path}: not valid JSON: {err}") from err
    _check_size(values, f"--config {path}")
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
    "task", "labels", "preprocess", "best_metric", "best_mode", "data_kind", "eval_split",
    "test_split", "class_weights", "lr_logged", "processes", "devices", "model_code",
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
