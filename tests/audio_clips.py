"""Generated audio for the tests: tones and chirps whose class is their frequency pattern."""

import wave
from pathlib import Path

import numpy as np

CLASSES = ("falling", "rising", "steady")


def write_wav(path, samples, rate):
    """16-bit mono PCM with the standard library's ``wave``."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def clip(kind, rng, rate, seconds):
    """A chirp falling or rising between a low and a high frequency, or a steady tone, in noise."""
    t = np.arange(round(seconds * rate)) / rate
    low, high = rng.uniform(300, 900), rng.uniform(1800, 3000)
    if kind == "steady":
        freq = np.full_like(t, rng.uniform(low, high))
    elif kind == "rising":
        freq = low + (high - low) * t / seconds
    else:
        freq = high - (high - low) * t / seconds
    return 0.5 * np.sin(2 * np.pi * np.cumsum(freq) / rate) + 0.05 * rng.normal(size=len(t))


def make_folder(root, per_class=20, seed=0, seconds=(0.25, 0.35)):
    """``root/<class>/<i>.wav``: every fourth clip at 16 kHz, the others at 8 kHz."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    for kind in CLASSES:
        (root / kind).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            rate = 16000 if i % 4 == 0 else 8000
            write_wav(root / kind / f"{i}.wav", clip(kind, rng, rate, rng.uniform(*seconds)), rate)
    return root
