"""The matmul rate the budget's expected cost rests on, timed once a day per machine: kept in
``<cache>/machine/matmul_rate.json`` (the cache folder: ``$JAXFEED_CACHE``, else
``~/.cache/jaxfeed``) under a key of the host, its devices, CPU count and JAX version. Timing
it cost about 0.27 s of every run that said an expected cost; the figure is an estimate's
basis (the budget says at most how long), not a measurement of the run.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> cached_rate(lambda: 7e10, folder), cached_rate(lambda: 1.0, folder)  # timed, then kept
(70000000000.0, 70000000000.0)
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from jaxfeed._base.files import atomic_write
from jaxfeed.data.formats.cache import cache_root

MAX_AGE = 86400.0  # seconds a timed rate is kept (a day: the machine and its load may change)
FILE = Path("machine") / "matmul_rate.json"


def machine_key() -> str:
    """What the rate depends on: the host, the default device's kind and count, the CPU count and
    the JAX version (a shared home folder serves several machines)."""
    import jax  # import cost: JAX, already loaded by a run that asks

    devices = jax.devices()
    return (
        f"{platform.node()} {devices[0].platform}:{devices[0].device_kind} x{len(devices)} "
        f"cpus {os.cpu_count()} jax {jax.__version__}"
    )


def cached_rate(measure: Callable[[], float], root: str | os.PathLike | None = None,
                key: str | None = None) -> float:  # fmt: skip
    """``measure()``'s rate for this machine, timed at most once per :data:`MAX_AGE`: read from
    the cache folder (``root``, default :func:`~jaxfeed.data.formats.cache.cache_root`) when a
    fresh one is there, else measured and written. A cache that cannot be read or written is
    measured past (never an error)."""
    key = key or machine_key()
    path = Path(cache_root(root)) / FILE
    try:
        known = json.loads(path.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError, RecursionError):
        known = {}
    entry = known.get(key)
    if isinstance(entry, dict):
        rate, timed = entry.get("rate"), entry.get("timed")
        fresh = isinstance(timed, int | float) and 0 <= time.time() - timed < MAX_AGE
        if fresh and isinstance(rate, int | float) and rate > 0:
            return float(rate)
    rate = float(measure())
    known = {k: v for k, v in known.items() if isinstance(v, dict)}
    known[key] = {"rate": rate, "timed": time.time()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(known, indent=1) + "\n")
    except OSError:
        pass  # a read-only cache: timed again next run
    return rate
