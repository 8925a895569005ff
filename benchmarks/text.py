"""``python benchmarks/text.py [--rows N]``: the benchmark lives in :mod:`jaxfeed.bench.text`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.text import main

if __name__ == "__main__":
    main()
