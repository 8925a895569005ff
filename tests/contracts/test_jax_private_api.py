"""jaxfeed's few uses of JAX's private API (``jax._src``) each have a public fallback.

On the pinned JAX the private (faster or more precise) path must run: a JAX release that moves it
fails here, in one place, instead of showing up as a slowdown. Forced off, the fallback must give
the same results.
"""

import builtins
import sys

import jax
import numpy as np
import pytest

from jaxfeed.runtime import devices


def test_the_pinned_jax_takes_the_private_paths():
    assert devices.private_api_paths() == {
        "device_put": "jaxlib batched_device_put",
        "backends_initialized": "jax._src.xla_bridge",
    }, f"JAX {jax.__version__} moved a private API jaxfeed uses: see jaxfeed.runtime.devices"


@pytest.fixture
def no_private_jax(monkeypatch):
    """``from jax._src ...`` in jaxfeed's modules fails, as on a JAX release that moved it."""
    real = builtins.__import__

    def refuse(name, globals=None, locals=None, fromlist=(), level=0):
        if name.startswith("jax._src") and (globals or {}).get("__name__", "").startswith(
            "jaxfeed"
        ):
            raise ImportError(f"no {name} here")
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", refuse)
    monkeypatch.setattr(devices, "_fast_put", None)
    yield
    monkeypatch.setattr(builtins, "__import__", real)
    devices._fast_put = None


def test_without_the_private_api_the_public_fallbacks_run(no_private_jax):
    assert devices.private_api_paths() == {
        "device_put": "jax.device_put",
        "backends_initialized": "assumed True",
    }
    assert devices.backends_initialized() is True
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    [y] = devices.device_put([x], [jax.devices()[0]])
    np.testing.assert_array_equal(np.asarray(y), x)
    assert "jax._src" in sys.modules  # JAX itself keeps working; only jaxfeed's imports fail
