"""What an input kind does for a run (:class:`Kind`); one subclass per kind in this package
(:mod:`jaxfeed.recipes.kinds` lists the methods in the order a run calls them).

>>> kind = Kind("points")
>>> kind.name, kind.unit, kind.default_model, kind.next_step("runs/a")
('points', 'rows', 'cnn', 'predict:    jaxfeed predict runs/a FILE...')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.config.budget import linear_pool
from jaxfeed.recipes.kinds.objectives import numeric_options
from jaxfeed.recipes.spec import INPUTS, TARGETS, Preprocessing
from jaxfeed.serve.export import FUNCTION
from jaxfeed.serve.spec import SpecError

if TYPE_CHECKING:
    from jaxfeed.recipes.run_data import RunData


@dataclass(frozen=True)
class Baseline:
    """The cheap model a kind compares the run's with (:mod:`jaxfeed.recipes.train.candidates`):
    a built-in (``model``, ``init_args``), fitted in seconds on ``reads`` (said in a line)."""

    model: str
    init_args: dict[str, Any]
    reads: str


class Kind:
    """An input kind (``name``: the :class:`~jaxfeed.recipes.spec.Preprocessing` kind). This base
    is also the kind of inputs jaxfeed cannot learn from: its plan refuses them."""

    unit = "rows"  # what an epoch counts
    default_model = "cnn"  # --model when none is given
    tokens = False  # inputs are token ids (tokenizer.json, buckets or packing)
    hub_task: str | None = None  # the Hub task of a checkpoint fine-tuned on it (none: refused)
    task: str | None = None  # the task the kind implies (a language model's), else inferred

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # ------------------------------------------------------------------ before planning
    def check(self, config: RunConfig) -> None:
        """Refuse the flags that would do nothing for this kind (read after the data is)."""
        for flag, value in (("--sample-rate", config.sample_rate),
                            ("--clip-seconds", config.clip_seconds)):  # fmt: skip
            if value is not None:
                raise ConfigError(f"{flag}: the input column holds {self.name} data, not audio")

    def clean(self, data: dict[str, Any], columns: Any) -> tuple[dict[str, Any], list[str]]:
        """The splits (``{name: Dataset}``) with the rows the run cannot read left out, and
        notes saying so (read as the data is loaded)."""
        return data, []

    def before_plan(self, config: RunConfig, resumed: bool,
                    pretrained: Any = None) -> RunConfig:  # fmt: skip
        """Options the kind sets itself before planning (``pretrained``: what a Hub checkpoint
        fixes of the inputs, :class:`~jaxfeed.recipes.sources.hub_checkpoint.Pretrained`, handed
        in by the model source: an image model's size)."""
        return config

    # ------------------------------------------------------------------ planning
    def plan(self, run_data: RunData, config: RunConfig,
             pretrained: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The run's preprocessing, planned on the train split, and what was chosen (lines);
        ``pretrained`` (from a Hub checkpoint) brings its tokenizer or front end."""
        columns = run_data.columns
        return self.plan_columns(
            run_data.splits.train, columns.inputs, columns.label, run_data.task,
            config.image_hw(), self.table_options(config, columns), config.image_mode,
        )  # fmt: skip

    def table_options(self, config: RunConfig, columns: Any) -> Any:
        """How a table's columns are chosen (``TableOptions``; None for other kinds)."""
        return None

    def plan_columns(self, train: Any, inputs: list[str], label: str, task: str,
                     image_size: tuple[int, int] | None, options: Any = None,
                     image_mode: str | None = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """:meth:`plan_inputs`, and a regression target standardised (the model learns it so)."""
        prep, notes = self.plan_inputs(train, inputs, label, task, image_size, options, image_mode)
        if task == "regression":
            prep.target_mean, prep.target_std = target_scale(train, label)
        return prep, notes

    def plan_inputs(self, train: Any, inputs: list[str], label: str, task: str,
                    image_size: tuple[int, int] | None, options: Any = None,
                    image_mode: str | None = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The inputs' preprocessing, from the train split's ``inputs`` columns."""
        raise ConfigError(f"cannot learn from the input column {inputs[0]!r}: it is {self.name}")

    def baseline(self, prep: Preprocessing) -> Baseline | None:
        """The linear model the run's is compared with: the built-in ``linear`` on the inputs,
        averaged over blocks of their first two axes down to the budget's
        :data:`~jaxfeed.recipes.config.budget.LINEAR_FEATURES` numbers (None: no baseline).

        >>> Kind("array").baseline(Preprocessing("array", ["x"], "y", [128, 128]))
        Baseline(model='linear', init_args={'pool': 2}, reads='inputs (128, 128) averaged over 2x2 blocks')
        """
        pool = linear_pool(prep.input_shape)
        shape = tuple(prep.input_shape)
        blocks = f" averaged over {pool}x{pool} blocks" if pool > 1 else ""
        return Baseline("linear", {"pool": pool} if pool > 1 else {}, f"inputs {shape}{blocks}")

    def max_batch(self, prep: Preprocessing) -> tuple[int, str] | None:
        """The largest batch size the budget may choose for these inputs, and why (None: any)."""
        return None

    def reopen(self, prep: Preprocessing, run_data: RunData, out: Path) -> None:
        """A resumed run's saved preprocessing made ready (its tokenizer, its clips checked)."""

    def augments(self, prep: Preprocessing) -> bool:
        """Whether ``--augment`` (image flips and crops) applies to these inputs."""
        return False

    def describe(self, prep: Preprocessing, run_data: RunData) -> str:
        """The inputs and the target, for the line that sums the data up."""
        return f"inputs {prep.input_shape}, {target_line(run_data)}"

    def resolved_options(self, config: RunConfig, prep: Preprocessing,
                         run_data: RunData) -> RunConfig:  # fmt: skip
        """The options as the run resolved them (columns, task, model, sizes), so that the saved
        ``config.json`` reproduces the run and a resume can compare flags with what was used."""
        return dataclasses.replace(
            config,
            model=config.model or self.default_model,
            input_columns=list(prep.input_columns),
            label_column=run_data.columns.label or None,
            task=run_data.task,
            text_column=prep.text["column"] if prep.text else config.text_column,
        )

    # ------------------------------------------------------------------ loading
    def prepare(self, prep: Preprocessing, ds: Any) -> Any:
        """``ds`` as the loader reads it: the run's columns (a missing one is refused)."""
        wanted = [*prep.input_columns, prep.label_column]
        return select_columns(ds, wanted, f"the run was trained on {wanted}")

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        """Extra ``DataLoader`` arguments (``train``: the train loader's, else evaluation's)."""
        return {}

    def epoch_flops(self, prep: Preprocessing, config: RunConfig, train: Any,
                    held: Any) -> float | None:  # fmt: skip
        """The floating-point operations of one epoch: training on ``train`` (as the loader pads
        it) and one evaluation of ``held`` (or None), for the budget's expected cost; None when
        the kind cannot count them for this model."""
        return None

    def held_options(self, prep: Preprocessing, batches: int) -> dict[str, Any]:
        """A held-out split's ``DataLoader`` arguments, for its ``batches`` batches: evaluation's
        :meth:`loader_options`."""
        return self.loader_options(prep, False)

    def write_files(self, prep: Preprocessing, out: Path) -> None:
        """The files a new run keeps beside ``config.json`` (a tokenizer)."""

    # ------------------------------------------------------------------ model
    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        """The Trainer's ``preprocess`` (on the device), ``targets``, ``loss`` and ``metrics``."""
        return numeric_options(config, prep, class_weights, scale=False)

    def model_inputs(self, prep: Preprocessing, model: Any) -> str | dict[str, str]:
        """The Trainer's ``inputs=``: the batch key, or ``{argument: column}``."""
        return INPUTS

    # ------------------------------------------------------------------ eval and predict
    def servable(self, folder: Path) -> bool:
        """``model/`` holds an export with its function (an export of the first jaxfeed has only
        weights: its run is served from ``checkpoints/``, as then)."""
        return (folder / "config.json").is_file() and (folder / FUNCTION).is_file()

    def open_served(self, prep: Preprocessing, run: Path) -> None:
        """A saved run's preprocessing made ready to serve (a text run's tokenizer attached)."""

    def exported_logits(self, served: Any, prep: Preprocessing,
                        labels: list[str]) -> tuple[Any, Any]:  # fmt: skip
        """``(spec, logits)``: the export's declared spec (an earlier export's: the run's) and
        raw inputs -> its outputs."""
        spec = served.spec or prep.serving(labels)  # an export of an earlier jaxfeed

        def logits(raw: Any) -> np.ndarray:
            x = spec.model_inputs(raw)
            return np.asarray(served.call(x)) if len(x) else np.zeros((0, max(len(labels), 1)))

        return spec, logits

    def trained_logits(self, trainer: Any, prep: Preprocessing) -> Any:
        """Raw inputs -> the outputs of a restored trainer's model (a checkpoint, not model/)."""
        import jax  # the trainer has started JAX already

        def trained(raw: Any) -> np.ndarray:
            try:
                x = prep.inputs(self.raw_columns(prep, raw))
            except SpecError as err:
                raise ConfigError(str(err)) from None
            batch = jax.device_put({INPUTS: x, TARGETS: np.zeros(len(x), np.int32)})
            return np.asarray(trainer.predict(batch))

        return trained

    def eval_rows(self, prep: Preprocessing, ds: Any, split: str) -> tuple[Any, str | None]:
        """The rows ``eval`` reads, as the served model takes them, and a note."""
        return self.prepare(prep, ds), None

    def raw_batch(self, prep: Preprocessing, batch: dict[str, Any]) -> Any:
        """A numpy batch of rows as the served model takes them (the input column's values)."""
        return batch[prep.input_columns[0]]

    def raw_columns(self, prep: Preprocessing, raw: Any) -> dict[str, Any]:
        """:meth:`raw_batch`'s values as ``{column: values}`` (what ``prep.inputs`` reads)."""
        return {prep.input_columns[0]: raw}

    retrain = "train again to rewrite it"  # what to do about a damaged model/
    reads = "images"  # what predict reads: image files (or folders), tables, audio or texts

    def reader_spec(self, spec: Any) -> Any:
        """The spec that reads predict's files (arrays: image files of the arrays' shape)."""
        return spec

    def check_generates(self, run: Path, task: str) -> None:
        """``jaxfeed generate`` needs a language model."""
        raise ConfigError(
            f"{run} is a {task} run; jaxfeed generate needs a language model (jaxfeed train "
            "--task lm)"
        )

    # ------------------------------------------------------------------ after training
    def export(self, trainer: Any, folder: Path, prep: Preprocessing, labels: list[str],
               extra: dict[str, Any]) -> None:  # fmt: skip
        """``model/``: :func:`jaxfeed.export` with the preprocessing declared as data."""
        from jaxfeed.serve.export import export  # import cost: jax.export, when a run exports

        export(trainer, folder, extra=extra, preprocessing=prep.serving(labels))

    def next_step(self, quoted_out: str) -> str:
        """The summary's last line: how to use the run."""
        return f"predict:    jaxfeed predict {quoted_out} FILE..."


def target_scale(train: Any, label: str) -> tuple[float, float]:
    """The mean and deviation of a regression target over the rows of ``train`` (a split carved
    out of a larger table keeps an indices mapping: its ``data`` holds every row), a missing or
    infinite value refused.

    >>> from jaxfeed import Dataset
    >>> target_scale(Dataset.from_dict({"y": [1.0, 3.0, 100.0]}).select([0, 1]), "y")
    (2.0, 1.0)
    """
    column = train.select_columns([label]).flatten_indices().data.column(label)
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise ConfigError(f"column {label!r} is empty at row {row}; fill or drop such rows")
    y = np.asarray(column.to_numpy(zero_copy_only=False)).astype(np.float64)
    if not np.all(np.isfinite(y)):
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ConfigError(f"the label column {label!r} is not finite at row {row}")
    return float(y.mean()), float(y.std() or 1.0)


def target_line(run_data: RunData) -> str:
    """The target's part of the sizes line: the label and its classes, or the regression's.

    >>> from types import SimpleNamespace as Data
    >>> target_line(Data(columns=Data(label="y"), task="classification", labels=["a", "b"]))
    "label 'y' (2 classes)"
    """
    label = run_data.columns.label
    if run_data.task == "classification":
        return f"label {label!r} ({len(run_data.labels)} classes)"
    return f"target {label!r} (regression)"


def select_columns(ds: Any, columns: list[str], why: str) -> Any:
    """``ds`` with only ``columns``; a missing one is refused naming it, ``why`` the run wants
    it, and the data's columns.

    >>> from jaxfeed import Dataset
    >>> select_columns(Dataset.from_dict({"t": ["a"], "y": [0]}), ["y"], "the run reads y").column_names
    ['y']
    """
    missing = [c for c in columns if c not in ds.features]
    if missing:
        raise ConfigError(
            f"the data has no column {missing[0]!r} ({why}); its columns are "
            f"{list(ds.features)[:12]}"
        )
    return ds.select_columns(columns)
