"""What an input kind does for a run (:class:`Kind`); one subclass per kind in this package
(:mod:`jaxfeed.recipes.kinds` lists the methods in the order a run calls them).

>>> kind = Kind("points")
>>> kind.name, kind.unit, kind.default_model, kind.next_step("runs/a")
('points', 'rows', 'cnn', 'predict:    jaxfeed predict runs/a FILE...')
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.builtins import BUILTINS, LINEN
from jaxfeed.recipes.objectives import numeric_options
from jaxfeed.recipes.spec import INPUTS, Preprocessing
from jaxfeed.recipes.user_models import CodePolicy, build_user_model, load_user_class

if TYPE_CHECKING:
    from jaxfeed.recipes.run import RunData


class Kind:
    """An input kind (``name``: the :class:`~jaxfeed.recipes.spec.Preprocessing` kind). This base
    is also the kind of inputs jaxfeed cannot learn from: its plan refuses them."""

    unit = "rows"  # what an epoch counts
    default_model = "cnn"  # --model when none is given
    tokens = False  # inputs are token ids (tokenizer.json, buckets or packing)
    scores_pretrained = False  # a pretrained model is evaluated before fine-tuning (an LM)

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

    def before_plan(self, config: RunConfig, resumed: bool) -> RunConfig:
        """Options the kind sets itself before planning (a checkpoint's image size)."""
        return config

    def pretrained_options(self, checkpoint: Any, config: RunConfig) -> RunConfig:
        """A new run's options that a pretrained checkpoint sets (an image model's size)."""
        return config

    # ------------------------------------------------------------------ planning
    def plan(self, run_data: RunData, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        """The run's preprocessing, planned on the train split, and what was chosen (lines)."""
        column = run_data.columns.inputs[0]
        raise ConfigError(f"cannot learn from the input column {column!r}: it is {self.name}")

    def plan_pretrained(self, checkpoint: Any, run_data: RunData,
                        config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The preprocessing with a pretrained checkpoint's (its tokenizer, its front end)."""
        return self.plan(run_data, config)

    def reopen(self, prep: Preprocessing, run_data: RunData, out: Path) -> None:
        """A resumed run's saved preprocessing made ready (its tokenizer, its clips checked)."""

    def augments(self, prep: Preprocessing) -> bool:
        """Whether ``--augment`` (image flips and crops) applies to these inputs."""
        return False

    def describe(self, prep: Preprocessing, run_data: RunData) -> str:
        """The inputs and the target, for the line that sums the data up."""
        return f"inputs {prep.input_shape}, {_target(run_data)}"

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
        """``ds`` as the loader reads it (the run's columns)."""
        from jaxfeed.recipes.preprocess import prepare  # import depth: it reaches recipes.text

        return prepare(prep, ds)

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        """Extra ``DataLoader`` arguments (``train``: the train loader's, else evaluation's)."""
        return {}

    def write_files(self, prep: Preprocessing, out: Path) -> None:
        """The files a new run keeps beside ``config.json`` (a tokenizer)."""

    # ------------------------------------------------------------------ model
    def build_model(self, config: RunConfig, prep: Preprocessing, outputs: int, seed: int,
                    policy: CodePolicy | None = None) -> Any:  # fmt: skip
        """The run's model: a built-in (:data:`~jaxfeed.recipes.kinds.builtins.BUILTINS`), the
        Linen CNN of ``--api linen``, or a class of your own."""
        spec = config.model_spec
        name = spec.text if spec is not None else self.default_model
        init_args = dict(spec.init_args) if spec is not None else {}
        if config.api == "linen":
            if name not in LINEN:
                raise ConfigError("--api linen supports --model cnn only")
            from jaxfeed.models.registry import MODEL_CLASSES  # import cost: flax

            return MODEL_CLASSES[LINEN[name]](outputs, **init_args)
        from flax import nnx  # import cost: flax, when a model is built

        rngs = nnx.Rngs(seed)
        if name in BUILTINS:
            builtin = BUILTINS[name]
            return builtin.build(builtin, prep, outputs, init_args, rngs)
        cls = load_user_class(name, policy)
        return build_user_model(name, cls, prep, outputs, init_args, rngs)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        """The Trainer's ``preprocess`` (on the device), ``targets``, ``loss`` and ``metrics``."""
        return numeric_options(config, prep, class_weights, scale=False)

    def model_inputs(self, prep: Preprocessing, model: Any) -> str | dict[str, str]:
        """The Trainer's ``inputs=``: the batch key, or ``{argument: column}``."""
        return INPUTS

    # ------------------------------------------------------------------ after training
    def export(self, trainer: Any, folder: Path, prep: Preprocessing, labels: list[str],
               extra: dict[str, Any]) -> None:  # fmt: skip
        """``model/``: :func:`jaxfeed.export` with the preprocessing declared as data."""
        from jaxfeed.serve.export import export  # import cost: jax.export, when a run exports

        export(trainer, folder, extra=extra, preprocessing=prep.serving(labels))

    def next_step(self, quoted_out: str) -> str:
        """The summary's last line: how to use the run."""
        return f"predict:    jaxfeed predict {quoted_out} FILE..."


def _target(run_data: RunData) -> str:
    label = run_data.columns.label
    if run_data.task == "classification":
        return f"label {label!r} ({len(run_data.labels)} classes)"
    return f"target {label!r} (regression)"
