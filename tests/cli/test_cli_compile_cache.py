"""The command keeps JAX's compiled programs in jaxfeed's cache folder (``<cache>/xla``), so the
same command started again loads them; ``--no-compile-cache`` turns that off."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxfeed.runtime.compile_cache import use_compile_cache


def _run(*args, cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``jaxfeed ARGS`` with ``cache`` as jaxfeed's cache folder and no compilation cache of the
    test session's own (conftest.py's JAX_COMPILATION_CACHE_DIR), every program kept."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env |= {
        "JAXFEED_CACHE": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "jaxfeed.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
    )  # fmt: skip


def _entries(cache: Path) -> set[str]:
    folder = cache / "xla"
    return (
        {p.name for p in folder.iterdir() if p.name.endswith("-cache")}
        if folder.is_dir()
        else set()
    )


def test_a_second_run_loads_the_first_run_s_programs_and_the_flag_turns_it_off(tmp_path):
    cache = tmp_path / "cache"
    # the MLP: the cheapest programs to compile (each of the four runs compiles what it misses)
    train = ("train", "--data", "digits", "--model", "mlp", "--epochs", "1", "--max-steps", "2")
    first = _run(*train, "--out", "one", cache=cache, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    written = _entries(cache)
    assert written, "the first run kept no compiled program"
    second = _run(*train, "--out", "two", cache=cache, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert _entries(cache) == written  # every program of the second run came from the cache
    other = tmp_path / "other-cache"
    off = _run("eval", "one", "--json", "--no-compile-cache", cache=other, cwd=tmp_path)
    assert off.returncode == 0, off.stderr[-3000:]
    assert not _entries(other)
    on = _run("eval", "one", "--json", cache=other, cwd=tmp_path)
    assert on.returncode == 0, on.stderr[-3000:]
    assert _entries(other)


def test_a_cache_folder_that_cannot_be_written_is_a_warning(tmp_path):
    import jax

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)  # as in a run with none of its own
    try:
        with pytest.warns(RuntimeWarning, match="cannot be written.*--no-compile-cache"):
            assert use_compile_cache(blocked / "xla") is None
        assert jax.config.jax_compilation_cache_dir is None
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["train", "--data", "digits"], True),
        (["train", "--data", "digits", "--no-compile-cache"], False),
        (["eval", "no-run", "--no-compile-cache"], False),
        (["predict", "no-run", "x.png", "--no-compile-cache"], False),
        (["generate", "no-run", "hello", "--no-compile-cache"], False),
    ],
)
def test_each_compiling_command_takes_the_flag(args, wanted, monkeypatch, capsys):
    from cli_helpers import run_main
    from jaxfeed.cli import commands
    from jaxfeed.recipes.config import ConfigError

    asked = []

    def stop(enabled):
        asked.append(enabled)
        raise ConfigError("stopped before any work")

    monkeypatch.setattr(commands, "_compile_cache", stop)
    status, _, err = run_main(capsys, *args)
    assert (status, asked) == (2, [wanted]), err
