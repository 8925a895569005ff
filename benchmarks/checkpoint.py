"""``python benchmarks/checkpoint.py``: the benchmark lives in :mod:`jaxfeed.bench.checkpoint`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.checkpoint import main

if __name__ == "__main__":
    main()
