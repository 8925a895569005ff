"""``--model hf:ORG/NAME`` (or a checkpoint folder): :class:`HubKind` wraps the data's
:class:`~jaxfeed.recipes.kinds.base.Kind` with the opened pretrained checkpoint
(:class:`jaxfeed.recipes.hub_checkpoint.Checkpoint`): the checkpoint's tokenizer, image size or
audio front end in the plan, its preprocessor config kept in the run folder, its model built with
a head for the data, fine-tuning defaults, and a language model's perplexity before fine-tuning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxfeed.recipes import hub_checkpoint as pretrained
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.recipes.user_models import CodePolicy


class HubKind(Kind):
    """``inner`` with a pretrained ``checkpoint`` (None for a saved run's model rebuilt from
    ``--model`` alone: eval and predict)."""

    def __init__(self, inner: Kind, checkpoint: pretrained.Checkpoint | None = None) -> None:
        super().__init__(inner.name)
        self.inner, self.checkpoint = inner, checkpoint
        self.unit, self.default_model, self.tokens = inner.unit, inner.default_model, inner.tokens

    def __repr__(self) -> str:
        return f"HubKind({self.inner!r})"

    def check(self, config: RunConfig) -> None:
        self.inner.check(config)

    def before_plan(self, config: RunConfig, resumed: bool) -> RunConfig:
        """The checkpoint takes the data's kind; a new run takes its options (an image size)."""
        pretrained.check_data(self.checkpoint, self.name, self.inner.hub_task)
        config = self.inner.before_plan(config, resumed)
        return config if resumed else self.inner.pretrained_options(self.checkpoint, config)

    def plan(self, run_data: Any, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        return self.inner.plan_pretrained(self.checkpoint, run_data, config)

    def reopen(self, prep: Preprocessing, run_data: Any, out: Path) -> None:
        self.inner.reopen(prep, run_data, out)

    def augments(self, prep: Preprocessing) -> bool:
        return self.inner.augments(prep)

    def describe(self, prep: Preprocessing, run_data: Any) -> str:
        return self.inner.describe(prep, run_data)

    def resolved_options(self, config: RunConfig, prep: Preprocessing,
                         run_data: Any) -> RunConfig:  # fmt: skip
        return self.inner.resolved_options(config, prep, run_data)

    def prepare(self, prep: Preprocessing, ds: Any) -> Any:
        return self.inner.prepare(prep, ds)

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        return self.inner.loader_options(prep, train)

    def held_options(self, prep: Preprocessing, batches: int) -> dict[str, Any]:
        return self.inner.held_options(prep, batches)

    def write_files(self, prep: Preprocessing, out: Path) -> None:
        """The inner kind's files, and the checkpoint's ``preprocessor_config.json`` (data)."""
        self.inner.write_files(prep, out)
        pretrained.copy_preprocessor(self.checkpoint, out)

    def build_model(self, config: RunConfig, prep: Preprocessing, outputs: int, seed: int,
                    policy: CodePolicy | None = None) -> Any:  # fmt: skip
        """:func:`~jaxfeed.models.from_pretrained` with a head for ``outputs`` (nnx only)."""
        spec = config.model_spec.text
        if config.api == "linen":
            raise ConfigError(f"--api linen: --model {spec} is an nnx model from the Hub")
        model = pretrained.build_model(spec, self.inner.hub_task, outputs, config, self.name)
        return self.inner.wrap_pretrained(spec, model)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return self.inner.trainer_options(config, prep, class_weights)

    def model_inputs(self, prep: Preprocessing, model: Any) -> str | dict[str, str]:
        return self.inner.model_inputs(prep, model)

    def export(self, trainer: Any, folder: Path, prep: Preprocessing, labels: list[str],
               extra: dict[str, Any]) -> None:  # fmt: skip
        self.inner.export(trainer, folder, prep, labels, extra)

    def next_step(self, quoted_out: str) -> str:
        return self.inner.next_step(quoted_out)

    # ------------------------------------------------------------------ fine-tuning
    def default_epochs(self) -> tuple[int, str] | None:
        """Fine-tuning's :data:`~jaxfeed.recipes.hub_checkpoint.FINE_TUNE` epochs (3), said as
        the default they are (the user gave no ``--epochs``).

        >>> HubKind(Kind("text")).default_epochs()
        (3, "a pretrained model's default")
        """
        return pretrained.FINE_TUNE["epochs"], "a pretrained model's default"

    def fine_tune_defaults(self, config: RunConfig, steps_per_epoch: int) -> tuple[RunConfig, str]:
        """A warmup over 10% of the steps when none is given, and the line that says so."""
        return pretrained.fine_tune_defaults(config, steps_per_epoch)

    def record(self) -> dict[str, Any]:
        """What ``config.json`` keeps of the checkpoint (``resolved["pretrained"]``)."""
        return self.checkpoint.record()

    def source_line(self) -> str:
        """``pretrained: bert from ORG/NAME at COMMIT``."""
        checkpoint = self.checkpoint
        where_from = checkpoint.repo_id or str(checkpoint.folder)
        commit = f" at {checkpoint.commit[:12]}" if checkpoint.commit else ""
        return f"pretrained: {checkpoint.model_type} from {where_from}{commit}"

    def before_fine_tuning(self, trainer: Any, loader: Any, split: str, record: Any,
                           say: Any) -> dict[str, float] | None:  # fmt: skip
        """A language model's validation loss and perplexity before any step (a resumed run's
        as recorded); None for other kinds or without a validation split."""
        if not self.inner.scores_pretrained:
            return None
        return pretrained.before_fine_tuning(trainer, loader, split, record, say)
