"""``python benchmarks/epochs.py``: the benchmark lives in :mod:`jaxfeed.bench.epochs`."""

from jaxfeed.bench.epochs import main

if __name__ == "__main__":
    main()
