"""Row order per epoch: a seeded pseudo-random permutation of ``[0, n)`` in O(1) memory.

``Permutation(n, key)`` maps a position to a row with a keyed bijection on ``k``-bit integers
(``2**k >= n``): rounds of xor-with-key, multiply-by-odd and xorshift, each invertible modulo
``2**k``, in the spirit of Kensler's hashed permutations. Values that land outside ``[0, n)`` are
walked through the bijection again ("cycle walking"), which keeps it a permutation of ``[0, n)``;
since ``2**k < 2n`` this takes under two steps on average. Evaluation is vectorised over any
block of positions, so no ``n``-sized array is ever built.
"""

from __future__ import annotations

import numpy as np

ROUNDS = 6


class Permutation:
    """A bijection of ``[0, n)`` chosen by ``key`` (any sequence of ints, e.g. ``(seed, epoch)``).

    >>> from jaxfeed.loading.order import Permutation
    >>> p = Permutation(10, (0, 1))
    >>> sorted(p(np.arange(10)).tolist()) == list(range(10))
    True
    """

    def __init__(self, n: int, key: tuple[int, ...] | int) -> None:
        if n < 0:
            raise ValueError(f"a permutation needs n >= 0, got {n}")
        self.n = int(n)
        self.bits = max(1, int(np.ceil(np.log2(max(n, 2)))))
        self.mask = np.uint64((1 << self.bits) - 1)
        words = np.random.SeedSequence(key).generate_state(3 * ROUNDS, dtype=np.uint64)
        self.xors = words[:ROUNDS] & self.mask
        self.mults = (words[ROUNDS : 2 * ROUNDS] | np.uint64(1)) & self.mask  # odd: invertible
        self.adds = words[2 * ROUNDS :] & self.mask
        self.shifts = [max(1, self.bits * (r + 1) // (ROUNDS + 1)) for r in range(ROUNDS)]

    def _mix(self, x: np.ndarray) -> np.ndarray:
        m = self.mask
        for r in range(ROUNDS):
            x ^= self.xors[r]
            x *= self.mults[r]
            x &= m
            x ^= x >> np.uint64(self.shifts[r])
            x += self.adds[r]
            x &= m
        return x

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """Rows at ``positions`` (ints in ``[0, n)``), as int64."""
        x = np.asarray(positions, dtype=np.uint64).copy()
        with np.errstate(over="ignore"):
            x = self._mix(x)
            outside = np.nonzero(x >= self.n)[0]
            while outside.size:
                x[outside] = self._mix(x[outside])
                outside = outside[x[outside] >= self.n]
        return x.astype(np.int64)


class EpochOrder:
    """Rows of one epoch in order, computed block by block (identity when not shuffled)."""

    BLOCK = 1 << 16

    def __init__(self, n: int, seed: int, epoch: int, shuffle: bool) -> None:
        self.n = n
        self.permutation = Permutation(n, (int(seed), int(epoch))) if shuffle else None
        self._block_start = -1
        self._block: np.ndarray | None = None

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows at epoch positions ``start:stop``."""
        if self.permutation is None:
            return np.arange(start, stop, dtype=np.int64)
        block = start // self.BLOCK
        if stop <= (block + 1) * self.BLOCK:
            if block != self._block_start:
                lo = block * self.BLOCK
                self._block = self.permutation(
                    np.arange(lo, min(lo + self.BLOCK, self.n), dtype=np.uint64)
                )
                self._block_start = block
            offset = block * self.BLOCK
            return self._block[start - offset : stop - offset]
        return self.permutation(np.arange(start, stop, dtype=np.uint64))
