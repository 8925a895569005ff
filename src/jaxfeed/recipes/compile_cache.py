"""The command's compilation cache: JAX's persistent cache in jaxfeed's cache folder, on unless
``--no-compile-cache``.

>>> command_compile_cache(True) is not None
True
"""

from __future__ import annotations

from pathlib import Path

from jaxfeed.data.formats.cache import cache_root
from jaxfeed.runtime.compile_cache import use_compile_cache

FOLDER = "xla"  # under the cache folder ($JAXFEED_CACHE, else ~/.cache/jaxfeed)


def command_compile_cache(enabled: bool) -> Path | None:
    """Turn JAX's persistent compilation cache on in ``<cache>/xla`` (or the folder
    ``JAX_COMPILATION_CACHE_DIR`` names), or off; returns the folder in use, or None."""
    return use_compile_cache(cache_root() / FOLDER if enabled else None)
