"""``python benchmarks/decode.py``: the benchmark lives in :mod:`jaxfeed.bench.decode`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.decode import main

if __name__ == "__main__":
    main()
