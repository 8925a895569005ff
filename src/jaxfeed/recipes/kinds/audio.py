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
    hub_task = "audio-classification"
    reads = "audio"  # audio files (or folders of them)

    def __init__(self) -> None:
        super().__init__("audio")

    def check(self, config: RunConfig) -> None:
        if config.image_size is not None:
            raise ConfigError("--image-size: the input column holds audio, not images")

    def plan(self, run_data: Any, config: RunConfig,
             pretrained: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The clips' log-mel features planned from every split; with a Hub checkpoint
        (``pretrained``), its front end (its ``preprocessor_config.json``, checked against the
        model), clips resampled to its rate (:func:`jaxfeed.recipes.audio.plan_front_end`)."""
        columns = run_data.columns
        if pretrained is not None:
            extractor = pretrained.processor_with("num_mel_bins", "audio")
            return audiomod.plan_front_end(
                run_data.source.data, columns.inputs[0], columns.label, run_data.task, extractor,
                pretrained.spec, config.sample_rate, config.clip_seconds,
            )  # fmt: skip
        return audiomod.plan_audio(
            run_data.source.data, columns.inputs[0], columns.label, run_data.task,
            config.sample_rate, config.clip_seconds,
        )  # fmt: skip

    def plan_inputs(self, train: Any, inputs: list[str], label: str, task: str,
                    image_size: Any, options: Any = None,
                    image_mode: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """Audio is planned from every split's clips (:meth:`plan`), not the train split's."""
        raise ConfigError(
            f"the input column {inputs[0]!r} is audio: plan it with jaxfeed.recipes.audio.plan_audio"
        )

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
