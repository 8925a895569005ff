"""Preemption: SIGTERM/SIGINT during ``fit`` end the run cleanly at a step boundary.

Clusters announce preemption with SIGTERM (SLURM before ``--signal``/time limits, Kubernetes
before killing a pod, cloud TPU/GPU maintenance), a person with Ctrl-C (SIGINT). While ``fit``
runs, :class:`SignalWatch` turns those signals into a request; the trainer finishes the step in
flight, saves a checkpoint (model, optimizer, loader position, RNG state, the epoch's partial
metrics) when it has a ``checkpoint_dir``, prints one line saying how to resume, and raises
:class:`Preempted`, a ``SystemExit`` whose code is ``128 + signal`` (143 for SIGTERM, 130 for
SIGINT), so a script exits non-zero without a traceback. A second Ctrl-C interrupts at once.

In a multi-process run the processes agree on the step to stop at: every ``sync_every`` steps
(and at each epoch end) they exchange their flags with one small all-gather, and stop together
at the first such step where any of them was signalled. A single process checks its flag after
every step at no cost.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

SYNC_EVERY = 8  # steps between flag exchanges in multi-process runs


class Preempted(SystemExit):
    """``fit`` stopped on a signal; ``code`` is 128 + the signal number.

    Attributes: ``signal`` (its name), ``step``, ``epoch`` (completed epochs) and ``checkpoint``
    (the directory holding the saved step, or None when the run had no ``checkpoint_dir``).

    >>> import signal
    >>> from jaxfeed.train import Preempted
    >>> stop = Preempted("stopped", signum=signal.SIGTERM, step=50, epoch=0, checkpoint=None)
    >>> stop.code, stop.signal, isinstance(stop, SystemExit)
    (143, 'SIGTERM', True)
    """

    def __init__(
        self, message: str, *, signum: int, step: int, epoch: int, checkpoint: Any
    ) -> None:
        super().__init__(128 + signum)
        self.message = message
        self.signal = signal.Signals(signum).name
        self.step, self.epoch, self.checkpoint = step, epoch, checkpoint

    def __str__(self) -> str:
        return self.message


class SignalWatch:
    """While entered (from the main thread), SIGTERM and SIGINT set :attr:`signum` instead of
    ending the process; the previous handlers come back on exit. Elsewhere it is inert.

    A signal the process already ignores stays ignored: one started with SIGINT ignored (``cmd &``
    in a script, ``nohup``, a CI runner) is not meant to be stopped by it, the convention shells
    follow and Python's own Ctrl-C handler too (it is installed only when SIGINT is not ignored).

    >>> import os, signal
    >>> with SignalWatch() as watch:
    ...     os.kill(os.getpid(), signal.SIGTERM)
    ...     watch.should_stop(step=1)
    True
    """

    def __init__(
        self,
        signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT),
        sync_every: int = SYNC_EVERY,
    ) -> None:
        self.signals = signals
        self.sync_every = sync_every
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            # a second Ctrl-C: stop now, without saving, the way the caller's handler does it
            previous = self._previous.get(signal.SIGINT)
            if callable(previous):
                previous(signum, frame)
                return
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> SignalWatch:
        self.signum = None
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def should_stop(self, step: int, *, boundary: bool = False) -> bool:
        """Whether to stop after ``step``: this process's flag alone in a single-process run; in a
        multi-process run every process's flag, exchanged every ``sync_every`` steps and at
        ``boundary`` (an epoch end), so that all of them return True at the same step."""
        if jax.process_count() == 1:
            return self.signum is not None
        if not boundary and step % self.sync_every:
            return False

        flags = multihost_utils.process_allgather(np.int32(self.signum or 0))
        signalled = [int(f) for f in np.asarray(flags).reshape(-1) if int(f)]
        if signalled and self.signum is None:
            self.signum = signalled[0]  # stop as the signalled process does
        return bool(signalled)
