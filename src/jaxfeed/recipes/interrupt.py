"""Ctrl-C that always stops training, and never in the middle of JAX's own clean-up.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be. JAX registers a
garbage-collection callback (``jax._src.lib._xla_gc_callback``) that runs at any allocation; an
exception raised inside a GC callback or a ``__del__`` is printed as "Exception ignored" and
dropped, so a Ctrl-C that lands there is lost (the run goes on to exit 0), and one raised inside
the teardown of a compilation's objects can leave XLA's C++ state half-destroyed (a segfault at
exit). :func:`safe_interrupts` installs a SIGINT handler that raises only from ordinary code: when
the signal arrives inside such a callback it re-delivers it 20 ms later, after the callback returned.

>>> with safe_interrupts():
...     pass
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

RETRY_SECONDS = 0.02
FLUSH_SECONDS = 1.0  # the longest a block's exit waits for a re-delivery already sent
UNSAFE_FUNCTIONS = {"_xla_gc_callback", "__del__", "_remove_dead_weakref", "_callback"}
UNSAFE_FILES = ("weakref.py", "weakref_lru_cache.py")


def in_cleanup(frame: FrameType | None, depth: int = 8) -> bool:
    """Whether ``frame`` (or one of its ``depth`` callers) is a GC callback, a finaliser or a
    weak-reference callback: places where an exception is dropped or breaks a C++ teardown."""
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name in UNSAFE_FUNCTIONS or code.co_filename.endswith(UNSAFE_FILES):
            return True
        frame, depth = frame.f_back, depth - 1
    return False


@contextlib.contextmanager
def safe_interrupts(ignore_after: bool = False) -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` at the next safe point (main thread).

    A re-delivery and the block's exit are atomic: the timer sends the signal only while holding
    the lock and the block is active; the exit takes the lock, and when a re-delivery was already
    sent it waits (up to ``FLUSH_SECONDS``) for this handler to run before restoring the previous
    one, so a Ctrl-C is raised here once, never handed to the restored handler as a second one.
    A process started with SIGINT ignored (``cmd &`` in a script) keeps ignoring it.

    ``ignore_after``: for a process that only exits once the block is done (the command). When
    the block raised its ``KeyboardInterrupt``, or is left by a ``SystemExit`` (a run stopped by
    its signal handler), SIGINT is then ignored instead of handled by the previous handler: a
    later one (a second press while the run unwinds; a signal not yet handled when the block
    ends) can neither raise outside every handler nor, once Python resets its handlers at exit,
    end the process by SIGINT (status -2 instead of 130).
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # started ignoring it: keep ignoring
    ):
        yield
        return
    pid = os.getpid()
    lock = threading.Lock()
    state = {"pending": False, "active": True, "sent": False, "stopped": False}

    def redeliver() -> None:
        with lock:
            if state["pending"] and state["active"]:
                state["pending"] = False  # landing in a clean-up again schedules another one
                state["sent"] = True
                os.kill(pid, signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        state["sent"] = False
        if in_cleanup(frame):
            if not state["pending"]:  # one re-delivery at a time
                state["pending"] = True
                timer = threading.Timer(RETRY_SECONDS, redeliver)
                timer.daemon = True
                timer.start()
            return
        state["pending"] = False
        state["stopped"] = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        state["stopped"] = True
        raise
    finally:
        try:
            # no re-delivery starts after this; one sent meanwhile may raise right here, while
            # the lock is awaited: it is this block's Ctrl-C, and the finally below still runs
            with lock:
                state["active"] = False
            end = time.monotonic() + FLUSH_SECONDS
            while state["sent"] and time.monotonic() < end:  # sent: runs this handler, here
                time.sleep(0.001)
        finally:
            state["active"] = False
            stopped = ignore_after and state["stopped"]
            signal.signal(signal.SIGINT, signal.SIG_IGN if stopped else previous)
