"""``python benchmarks/sharding.py``: the benchmark lives in :mod:`jaxfeed.bench.sharding`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.sharding import main

if __name__ == "__main__":
    main()
