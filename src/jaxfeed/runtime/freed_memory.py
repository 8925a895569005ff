"""Memory the process freed, handed back to the operating system: after each XLA compilation and
whenever a caller asks (the command: at the end of each epoch).

Compiling a program (LLVM, on the CPU) allocates and frees a few hundred MB in its threads, and
the steps free their buffers in the threads that ran them; glibc keeps what was freed in its
per-thread arenas, so a process that compiled a few train and evaluation steps held it until it
exited. On the text classifier of issue 54 (614 paragraphs, a 2-core machine) that was about
200 MB of a 1.1 GB peak. :func:`release_after_compiles` has glibc return it (``malloc_trim``)
each time JAX finishes compiling a program that took a while, :func:`release_now` at once, and
:func:`one_arena` keeps the threads' freed buffers in one arena; where the C library has no
``malloc_trim`` (not glibc) they do nothing.

>>> release_now() in (True, False)
True
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any

from jax import monitoring

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # JAX's, after each compilation
LEAST_SECONDS = 0.3  # a shorter compilation frees little; a trim takes 10-150 ms
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"trim": None, "looked": False, "installed": False, "trims": 0,
                          "least": LEAST_SECONDS}  # fmt: skip


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (looked up once), or None (another C library, another system)."""
    if not _STATE["looked"]:
        trim = None
        if sys.platform.startswith("linux"):
            try:
                trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
            except OSError:
                trim = None
        if trim is not None:
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        _STATE.update(trim=trim, looked=True)
    return _STATE["trim"]


def release_now() -> bool:
    """Hand the memory the process freed back to the system now; False where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    _STATE["trims"] += 1
    return True


def one_arena() -> bool:
    """Have glibc serve every thread from one malloc arena (``M_ARENA_MAX`` 1) unless
    ``MALLOC_ARENA_MAX`` says otherwise: XLA's threads each kept the step buffers they freed in
    an arena of their own (up to 8 a core), which :func:`release_now` only partly returns. The
    steps allocate a few large buffers each, so the threads rarely wait on the one lock. Returns
    whether it is set (False elsewhere than glibc, or when the environment chose)."""
    if os.environ.get("MALLOC_ARENA_MAX") or _malloc_trim() is None:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, 1))


def release_after_compiles(least_seconds: float = LEAST_SECONDS) -> bool:
    """After each compilation of at least ``least_seconds``, :func:`release_now`. Installed once
    per process (a later call sets the threshold); returns whether it is installed (False where
    the C library cannot do it)."""
    with _LOCK:
        _STATE["least"] = float(least_seconds)
        if _STATE["installed"]:
            return True
        if _malloc_trim() is None:
            return False

        def on_event(event: str, seconds: float, **_: Any) -> None:
            if event == COMPILE_EVENT and seconds >= _STATE["least"]:
                release_now()

        monitoring.register_event_duration_secs_listener(on_event)
        _STATE["installed"] = True
        return True


def trims() -> int:
    """How many times the memory was handed back in this process (for tests and reports)."""
    return int(_STATE["trims"])


__all__ = ["one_arena", "release_after_compiles", "release_now", "trims"]
