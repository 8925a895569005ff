"""Starting worker processes with ``spawn`` (never ``fork``: the parent may run JAX), and what
goes wrong when a script starts them at import time.

:class:`Spawned` is one such process with a duplex pipe; the DataLoader's process workers
(:mod:`jaxfeed.loading.workers`) and ``Dataset.map``/``filter`` with ``num_proc`` (:mod:`jaxfeed.data.ops.parallel`)
both start theirs with it. This module imports no other jaxfeed module (and never jax): a spawned
process imports it to unpickle ``_spawned_main``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

WAIT_POLL_SECONDS = 0.005  # how often a held-back payload checks whether its turn has come
NO_MAIN_GUARD_EXIT = 86  # a worker's exit status when it found the main script unguarded
STARTED_AT: float | None = None  # in a spawned child: when its target began (``time.time()``)
RECEIVED_AT: float | None = None  # in a spawned child: when its payload arrived


class Cancelled(Exception):
    """The consumer stopped waiting (the epoch was closed)."""


class WorkerError(RuntimeError):
    """A worker process died or could not start."""


class MainGuardError(RuntimeError):
    """The main script started worker processes while being re-imported by a spawned worker."""


def main_guard_message(starter: str, fallback: str) -> str:
    """What to do when a spawned process re-running the main script reached ``starter`` again.

    >>> print(main_guard_message("Dataset.map(num_proc=...)", "num_proc=None").splitlines()[0])
    ... # doctest: +ELLIPSIS
    Dataset.map(num_proc=...) starts worker processes with 'spawn', which runs ... again in each ...
    """
    main = sys.modules.get("__main__")
    script = os.path.basename(getattr(main, "__file__", "") or "your script")
    return (
        f"{starter} starts worker processes with 'spawn', which runs {script} again in each of "
        f"them; {script} reached {starter} at import time. Put the code that runs it under\n\n"
        '    if __name__ == "__main__":\n\n'
        f"at the bottom of {script} (or use {fallback})."
    )


@contextlib.contextmanager
def _main_without_file(hide: bool = False) -> Any:
    """Spawn re-runs the main script in workers from ``__main__.__file__`` (or re-imports the
    module of ``python -m``). Code from stdin or ``-c`` has a ``__file__`` that is no file (which
    makes every worker die): hide it, as notebooks do (the user's functions reach the workers by
    value anyway). With ``hide``, hide the main module whatever it is: the child runs no main
    script at all."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec = getattr(main, "__spec__", None)
    hide_file = path is not None and (
        hide
        or (
            getattr(spec, "name", None) is None
            and not os.path.isfile(os.path.join(multiprocessing.process.ORIGINAL_DIR or "", path))
        )
    )
    hide_spec = hide and spec is not None
    if hide_file:
        del main.__file__
    if hide_spec:
        main.__spec__ = None
    try:
        yield
    finally:
        if hide_file:
            main.__file__ = path
        if hide_spec:
            main.__spec__ = spec


