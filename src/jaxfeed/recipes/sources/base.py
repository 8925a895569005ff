"""What a model source does for a run (:class:`ModelSource`): where the model comes from, beside
the input kind (what the inputs are). One subclass per source in this package; the run holds one
(``run.model_source``), chosen once by :func:`~jaxfeed.recipes.sources.registry.source_for`.

>>> source = ModelSource(None)
>>> source.name, source.default_lr(), source.record(), source.lines()
('builtin', 0.001, None, [])
>>> sorted(given_options(RunConfig(epochs=3)))
['epochs']
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.config.groups import DEFAULT_LR
from jaxfeed.recipes.config.model_spec import ModelSpec
from jaxfeed.recipes.kinds.builtins import build_builtin

if TYPE_CHECKING:
    from jaxfeed.recipes.kinds.base import Kind

# the options a model source may default when the run leaves them out (None; warmup: 0)
DEFAULTED = ("lr", "epochs", "warmup_steps")
LORA_FLAGS = ("lora_alpha", "lora_targets", "quantize")  # meaningful with --lora only


def given_options(config: RunConfig) -> frozenset[str]:
    """Which of :data:`DEFAULTED` the run's options set (``--lr``, ``--epochs``,
    ``--warmup-steps``): those a model source's :meth:`ModelSource.defaults` leaves alone."""
    given = {name for name in ("lr", "epochs") if getattr(config, name) is not None}
    return frozenset(given | ({"warmup_steps"} if config.warmup_steps else set()))


class ModelSource:
    """Where a run's model comes from (``name``: ``builtin``, ``hub`` or ``code``): this base is
    jaxfeed's built-in models' (``--model cnn``, or none: the input kind's default), whose
    defaults are the options' own.

    In the order of a run: :meth:`check_options` (before any data is read), :meth:`open` (the
    run opened: a checkpoint resolved, a model file checked), :meth:`before_plan` (the data's
    kind known: what the model fixes of its options), :meth:`inputs` (handed to the kind's plan),
    :meth:`defaults` (one moment, the steps of an epoch known), :meth:`build_model`,
    :meth:`trainer_options`, :meth:`record`, :meth:`lines` and :meth:`model_lines` (what
    ``config.json`` and the output say of it), :meth:`write_files` and :meth:`before_fine_tuning`."""

    name = "builtin"
    runs_code = False  # it imports the user's code (a failed export then leaves a note)

    def __init__(self, spec: ModelSpec | None) -> None:
        self.spec = spec

    @classmethod
    def from_record(cls, spec: ModelSpec | None, resolved: dict[str, Any],
                    verify: bool = False) -> ModelSource:  # fmt: skip
        """A saved run's source, from ``--model`` and what its ``config.json`` resolved
        (``verify``: what it read checked against what it recorded)."""
        return cls(spec)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.text if self.spec else None!r})"

    # ------------------------------------------------------------------ before anything is read
    def check_options(self, config: RunConfig) -> None:
        """Refuse the options that do nothing for this source: ``--lora`` and its companions
        need a Hub checkpoint's frozen weights."""
        if config.lora is not None:
            raise ConfigError(
                f"--lora {config.lora}: adapters train on a pretrained model's frozen weights; give "
                "--model hf:ORG/NAME or a checkpoint folder (a model trained from scratch trains "
                "every weight)"
            )
        check_lora_companions(config)

    def absolute(self, model: Any) -> Any:
        """``--model`` with the local path it names made absolute (a run folder works from any
        directory); built-in names stay as given."""
        return model

    def open(self, config: RunConfig, record: Any, policy: Any) -> None:
        """The source opened when the run is (a new run's or a resumed one's ``record``)."""

    # ------------------------------------------------------------------ planning
    def before_plan(self, kind: Kind, config: RunConfig, resumed: bool) -> RunConfig:
        """The options the kind sets itself once the data's kind is known (a resumed run keeps
        its own)."""
        return kind.before_plan(config, resumed, self.inputs())

    def inputs(self) -> Any:
        """What the model fixes of the run's inputs, handed to the kind's plan (None: nothing)."""
        return None

    def default_lr(self) -> float:
        """``--lr`` when the run gives none (and ``--lr auto``'s fallback)."""
        return DEFAULT_LR

    def default_whose(self) -> str:
        """Whose default :meth:`default_lr` is, as a line names it (``"a pretrained model's"``)."""
        return ""

    def default_epochs(self) -> tuple[int, str] | None:
        """``--epochs`` when the run gives none, and why (None: the budget's, from the data)."""
        return None

    def defaults(self, config: RunConfig, given: frozenset[str],
                 steps: int) -> tuple[RunConfig, list[str]]:  # fmt: skip
        """The options of :data:`DEFAULTED` the run left out (``given``: those it set), with an
        epoch of ``steps`` batches; and the lines that say so. Applied once, by the plan stage."""
        if "lr" not in given:
            config = dataclasses.replace(config, lr=self.default_lr())
        return config, []

    # ------------------------------------------------------------------ the model
    def build_model(self, run: Any, config: RunConfig) -> Any:
        """The run's model (``run``: a run or a saved one, its kind, preprocessing and outputs):
        a built-in by name, or the Linen CNN of ``--api linen``. It is built from
        ``config.model_spec`` as the run resolved it (the budget's BatchNorm momentum, a kind's
        arguments), not from the ``--model`` the source was chosen by."""
        return build_builtin(config.model_spec, run.kind, run.prep, run.outputs, config)

    def trainer_options(self, config: RunConfig) -> dict[str, Any]:
        """The Trainer's arguments the source sets (``trainable=``)."""
        return {}

    # ------------------------------------------------------------------ what the run keeps
    def record(self) -> dict[str, Any] | None:
        """What ``config.json`` keeps of the source (``resolved["pretrained"]``), or None."""
        return None

    def lines(self) -> list[str]:
        """What the run's output says of the source."""
        return []

    def model_lines(self, model: Any) -> list[str]:
        """What the output says of the built model (a Hub source: its adapters and int8
        weights); nothing for a built-in model."""
        return []

    def write_files(self, out: Path) -> None:
        """The files a new run keeps beside ``config.json`` (a checkpoint's preprocessor)."""

    def copy_code(self, out: Path) -> dict[str, Any] | None:
        """A copy of the model's code kept in the run folder, and its record (None: no code)."""
        return None

    def summary_lines(self, before: dict[str, Any] | None, best: dict[str, Any] | None,
                      split: str | None) -> list[str]:  # fmt: skip
        """The summary's lines of the source (``before``: :meth:`before_fine_tuning`'s figures,
        ``best``: the chosen checkpoint's)."""
        return []

    def before_fine_tuning(self, trainer: Any, loader: Any, split: str | None, record: Any,
                           say: Any) -> dict[str, float] | None:  # fmt: skip
        """A pretrained model's figures before any step (None: nothing to compare)."""
        return None


def check_lora_companions(config: RunConfig) -> None:
    """``--lora-alpha``, ``--lora-targets``, ``--quantize`` and ``--lora-dropout`` need
    ``--lora RANK``."""
    if config.lora is not None:
        return
    for name in LORA_FLAGS:
        if getattr(config, name) is not None:
            flag = "--" + name.replace("_", "-")
            why = " freezes the weights, so nothing would train" if name == "quantize" else ""
            raise ConfigError(f"{flag}{why}: give --lora RANK (the adapters' rank)")
    if config.lora_dropout:
        raise ConfigError("--lora-dropout: give --lora RANK (the adapters' rank)")


__all__ = ["DEFAULTED", "ModelSource", "check_lora_companions", "given_options"]
