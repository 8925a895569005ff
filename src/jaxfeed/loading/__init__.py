"""Batches of ``jax.Array``: the ``DataLoader`` over datasets and streams, its options, epoch
order, padding, bucketing and packing of variable-length rows, augmentation and spectrograms in
workers, and the worker backends (inline, threads, spawned processes with shared memory).
Imports ``_base``, ``runtime`` and ``data``."""
