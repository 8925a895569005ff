"""``python benchmarks/formatting.py``: the benchmark now lives in :mod:`jaxfeed.bench.formatting`
(``jaxfeed bench formatting`` runs it from an installed package)."""

from jaxfeed.bench.formatting import main

if __name__ == "__main__":
    main()
