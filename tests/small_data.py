"""Small generated data sets a new user might hand ``jaxfeed train`` (issue 40): a folder of pure
tones, a two-class image folder and a short text CSV, each with ``train`` and ``test`` parts and
an obvious signal, so that the command's defaults must reach a high test accuracy on them. The
generators live in :mod:`jaxfeed.bench.small_data`, shared with ``benchmarks/quality.py``."""

from __future__ import annotations

from pathlib import Path

from jaxfeed.bench.small_data import SIGNAL, TONES, WORDS, audio_folder, image_folder, text_csv

__all__ = ["SIGNAL", "TONES", "WORDS", "image_folder", "text_csv", "tone_folder"]


def tone_folder(root, train=40, test=12, seconds=1.0, rate=8000, seed=0) -> Path:
    """``root/{train,test}/<class>/<i>.wav``: one-second tones of 220, 660 and 1,760 Hz with a
    random phase and mild noise (the issue's 120-clip folder: 40 train and 12 test per class)."""
    return audio_folder(root, TONES, train, test, seconds, rate, seed)
