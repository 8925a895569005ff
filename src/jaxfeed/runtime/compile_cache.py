"""JAX's persistent compilation cache in a folder of the caller's choice (the command: jaxfeed's
cache folder), so a second run of the same program loads its compiled steps instead of compiling
them again.

JAX keeps a program there once it took ``jax_persistent_cache_min_compile_time_secs`` to compile:
0.1 s here (:data:`MIN_COMPILE_SECONDS`), unless that variable is set, not JAX's default of 1 s,
which compiles a small run's many short programs (parameter initialisers, the evaluation step)
afresh every time: a second ``jaxfeed train --data digits --model mlp --epochs 1`` took 6.6 CPU s
at 1 s, 3.7-4.0 at 0.1 (2-core CPU, quiet). Entries are keyed by the program, its compile
options, the devices and the JAX version, so a changed model or another chip compiles afresh.
A folder that cannot be written is a warning and the run compiles as usual: the cache only
saves time.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import warnings
from pathlib import Path

import jax

MAX_SIZE = 4 << 30  # bytes kept before the least recently used entries go (with filelock)
MIN_COMPILE_SECONDS = 0.1  # programs that compiled faster are not kept
_THRESHOLD_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def use_compile_cache(folder: str | os.PathLike[str] | None) -> Path | None:
    """Keep compiled programs in ``folder``; None turns JAX's persistent cache off. Returns the
    folder in use: one set before (``JAX_COMPILATION_CACHE_DIR``, ``jax.config``) is kept, and a
    folder that cannot be written gives a warning and None (nothing is cached). Programs that
    took :data:`MIN_COMPILE_SECONDS` or more to compile are kept, unless a threshold was set
    (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``, or ``jax.config`` away from JAX's 1 s).

    >>> import tempfile
    >>> use_compile_cache(tempfile.mkdtemp()).is_dir()
    True
    """
    if folder is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    if (
        _THRESHOLD_ENV not in os.environ
        and jax.config.jax_persistent_cache_min_compile_time_secs == 1
    ):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    chosen = jax.config.jax_compilation_cache_dir
    if chosen:  # the user's own (JAX_COMPILATION_CACHE_DIR) or set earlier in this process
        return Path(chosen)
    folder = Path(folder).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as err:
        warnings.warn(
            f"the compilation cache folder {folder} cannot be written ({err.strerror or err}): "
            "compiling without it (set JAXFEED_CACHE to another folder, or --no-compile-cache)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if (
        "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ
        and importlib.util.find_spec("filelock") is not None  # JAX's bounded cache locks with it
    ):
        jax.config.update("jax_compilation_cache_max_size", MAX_SIZE)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder
