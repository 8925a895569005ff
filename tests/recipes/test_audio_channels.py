"""A run on clips of several channels says it mixes them to mono (issue 41: say every choice)."""

import numpy as np
import pytest

from jaxfeed import Dataset
from jaxfeed.data.features import Audio
from jaxfeed.recipes.audio import plan_audio

soundfile = pytest.importorskip("soundfile")


def test_stereo_clips_mixed_to_mono_are_said(tmp_path):
    t = np.arange(8000) / 8000
    tone = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    soundfile.write(tmp_path / "stereo.wav", np.stack([tone, -tone], axis=1), 8000)
    soundfile.write(tmp_path / "mono.wav", tone, 8000)
    paths = [str(tmp_path / "stereo.wav"), str(tmp_path / "mono.wav")]
    ds = Dataset.from_dict({"audio": paths, "label": [0, 1]}).cast_column("audio", Audio())
    _, notes = plan_audio({"train": ds}, "audio", "label", "classification", None, None)
    said = [n for n in notes if n.startswith("channels:")]
    assert said == ["channels: 1 clip of 2 channels mixed to mono (the channels averaged), 1 mono"]
    mono = Dataset.from_dict({"audio": paths[1:], "label": [1]}).cast_column("audio", Audio())
    _, notes = plan_audio({"train": mono}, "audio", "label", "classification", None, None)
    assert not [n for n in notes if n.startswith("channels:")]
