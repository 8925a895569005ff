"""Issue 54, item 4: the memory the XLA compiler and the steps free goes back to the system after
each compilation and each epoch (glibc kept it: about 200 MB of the licence classifier's 1.1 GB
peak)."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.registry import kind_of
from jaxfeed.recipes.sources.registry import source_for
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.recipes.train.trainer import ReleaseFreedMemory, RunParts, build_trainer
from jaxfeed.runtime import freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_each_compilation_is_followed_by_a_trim():
    assert freed_memory.release_after_compiles(least_seconds=0.0)
    try:
        before = freed_memory.trims()
        jax.jit(lambda x: jnp.tanh(x) * 3 + 0.5)(jnp.arange(7.0)).block_until_ready()
        assert freed_memory.trims() > before
        compiled = freed_memory.trims()
        freed_memory.release_after_compiles(least_seconds=1e9)  # only long compilations
        jax.jit(lambda x: jnp.cos(x) - 2)(jnp.arange(5.0)).block_until_ready()
        assert freed_memory.trims() == compiled
    finally:
        freed_memory.release_after_compiles()


def test_the_command_hands_memory_back_at_each_epoch_end():
    config = RunConfig(model="mlp", epochs=1, batch_size=4, lr=1e-3)
    prep = Preprocessing("array", ["x"], "y", [3])
    parts = RunParts(config, prep, kind_of(prep), source_for(config.model_spec), 2)
    trainer_callbacks = build_trainer(parts).callbacks
    release = [c for c in trainer_callbacks if isinstance(c, ReleaseFreedMemory)]
    assert len(release) == 1
    before = freed_memory.trims()
    release[0].on_epoch_end(None, {})
    assert freed_memory.trims() == before + (1 if sys.platform.startswith("linux") else 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_one_arena_unless_the_environment_chose():
    code = "from jaxfeed.runtime.freed_memory import one_arena; print(one_arena())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert ran.stdout.strip() == "True", ran.stderr[-2000:]
    env["MALLOC_ARENA_MAX"] = "4"  # the user's choice stands
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert ran.stdout.strip() == "False", ran.stderr[-2000:]
