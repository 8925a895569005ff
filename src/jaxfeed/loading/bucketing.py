"""Bucketing by length: an epoch order whose batches hold rows of similar length.

``DataLoader(..., bucket_by_length=True)`` reads rows in a :class:`LengthGroupedOrder`, the
scheme of `transformers`' ``group_by_length``: the epoch's seeded permutation
(:mod:`jaxfeed.loading.order`) is cut into mega-batches of ``mega_batches`` batches, each sorted by length
(longest first), cut into batches, and the full batches are shuffled (a second seeded
permutation); a last partial batch stays last. Every row comes once per epoch, the order depends
only on ``(seed, epoch)`` and the lengths, so it is the same in every process and after a resume.

On a stream (``DataLoader(iterable_dataset, bucket_by_length=True)``) the same is done by
:func:`bucket_table` on a bounded buffer: the tables read until ``MEGA_BATCHES`` x ``batch_size``
rows are held.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from jaxfeed.data.ragged import arrow_lengths
from jaxfeed.loading.order import Permutation

MEGA_BATCHES = 50  # batches per sorted group, as transformers' LengthGroupedSampler


class LengthGroupedOrder:
    """Rows of one epoch, grouped by length into batches (same interface as ``EpochOrder``).

    >>> import numpy as np
    >>> lengths = np.array([1, 9, 2, 8, 3, 7, 4, 6])
    >>> order = LengthGroupedOrder(lengths, batch_size=2, seed=0, epoch=1, shuffle=True)
    >>> batches = order.rows(0, 8).reshape(4, 2)
    >>> sorted(order.rows(0, 8).tolist()) == list(range(8)), [sorted(lengths[b].tolist()) for b in batches]
    (True, [[1, 2], [6, 7], [8, 9], [3, 4]])
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        seed: int,
        epoch: int,
        shuffle: bool,
        mega_batches: int = MEGA_BATCHES,
    ) -> None:
        n = len(lengths)
        self.n = n
        if shuffle:
            base = Permutation(n, (int(seed), int(epoch)))(np.arange(n, dtype=np.uint64))
        else:
            base = np.arange(n, dtype=np.int64)
        mega = max(1, mega_batches) * batch_size
        parts = []
        for lo in range(0, n, mega):
            block = base[lo : lo + mega]
            parts.append(block[np.argsort(-lengths[block], kind="stable")])
        order = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        full = n // batch_size
        if shuffle and full > 1:
            # the batches' order: a second permutation, keyed apart from the rows' one
            batches = Permutation(full, (int(seed), int(epoch), 1))(
                np.arange(full, dtype=np.uint64)
            )
            head = order[: full * batch_size].reshape(full, batch_size)[batches].reshape(-1)
            order = np.concatenate([head, order[full * batch_size :]])
        self.order = order.astype(np.int64)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows at epoch positions ``start:stop``."""
        return self.order[start:stop]


def bucket_table(table: pa.Table, column: str, batch_size: int, seed: int, epoch: int) -> pa.Table:
    """A stream's buffered rows (``table``) reordered for bucketing: sorted by the length of
    ``column`` (longest first), cut into batches, the full batches shuffled by a generator keyed by
    ``(seed, epoch)`` and the lengths themselves (so a resumed stream redoes the same order with
    no counter to save); rows short of a full batch go last.

    >>> t = pa.table({"ids": [[1], [1, 2, 3], [1, 2], [1, 2, 3, 4]]})
    >>> [len(r) for r in bucket_table(t, "ids", 2, seed=0, epoch=0)["ids"].to_pylist()]
    [2, 1, 4, 3]
    """
    lengths = arrow_lengths(table.column(column))
    order = np.argsort(-lengths, kind="stable")
    full = len(order) // batch_size
    if full > 1:
        digest = zlib.crc32(lengths.astype(np.int64).tobytes())
        rng = np.random.default_rng([int(seed), int(epoch), digest])
        batches = rng.permutation(full)
        head = order[: full * batch_size].reshape(full, batch_size)[batches].reshape(-1)
        order = np.concatenate([head, order[full * batch_size :]])
    return table.take(pa.array(order, type=pa.int64()))
