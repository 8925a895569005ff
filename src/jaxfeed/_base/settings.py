"""Process-wide switches, as `datasets` has them: progress bars and caching.

Progress bars (tqdm, on stderr) are shown by ``map``, ``filter``, ``load_dataset``'s conversion
into the cache, ``save_to_disk`` and ``to_parquet`` / ``to_csv`` / ``to_json`` when the work covers
at least :data:`PROGRESS_MIN_ROWS` rows; :func:`disable_progress_bars` hides them all.

jaxfeed has no fingerprint cache of ``map`` results (``map`` always runs its function), so
:func:`disable_caching` only records the choice, which :func:`is_caching_enabled` reports.

>>> import jaxfeed
>>> jaxfeed.disable_progress_bars()
>>> jaxfeed.is_progress_bar_enabled()
False
>>> jaxfeed.enable_progress_bars()
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

PROGRESS_MIN_ROWS = 10_000  # smaller jobs finish before a bar would tell anything
PROGRESS_ENV = "JAXFEED_DISABLE_PROGRESS_BARS"  # "1": no bars (read at import, set by the calls)
_state = {
    "progress": os.environ.get(PROGRESS_ENV, "").lower() not in ("1", "true", "yes"),
    "caching": True,
}


def disable_progress_bars() -> None:
    """Hide jaxfeed's progress bars (``datasets.disable_progress_bars``); worker processes
    started later (``num_proc``) inherit the choice through ``JAXFEED_DISABLE_PROGRESS_BARS``.

    >>> import jaxfeed
    >>> jaxfeed.disable_progress_bars()
    >>> jaxfeed.are_progress_bars_disabled(), jaxfeed.is_progress_bar_enabled()
    (True, False)
    >>> jaxfeed.enable_progress_bars()
    >>> jaxfeed.is_progress_bar_enabled()
    True
    """
    _state["progress"] = False
    os.environ[PROGRESS_ENV] = "1"


def enable_progress_bars() -> None:
    """Show jaxfeed's progress bars on long jobs (the default).

    >>> import jaxfeed
    >>> jaxfeed.enable_progress_bars()
    >>> jaxfeed.is_progress_bar_enabled()
    True
    """
    _state["progress"] = True
    os.environ[PROGRESS_ENV] = "0"


def is_progress_bar_enabled() -> bool:
    """Whether progress bars are shown.

    >>> import jaxfeed
    >>> isinstance(jaxfeed.is_progress_bar_enabled(), bool)
    True
    """
    return bool(_state["progress"])


def are_progress_bars_disabled() -> bool:
    """Whether progress bars are hidden (``datasets.are_progress_bars_disabled``).

    >>> import jaxfeed
    >>> jaxfeed.are_progress_bars_disabled() == (not jaxfeed.is_progress_bar_enabled())
    True
    """
    return not _state["progress"]


disable_progress_bar = disable_progress_bars  # the singular names `datasets` also exports
enable_progress_bar = enable_progress_bars


def disable_caching() -> None:
    """Accepted as in `datasets`; jaxfeed keeps no cache of ``map`` results to disable.

    >>> import jaxfeed
    >>> jaxfeed.disable_caching()
    >>> jaxfeed.is_caching_enabled()
    False
    >>> jaxfeed.enable_caching()
    >>> jaxfeed.is_caching_enabled()
    True
    """
    _state["caching"] = False


def enable_caching() -> None:
    """Undo :func:`disable_caching`.

    >>> import jaxfeed
    >>> jaxfeed.disable_caching()
    >>> jaxfeed.is_caching_enabled()
    False
    >>> jaxfeed.enable_caching()
    >>> jaxfeed.is_caching_enabled()
    True
    """
    _state["caching"] = True


def is_caching_enabled() -> bool:
    """Whether caching is on (``disable_caching`` turns it off).

    >>> import jaxfeed
    >>> jaxfeed.disable_caching()
    >>> jaxfeed.is_caching_enabled()
    False
    >>> jaxfeed.enable_caching()
    >>> jaxfeed.is_caching_enabled()
    True
    """
    return bool(_state["caching"])


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


class _CountingBar:
    """A bar for work of unknown size: it appears once ``PROGRESS_MIN_ROWS`` rows are done."""

    def __init__(self, desc: str, unit: str) -> None:
        self.desc, self.unit, self.done = desc, unit, 0
        self.bar: Any = None

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done >= PROGRESS_MIN_ROWS:
            self.bar = tqdm(initial=self.done, desc=self.desc, unit=self.unit, dynamic_ncols=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def progress(total: int | None, desc: str, unit: str = " examples") -> Iterator[Any]:
    """A tqdm bar of ``total`` rows (None: unknown, shown once the work passes
    ``PROGRESS_MIN_ROWS``), or a silent stand-in when bars are off or the job is small.

    >>> with progress(3, "Map") as bar:
    ...     bar.update(3)
    """
    if not _state["progress"] or (total is not None and total < PROGRESS_MIN_ROWS):
        yield _NoBar()
        return
    if total is None:
        counting = _CountingBar(desc, unit)
        try:
            yield counting
        finally:
            counting.close()
        return
    with tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True) as bar:
        yield bar
