"""Bucketing by length: an epoch order whose batches hold rows of similar length.

``DataLoader(..., bucket_by_length=True)`` reads rows in a :class:`LengthGroupedOrder`, the
scheme of `transformers`' ``group_by_length`` (``get_length_grouped_indices``): the epoch's seeded
permutation (:mod:`jaxfeed.loading.order`) is cut into mega-batches of
``min(n // (4 * batch_size), 50)`` batches (at least 1: :func:`mega_batch_count`, so even a small
dataset has about four mega-batches and a new set of batches every epoch), each sorted by length
(longest first) and cut into batches; the full batches are shuffled (a second seeded permutation)
and the batch holding the epoch's longest row goes first, so an out-of-memory error shows at the
first step, not hours in. A last partial batch stays last (when the longest row is in it, it
trades places with the first row of the first batch, as `transformers` swaps it to position 0).
Every row comes once per epoch; the order depends only on ``(seed, epoch)`` and the lengths, so
it is the same in every process and after a resume.

On a stream (``DataLoader(iterable_dataset, bucket_by_length=True)``) the same is done by
:func:`bucket_table` on a bounded buffer: the tables read until ``MEGA_BATCHES`` x ``batch_size``
rows are held (a stream's length is unknown, so its mega-batch is always 50 batches); each
buffer's batch holding its longest row comes first.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from jaxfeed.data.ragged import arrow_lengths
from jaxfeed.loading.order import Permutation

MEGA_BATCHES = 50  # the most batches per sorted group, as transformers' LengthGroupedSampler


def mega_batch_count(n: int, batch_size: int) -> int:
    """Batches per mega-batch for ``n`` rows: ``min(n // (4 * batch_size), 50)``, at least 1, as
    `transformers`' ``get_length_grouped_indices``.

    >>> mega_batch_count(100_000, 32), mega_batch_count(1000, 32), mega_batch_count(10, 32)
    (50, 7, 1)
    """
    return max(1, min(int(n) // (4 * int(batch_size)), MEGA_BATCHES))


def longest_first(order: np.ndarray, lengths: np.ndarray, batch_size: int) -> np.ndarray:
    """``order`` with the batch that holds the longest row moved to the front (the other batches
    keep their order); when that row is in a last partial batch, it trades places with the first
    row instead (``transformers`` swaps the longest row to position 0).

    >>> longest_first(np.array([0, 1, 2, 3, 4]), np.array([1, 1, 5, 2, 9]), 2).tolist()
    [4, 1, 2, 3, 0]
    >>> longest_first(np.array([0, 1, 2, 3]), np.array([1, 1, 5, 2]), 2).tolist()
    [2, 3, 0, 1]
    """
    if len(order) == 0:
        return order
    at = int(np.argmax(lengths[order]))
    if lengths[order[at]] <= lengths[order[0]]:
        return order
    full = len(order) // batch_size
    batch = at // batch_size
    out = order.copy()
    if batch >= full:
        out[0], out[at] = order[at], order[0]
        return out
    lo = batch * batch_size
    out[: lo + batch_size] = np.concatenate([order[lo : lo + batch_size], order[:lo]])
    return out


class LengthGroupedOrder:
    """Rows of one epoch, grouped by length into batches (same interface as ``EpochOrder``).

    >>> import numpy as np
    >>> lengths = np.array([1, 9, 2, 8, 3, 7, 4, 6])
    >>> order = LengthGroupedOrder(lengths, batch_size=2, seed=0, epoch=1, shuffle=True, mega_batches=4)
    >>> batches = order.rows(0, 8).reshape(4, 2)
    >>> sorted(order.rows(0, 8).tolist()) == list(range(8)), [sorted(lengths[b].tolist()) for b in batches]
    (True, [[8, 9], [1, 2], [6, 7], [3, 4]])
    >>> LengthGroupedOrder(lengths, 2, seed=0, epoch=1, shuffle=True).mega_batches  # 8 // (4 * 2)
    1
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        seed: int,
        epoch: int,
        shuffle: bool,
        mega_batches: int | None = None,
    ) -> None:
        n = len(lengths)
        self.n = n
        if shuffle:
            base = Permutation(n, (int(seed), int(epoch)))(np.arange(n, dtype=np.uint64))
        else:
            base = np.arange(n, dtype=np.int64)
        if mega_batches is None:
            mega_batches = mega_batch_count(n, batch_size)
        self.mega_batches = max(1, int(mega_batches))
        mega = self.mega_batches * batch_size
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
        self.order = longest_first(order.astype(np.int64), lengths, batch_size)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows at epoch positions ``start:stop``."""
        return self.order[start:stop]


def bucket_table(table: pa.Table, column: str, batch_size: int, seed: int, epoch: int) -> pa.Table:
    """A stream's buffered rows (``table``) reordered for bucketing: sorted by the length of
    ``column`` (longest first), cut into batches, the full batches shuffled by a generator keyed by
    ``(seed, epoch)`` and the lengths themselves (so a resumed stream redoes the same order with
    no counter to save), the batch holding the longest row first; rows short of a full batch go
    last.

    >>> t = pa.table({"ids": [[1], [1, 2, 3], [1, 2], [1, 2, 3, 4], [1, 2], [1]]})
    >>> [len(r) for r in bucket_table(t, "ids", 2, seed=0, epoch=0)["ids"].to_pylist()]
    [4, 3, 1, 1, 2, 2]
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
    order = longest_first(order, lengths, batch_size)
    return table.take(pa.array(order, type=pa.int64()))
