"""``python benchmarks/accelerator.py``: the benchmark lives in :mod:`jaxfeed.bench.accelerator`
(``jaxfeed bench accelerator`` runs it from an installed package)."""

from jaxfeed.bench.accelerator import main

if __name__ == "__main__":
    main()