def in_spawn_bootstrap() -> bool:
    """True while a spawned process is still importing its parent's main module."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def _spawned_main(
    target: Callable | str, conn: Any, *args: Any, env: dict[str, str] | None = None
) -> None:
    """A spawned process: read the payload from the pipe, then run ``target(conn, payload, ...)``.

    ``target`` may be named (``"module:function"``): its module is imported only once the payload
    arrives, so a process whose parent holds the payload back (see :class:`Spawned`'s ``wait``)
    idles instead of importing while it waits its turn."""
    global STARTED_AT, RECEIVED_AT
    STARTED_AT = time.time()
    try:
        payload = conn.recv_bytes()
    except (EOFError, OSError):  # the parent went away before sending it
        return
    RECEIVED_AT = time.time()
    for name, value in (env or {}).items():  # before the target's imports (numpy reads them)
        os.environ.setdefault(name, value)
    if isinstance(target, str):
        module, name = target.split(":")
        target = getattr(importlib.import_module(module), name)
    target(conn, payload, *args)


def _named(target: Callable) -> Callable | str:
    """``target`` as ``"module:function"`` when it can be imported by that name, else itself."""
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    if module and module != "__main__" and name.isidentifier():
        return f"{module}:{name}"
    return target


class Spawned:
    """One worker process started with ``spawn`` (never ``fork``: the parent may run JAX), with a
    duplex pipe ``conn`` to it.

    Its ``payload`` (the user's functions, a shard of rows: any size) goes through that pipe once
    the process runs, written by a thread. It never travels with the process's start-up data:
    ``multiprocessing`` writes those to the child while holding the pipe's other end open itself,
    so a child that dies before reading them (a script without a main guard, an import error, a
    kill) leaves that write blocked forever once they pass the pipe's 64 KiB. Here a dead child
    closes the only reading end: the write fails at once and the parent reads end-of-file or the
    exit status, which :meth:`failure` turns into a clear error.

    Called while this process is itself a spawned child re-running an unguarded main script, it
    leaves quietly with :data:`NO_MAIN_GUARD_EXIT` (the parent reports it once, with
    :class:`MainGuardError`, instead of one bootstrapping traceback per child).

    With ``main=False`` the child does not run the main script again at all: it starts from the
    interpreter, reads its payload and imports ``target``'s module (the payload must then carry
    the main script's functions by value, as cloudpickle does). A script that imports torch or
    JAX at module level then costs its workers nothing, and needs no main guard for them.

    With ``wait``, the payload is held back until ``wait()`` is true (or the child died), and the
    child, having started only its interpreter, idles until then: its imports wait their turn.
    A pool of workers uses it so that no more of them import at once than the machine has cores
    to spare beside the parent.

    ``env`` holds environment variables the child sets, unless it inherited them, before it
    imports ``target``'s module (a named target's: see :func:`_spawned_main`).
    """

    def __init__(
        self,
        target: Callable,
        args: tuple,
        name: str,
        payload: bytes,
        main: bool = True,
        wait: Callable[[], bool] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        if in_spawn_bootstrap():
            os._exit(NO_MAIN_GUARD_EXIT)
        context = multiprocessing.get_context("spawn")  # never fork a process that runs JAX
        self.conn, child = context.Pipe(duplex=True)
        self.released_at: float | None = None  # when the payload was let go (after ``wait``)
        self.process = context.Process(
            target=_spawned_main,
            args=(_named(target), child, *args),
            kwargs={"env": env},
            name=name,
            daemon=True,
        )
        try:
            self.started_at = time.time()
            with _main_without_file(hide=not main):
                self.process.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()  # the child's end lives in the child only: its death is end-of-file
        self._sender = threading.Thread(
            target=self._send, args=(payload, wait), name=f"{name}-payload", daemon=True
        )
        self._sender.start()

    def _send(self, payload: bytes, wait: Callable[[], bool] | None) -> None:
        while wait is not None and not wait() and self.process.is_alive():
            time.sleep(WAIT_POLL_SECONDS)
        self.released_at = time.time()
        with contextlib.suppress(OSError):  # the child died: the parent sees its exit status
            self.conn.send_bytes(payload)

    def sent(self) -> None:
        """Wait until the payload is written (before sending anything else on ``conn``)."""
        self._sender.join()

    def failure(
        self, who: str, doing: str, error: type[Exception], starter: str, fallback: str
    ) -> Exception:
        """The exception for this process having died: :class:`MainGuardError` when it stopped
        in an unguarded main script, else ``error`` naming ``who``, its pid and exit status."""
        code = self.process.exitcode
        if code == NO_MAIN_GUARD_EXIT:
            return MainGuardError(main_guard_message(starter, fallback))
        how = (
            f"was killed by signal {-code}" if code is not None and code < 0 else f"exited ({code})"
        )
        parts = [f"{who} (pid {self.process.pid}) {how}", doing]
        if code is not None and code > 0:
            parts.append("(what it printed on stderr says why)")
        return error(" ".join(p for p in parts if p))

    def stop(self, kill: bool = True, timeout: float = 5) -> None:
        """End the process (killed when still alive after ``timeout``) and close the pipe."""
        if kill and self.process.is_alive():
            self.process.kill()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._sender.join(5)  # its write ends with the process
        with contextlib.suppress(Exception):
            self.conn.close()
