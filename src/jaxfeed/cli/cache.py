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


def _ago(seconds: float) -> str:
    """How long ago, in the unit that reads best.

    >>> _ago(5), _ago(600), _ago(3 * 3600), _ago(2.5 * 86400)
    ('5 s ago', '10 min ago', '3 h ago', '2.5 d ago')
    """
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.1f} d ago"


def run(args: argparse.Namespace) -> int:
    from jaxfeed.data.formats import cache  # import cost: pyarrow, only when the command runs

    root = cache.cache_root(args.cache_dir)
    if args.action == "list":
        found = cache.entries(root)
        now = time.time()
        for e in found:
            sources = e["sources"] if isinstance(e["sources"], list) else [e["sources"]]
            shown = ", ".join(str(s) for s in sources[:2]) + (" ..." if len(sources) > 2 else "")
            rows = e["num_rows"]
            print(
                f"{e['path'].name}  {_size(e['bytes']):>10}  used {_ago(now - e['last_used']):>8}  "
                f"{rows:,} row{'' if rows == 1 else 's'}  {shown}",
                flush=True,
            )
        total = sum(e["bytes"] for e in found)
        count = f"{len(found)} entr{'y' if len(found) == 1 else 'ies'}"
        print(f"{count}, {_size(total)} in {root / 'datasets'}", flush=True)
        return 0
    removed = cache.clean(root, args.older_than)
    count = f"{len(removed)} entr{'y' if len(removed) == 1 else 'ies'}"
    print(f"removed {count} from {root / 'datasets'}", flush=True)
    return 0
