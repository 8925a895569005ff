"""Readers and writers below the ``Dataset`` facade: CSV/JSON/Parquet (``tabular``), the
``save_to_disk`` layout (``saved``), the checked out-of-core cache (``cache``), record batches
(``batches``) and bounded validation (``validate``). They return Arrow tables, features and cache
files, and never build a ``Dataset``: the facade wraps what they return."""
