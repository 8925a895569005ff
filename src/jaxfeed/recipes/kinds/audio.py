"""Audio: clips decoded and resampled in the loader's workers and turned into log-mel
spectrograms (:mod:`jaxfeed.recipes.audio`), planned from every split's clips; ``audio_cnn`` by
default."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jaxfeed.recipes import audio as audiomod
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.spec import Preprocessing


class AudioKind(Kind):
    """Audio clips (see the module docstring).

    >>> AudioKind().check(RunConfig(image_size="32"))
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: --image-size: the input column holds audio, not images
    """

    default_model = "audio_cnn"

    def __init__(self) -> None:
        super().__init__("audio")

    def check(self, config: RunConfig) -> None:
        if config.image_size is not None:
            raise ConfigError("--image-size: the input column holds audio, not images")

    def plan(self, run_data: Any, config: RunConfig) -> tuple[Preprocessing, list[str]]:
        columns = run_data.columns
        return audiomod.plan_audio(
            run_data.source.data, columns.inputs[0], columns.label, run_data.task,
            config.sample_rate, config.clip_seconds,
        )  # fmt: skip

    def plan_pretrained(self, checkpoint: Any, run_data: Any,
                        config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        from jaxfeed.recipes import pretrained  # import cost: the Hub layer, for a checkpoint

        columns = run_data.columns
        return pretrained.plan_audio(
            checkpoint, run_data.source.data, columns.inputs[0], columns.label, run_data.task,
            config,
        )  # fmt: skip

    def reopen(self, prep: Preprocessing, run_data: Any, out: Path) -> None:
        audiomod.scan_splits(run_data.source.data, prep.input_columns[0])

    def resolved_options(self, config: RunConfig, prep: Preprocessing,
                         run_data: Any) -> RunConfig:  # fmt: skip
        audio = prep.audio or {}
        config = super().resolved_options(config, prep, run_data)
        return dataclasses.replace(
            config,
            sample_rate=audio.get("sample_rate", config.sample_rate),
            clip_seconds=audio.get("clip_seconds", config.clip_seconds),
        )

    def loader_options(self, prep: Preprocessing, train: bool) -> dict[str, Any]:
        return {"row_transform": audiomod.row_transform(prep, train=train)}
