"""The command's compilation settings: JAX's persistent cache in jaxfeed's cache folder, on unless
``--no-compile-cache``, and the memory each compilation freed handed back to the system, the
threads' freed buffers kept in one malloc arena (:mod:`jaxfeed.runtime.freed_memory`).

>>> command_compile_cache(True) is not None
True
"""

from __future__ import annotations

from pathlib import Path

from jaxfeed.data.formats.cache import cache_root
from jaxfeed.runtime.compile_cache import use_compile_cache
from jaxfeed.runtime.freed_memory import one_arena, release_after_compiles

FOLDER = "xla"  # under the cache folder ($JAXFEED_CACHE, else ~/.cache/jaxfeed)


def command_compile_cache(enabled: bool) -> Path | None:
    """Turn JAX's persistent compilation cache on in ``<cache>/xla`` (or the folder
    ``JAX_COMPILATION_CACHE_DIR`` names), or off; returns the folder in use, or None. Either
    way the compiler's freed memory goes back to the system after each compilation, and the
    threads share one malloc arena (:mod:`jaxfeed.runtime.freed_memory`)."""
    one_arena()
    release_after_compiles()
    return use_compile_cache(cache_root() / FOLDER if enabled else None)
