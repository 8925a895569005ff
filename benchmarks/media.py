"""``python benchmarks/media.py``: the benchmark now lives in :mod:`jaxfeed.bench.media`
(``jaxfeed bench media`` runs it from an installed package)."""

from jaxfeed.bench.media import main

if __name__ == "__main__":
    main()
