"""``python benchmarks/augment.py``: the benchmark lives in :mod:`jaxfeed.bench.augment`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.augment import main

if __name__ == "__main__":
    main()
