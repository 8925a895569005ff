"""``jaxfeed cache list|clean``: the Arrow cache's entries, their sizes and last use; removal.

Imports neither JAX nor pyarrow until the command runs (``jaxfeed --help`` stays fast).
"""

from __future__ import annotations

import argparse
import re
import time

EXAMPLES = """examples:
  jaxfeed cache list
  jaxfeed cache clean --older-than 30d          # entries unused for 30 days
  jaxfeed cache clean --cache-dir /data/cache   # every entry of that cache"""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a number of days, in seconds.

    >>> duration("2h"), duration("1.5")
    (7200.0, 129600.0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30d, 12h or 90m, got {text[:40]!r}"
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "d"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("list", "clean"), help="list the entries, or remove them")
    p.add_argument(
        "--older-than",
        type=duration,
        metavar="AGE",
        help="clean: only entries unused for this long (30d, 12h, 90m; a bare number is days)",
    )
    p.add_argument(
        "--cache-dir", help="the cache folder (default: $JAXFEED_CACHE or ~/.cache/jaxfeed)"
    )


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    from jaxfeed.data.formats import cache  # import cost: pyarrow, only when the command runs

    root = cache.cache_root(args.cache_dir)
    if args.action == "list":
        found = cache.entries(root)
        now = time.time()
        for e in found:
            sources = e["sources"] if isinstance(e["sources"], list) else [e["sources"]]
            shown = ", ".join(str(s) for s in sources[:2]) + (" ..." if len(sources) > 2 else "")
            days = (now - e["last_used"]) / 86400
            print(
                f"{e['path'].name}  {_size(e['bytes']):>10}  used {days:6.1f} d ago  "
                f"{e['num_rows']} rows  {shown}",
                flush=True,
            )
        total = sum(e["bytes"] for e in found)
        print(f"{len(found)} entries, {_size(total)} in {root / 'datasets'}", flush=True)
        return 0
    removed = cache.clean(root, args.older_than)
    print(f"removed {len(removed)} entries from {root / 'datasets'}", flush=True)
    return 0
