"""jaxfeed's benchmarks, runnable from an installed package: ``jaxfeed bench [NAME] [--quick]``.

Each benchmark prints a table of rows/s (or seconds) with ratios to the peers a user would pick
instead (Hugging Face ``datasets``, PyTorch, Grain), measured in the same run. The peers are the
``bench`` extra: ``pip install 'jaxfeed[bench]'``; without them their rows are skipped.
"""
