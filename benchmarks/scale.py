"""``python benchmarks/scale.py``: the benchmark lives in :mod:`jaxfeed.bench.scale`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.scale import main

if __name__ == "__main__":
    main()
