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


def test_a_placement_the_private_path_fails_on_takes_the_public_one_alone(monkeypatch):
    """jaxlib's batched_device_put raised ``bad_function_call`` for one mesh's sharding: that
    placement goes through ``jax.device_put`` from then on, every other keeps the private path
    (a process-wide switch made the private path's use depend on the tests' order)."""
    cpu = jax.devices()[0]
    broken = jax.sharding.SingleDeviceSharding(cpu)
    real = devices._put_one

    def put_one(x, placement, fast, copy):
        if placement == broken:
            raise RuntimeError("bad_function_call")
        return real(x, placement, fast, copy)

    monkeypatch.setattr(devices, "_put_one", put_one)
    monkeypatch.setattr(devices, "_PUBLIC_ONLY", set())
    x = np.arange(4, dtype=np.float32)
    [y] = devices.device_put([x], [broken])
    np.testing.assert_array_equal(np.asarray(y), x)
    assert list(devices._PUBLIC_ONLY) == [broken]
    assert devices.private_api_paths()["device_put"] == "jaxlib batched_device_put"
    calls = []
    monkeypatch.setattr(devices, "_put_one", lambda *a: calls.append(a) or real(*a))
    devices.device_put([x], [cpu])
    assert len(calls) == 1  # another placement still takes the private path
