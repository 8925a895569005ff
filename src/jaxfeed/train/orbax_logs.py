r"""What Orbax and TensorStore say, as a checkpoint's errors and logs show it: one line of an error
that can print whole specs (:func:`_first_line`), absl's log quieted around a call, and the
asyncio noise of a failed save's fragments dropped once the save's one-line error is out
(:data:`_REPORTED_FRAGMENTS`), and Orbax's note on waiting for the previous save (:data:`_WAITS`).

>>> _first_line(ValueError("disk full\nand more"))
'ValueError: disk full'
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any


def _first_line(err: BaseException) -> str:
    """A one-line cause for an Orbax/TensorStore error (which can print whole specs)."""
    causes = []
    while err is not None and len(causes) < 4:
        causes.append(err)
        err = err.__cause__ or err.__context__
    for candidate in reversed(causes):
        text = str(candidate).strip()
        if text and "TensorStore(" not in text.split("\n")[0][:300]:
            return f"{type(candidate).__name__}: {text.splitlines()[0][:300]}"
    text = str(causes[0]).strip().split(" See full TensorStore")[0]
    return f"{type(causes[0]).__name__}: {text.splitlines()[0][:300] if text else ''}"


@contextlib.contextmanager
def _quiet_orbax(level_while: int = logging.ERROR) -> Any:
    """The ``absl`` logger (Orbax's) at ``level_while`` for the duration."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(level_while)
    try:
        yield
    finally:
        log.setLevel(level)


class _ReportedFragments(logging.Filter):
    """Drops asyncio's "... exception was never retrieved" for Orbax's write fragments. When a
    save fails (a full disk), each fragment's task fails; one is reported as the
    :class:`CheckpointError`, the others were logged with a traceback when collected, after the
    command's one-line error. Installed on the ``asyncio`` logger by the first failed save."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not ("exception was never retrieved" in text.split("\n")[0] and "orbax" in text)


_REPORTED_FRAGMENTS = _ReportedFragments()


class _WaitsForThePreviousSave(logging.Filter):
    """Drops Orbax's "Waiting for previous save to complete took N seconds. If this number is
    high, consider checkpointing less frequently.", logged (``absl``) by a save that began while
    the previous step was still being written, past a second. The wait is jaxfeed's own: a save
    waits for the one before it so that a failed write is reported by its step; the advice names
    no option a jaxfeed user has (theirs is ``min_save_interval``, in the checkpoints guide). The
    README's tour printed it on a loaded machine. Installed on the ``absl`` logger by the first
    writer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Waiting for previous save to complete")


_WAITS = _WaitsForThePreviousSave()
