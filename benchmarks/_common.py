"""The benchmarks' shared helpers now live in :mod:`jaxfeed.bench._common` (kept importable here
for the scripts of this folder)."""

from jaxfeed.bench._common import RESULTS, machine, print_table, rows_per_second, save_json

__all__ = ["RESULTS", "machine", "print_table", "rows_per_second", "save_json"]
