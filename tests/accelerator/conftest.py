"""The accelerator tier's fixtures: the platform the tests run on (a TPU or GPU; CPU only with
JAXFEED_ACCELERATOR_TESTS_ON_CPU=1), and small data made once per session."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import PIL.Image
import pytest
from accelerator_helpers import ON_CPU


@pytest.fixture(scope="session")
def platform() -> str:
    """JAX's platform here: ``tpu`` or ``gpu`` (``cpu`` only when asked for)."""
    name = jax.default_backend()
    assert name in ("tpu", "gpu") or ON_CPU, f"the accelerator tier ran on {name}"
    return name


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """Three classes of 12 images (16 x 16 RGB), each a level of grey with noise."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name, level in (("cat", 30), ("dog", 220), ("fox", 125)):
        (root / name).mkdir()
        for i in range(12):
            pixels = np.clip(rng.normal(level, 15, (16, 16, 3)), 0, 255).astype(np.uint8)
            PIL.Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root
