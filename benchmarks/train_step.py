"""``python benchmarks/train_step.py``: the benchmark lives in :mod:`jaxfeed.bench.train_step`
(``jaxfeed bench`` runs it from an installed package)."""

from jaxfeed.bench.train_step import main

if __name__ == "__main__":
    main()
