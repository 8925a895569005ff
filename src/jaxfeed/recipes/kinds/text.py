"""Text: one column of free text, tokenized (``--tokenizer``, or a byte-level BPE trained on the
train split, kept as ``tokenizer.json``) and padded in buckets of similar lengths; the
``transformer`` classifier (or regressor) by default; exported with its tokenizer, strings in."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jaxfeed.recipes import text as textmod
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.base import Kind, _target
from jaxfeed.recipes.objectives import numeric_options
from jaxfeed.recipes.spec import Preprocessing


class TextKind(Kind):
    """A text column classified or regressed (see the module docstring).

    >>> TextKind().describe(Preprocessing("text", ["t"], "y", [24], text={}), None)
    'inputs: token ids (up to 24)'
    """

    default_model = "transformer"
    tokens = True

    def __init__(self, name: str = "text") -> None:
        super().__init__(name)

    @staticmethod
    def check_options(config: RunConfig) -> None:
        """Before any data is read: ``--task lm`` takes no label column nor class weights; a
        ``--tokenizer`` loads."""
        textmod.check_options(config)

    def plan(self, run_data: Any, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        columns = run_data.columns
        prep, notes = textmod.plan_text(
            run_data.splits.train, columns.inputs[0], columns.label, run_data.task, config
        )
        if columns.excluded:
            excluded = ", ".join(c for c, _ in columns.excluded)
            notes.append(f"excluded: {excluded} (the text column is the input)")
        return prep, notes

    def plan_pretrained(self, checkpoint: Any, run_data: Any,
                        config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        from jaxfeed.recipes import pretrained  # import cost: the Hub layer, for a checkpoint

        columns = run_data.columns
        return pretrained.plan_text(
            checkpoint, run_data.splits.train, columns.inputs[0], columns.label, run_data.task,
            config,
        )  # fmt: skip

    def reopen(self, prep: Preprocessing, run_data: Any, out: Path) -> None:
        textmod.attach_tokenizer(prep, out)

    def describe(self, prep: Preprocessing, run_data: Any) -> str:
        shown = textmod.describe_inputs(prep)
        return shown if run_data is None else f"{shown}, {_target(run_data)}"

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        options = textmod.loader_options(prep)  # buckets or packing
        return options if train else {k: v for k, v in options.items() if k != "bucket_by_length"}

    def write_files(self, prep: Preprocessing, out: Path) -> None:
        textmod.write_tokenizer(prep, out)

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return numeric_options(config, prep, class_weights, scale=None)

    def model_inputs(self, prep: Preprocessing, model: Any) -> str | dict[str, str]:
        return textmod.model_inputs(prep, model)  # token columns, as __call__ names them

    def export(self, trainer: Any, folder: Path, prep: Preprocessing, labels: list[str],
               extra: dict[str, Any]) -> None:  # fmt: skip
        """Strings in: the declared spec and ``tokenizer.json`` travel in ``model/``; the token
        ids the model takes are recorded in ``extra["text"]``."""
        from jaxfeed.serve.export import export  # import cost: jax.export, when a run exports

        inputs = dict(trainer.inputs)
        extra = {**extra, "text": {**prep.text, "inputs": inputs}}
        spec = dataclasses.replace(prep.serving(labels), text=prep.serving_text(inputs))
        export(trainer, folder, textmod.export_example(prep, trainer.inputs), extra=extra,
               preprocessing=spec, tokenizer=prep.tokenizer)  # fmt: skip
