"""jaxfeed's loggers, with the verbosity helpers of ``datasets.logging``.

Every jaxfeed logger is a child of the ``"jaxfeed"`` logger, whose level these functions set
(``WARNING`` unless ``JAXFEED_VERBOSITY`` names another level).

>>> import jaxfeed
>>> jaxfeed.logging.set_verbosity_error()
>>> jaxfeed.logging.get_verbosity() == jaxfeed.logging.ERROR
True
>>> jaxfeed.logging.set_verbosity_warning()
"""

from __future__ import annotations

import logging
import os

from jaxfeed._base.settings import disable_progress_bars as disable_progress_bar
from jaxfeed._base.settings import enable_progress_bars as enable_progress_bar
from jaxfeed._base.settings import is_progress_bar_enabled

CRITICAL = logging.CRITICAL
FATAL = logging.FATAL
ERROR = logging.ERROR
WARNING = logging.WARNING
WARN = logging.WARN
INFO = logging.INFO
DEBUG = logging.DEBUG
NOTSET = logging.NOTSET

log_levels = {
    "debug": DEBUG,
    "info": INFO,
    "warning": WARNING,
    "error": ERROR,
    "critical": CRITICAL,
}
_ROOT = "jaxfeed"


def _default_level() -> int:
    name = os.environ.get("JAXFEED_VERBOSITY", "")
    if name and name.lower() not in log_levels:
        raise ValueError(
            f"JAXFEED_VERBOSITY={name!r} is not a level; use one of {', '.join(log_levels)}"
        )
    return log_levels.get(name.lower(), WARNING)


_root = logging.getLogger(_ROOT)
if _root.level == NOTSET:
    _root.setLevel(_default_level())


def get_logger(name: str | None = None) -> logging.Logger:
    """The logger called ``name`` (default: jaxfeed's own)."""
    return logging.getLogger(_ROOT if name is None else name)


def get_verbosity() -> int:
    """The level of jaxfeed's logger (``logging.WARNING`` is 30)."""
    return _root.getEffectiveLevel()


def set_verbosity(verbosity: int) -> None:
    """Set the level of jaxfeed's logger (``jaxfeed.logging.INFO``, ...)."""
    _root.setLevel(verbosity)


def set_verbosity_info() -> None:
    set_verbosity(INFO)


def set_verbosity_warning() -> None:
    set_verbosity(WARNING)


def set_verbosity_debug() -> None:
    set_verbosity(DEBUG)


def set_verbosity_error() -> None:
    set_verbosity(ERROR)


def disable_propagation() -> None:
    """Stop jaxfeed's records from reaching the root logger."""
    _root.propagate = False


def enable_propagation() -> None:
    """Let jaxfeed's records reach the root logger (the default)."""
    _root.propagate = True


__all__ = [
    "CRITICAL",
    "DEBUG",
    "ERROR",
    "FATAL",
    "INFO",
    "NOTSET",
    "WARN",
    "WARNING",
    "disable_progress_bar",
    "disable_propagation",
    "enable_progress_bar",
    "enable_propagation",
    "get_logger",
    "get_verbosity",
    "is_progress_bar_enabled",
    "log_levels",
    "set_verbosity",
    "set_verbosity_debug",
    "set_verbosity_error",
    "set_verbosity_info",
    "set_verbosity_warning",
]
