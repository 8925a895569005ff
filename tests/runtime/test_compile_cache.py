"""JAX's persistent cache as jaxfeed turns it on: programs that took 0.1 s to compile are kept,
not only those over JAX's default of 1 s, unless the user set a threshold."""

import jax
import pytest

from jaxfeed.runtime.compile_cache import MIN_COMPILE_SECONDS, use_compile_cache

ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
OPTION = "jax_persistent_cache_min_compile_time_secs"


@pytest.fixture
def threshold():
    """Leave JAX's cache options as this test found them (the session's own cache stays on)."""
    before = {name: getattr(jax.config, name) for name in (OPTION, "jax_enable_compilation_cache")}
    yield
    for name, value in before.items():
        jax.config.update(name, value)


@pytest.mark.parametrize(("env", "configured", "kept"), [
    (None, 1.0, MIN_COMPILE_SECONDS),  # JAX's default: the small programs are kept too
    ("2", 1.0, 1.0),  # the variable set: its value stands (JAX read it at start, here 1.0)
    (None, 5.0, 5.0),  # set through jax.config before: kept
])  # fmt: skip
def test_the_threshold_is_a_tenth_of_a_second_unless_the_user_set_one(
    env, configured, kept, threshold, monkeypatch, tmp_path
):
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    jax.config.update(OPTION, configured)
    assert use_compile_cache(tmp_path) is not None
    assert getattr(jax.config, OPTION) == kept


def test_turning_the_cache_off_leaves_the_threshold(threshold, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    jax.config.update(OPTION, 1.0)
    assert use_compile_cache(None) is None
    assert not jax.config.jax_enable_compilation_cache
    assert getattr(jax.config, OPTION) == 1.0
