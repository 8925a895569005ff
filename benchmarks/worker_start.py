"""``python benchmarks/worker_start.py``: the benchmark lives in :mod:`jaxfeed.bench.worker_start`."""

from jaxfeed.bench.worker_start import main

if __name__ == "__main__":
    main()
