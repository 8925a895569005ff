"""``python benchmarks/loader.py``: the benchmark lives in :mod:`jaxfeed.bench.loader`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.loader import main

if __name__ == "__main__":
    main()
