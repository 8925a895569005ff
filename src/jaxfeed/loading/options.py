"""What both loaders share: :class:`LoaderOptions`, their keyword arguments checked once, and
:class:`_BaseLoader`, the small base of :class:`~jaxfeed.DataLoader` and
``StreamingDataLoader``.

``DataLoader(...)`` and ``StreamingDataLoader(...)`` keep their own signatures; each builds a
``LoaderOptions`` from its keyword arguments (which raises on a wrong one) and reads its settings
from it. What needs the dataset (its length, its columns, its media) is checked by the loader.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from jax.sharding import Sharding

from jaxfeed.loading.packing import Packing
from jaxfeed.loading.padding import Padding
from jaxfeed.runtime.devices import batch_divisor


def loader_options(
    padding: Padding | None, bucket_by_length: bool, packing: Packing | None
) -> Padding | None:
    """Check a loader's ``padding``, ``bucket_by_length`` and ``packing`` arguments together;
    the padding to use (bucketing without one pads to the longest row).

    >>> loader_options(None, True, None)
    Padding(lengths=None, multiple_of=None, pad_values=None, truncate=False, columns=None, side=None)
    """
    if padding is not None and not isinstance(padding, Padding):
        raise TypeError(f"padding must be a jaxfeed.Padding, got {type(padding).__name__}")
    if packing is not None and not isinstance(packing, Packing):
        raise TypeError(f"packing must be a jaxfeed.Packing, got {type(packing).__name__}")
    if not isinstance(bucket_by_length, bool):
        raise ValueError(f"bucket_by_length must be True or False, got {bucket_by_length!r}")
    if packing is not None and (padding is not None or bucket_by_length):
        raise ValueError(
            "packing= makes rows of one fixed length: it does not go with padding= or "
            "bucket_by_length=True"
        )
    if bucket_by_length and padding is None:
        return Padding()
    return padding


@dataclass(frozen=True)
class LoaderOptions:
    """A loader's keyword arguments, checked when made (the arguments of
    :class:`jaxfeed.DataLoader`, which documents them, plus a stream's ``shuffle_buffer``).

    ``batch_size``, ``seed``, ``shuffle`` and ``drop_last`` are kept as ``int``/``bool``,
    ``timeout`` as a float, and ``padding`` is the padding to use: ``bucket_by_length=True``
    without one pads to the longest row (``Padding()``). ``num_workers="auto"`` is kept as given
    (the loader counts the cores).

    >>> from jaxfeed import Padding
    >>> LoaderOptions(batch_size=32, bucket_by_length=True).padding == Padding()
    True
    >>> LoaderOptions(batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be a positive int, got 0
    >>> LoaderOptions(batch_size=8, worker_mode="fork")
    Traceback (most recent call last):
    ...
    ValueError: worker_mode must be 'process' or 'thread', got 'fork'
    """

    batch_size: int
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = False
    columns: Sequence[str] | None = None
    row_transform: Callable | None = None
    transform: Callable | None = None
    prefetch: int = 2
    device: Any = None
    sharding: Any = None
    num_workers: int | str = 0
    worker_mode: str = "process"
    timeout: float | None = None
    decode_size: Any = None
    padding: Padding | None = None
    bucket_by_length: bool = False
    packing: Packing | None = None
    shuffle_buffer: int = 10_000

    def __post_init__(self) -> None:
        batch_size, num_workers, timeout = self.batch_size, self.num_workers, self.timeout
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int | np.integer)
            or batch_size <= 0
        ):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(self.prefetch, int) or self.prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, got {self.prefetch!r}")
        if num_workers != "auto" and (
            isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0
        ):
            raise ValueError(f"num_workers must be an int >= 0 or 'auto', got {num_workers!r}")
        if self.worker_mode not in ("process", "thread"):
            raise ValueError(f"worker_mode must be 'process' or 'thread', got {self.worker_mode!r}")
        if self.device is not None and self.sharding is not None:
            raise ValueError("give device= or sharding=, not both")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
        for name, fn in (("row_transform", self.row_transform), ("transform", self.transform)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
        padding = loader_options(self.padding, self.bucket_by_length, self.packing)
        normal = {
            "batch_size": int(batch_size),
            "shuffle": bool(self.shuffle),
            "seed": int(self.seed),
            "drop_last": bool(self.drop_last),
            "timeout": None if timeout is None else float(timeout),
            "padding": padding,
        }
        for name, value in normal.items():
            object.__setattr__(self, name, value)
        if self.sharding is not None:
            self._check_sharding()

    def _check_sharding(self) -> None:
        if not isinstance(self.sharding, Sharding):
            raise ValueError(
                f"sharding must be a jax.sharding.Sharding, got {type(self.sharding).__name__}"
            )
        divisor = batch_divisor(self.sharding)
        if self.batch_size % divisor:
            raise ValueError(
                f"batch_size {self.batch_size} cannot be split over the {divisor} devices of the "
                f"sharding; use a multiple of {divisor}"
            )


class _BaseLoader(abc.ABC):
    """What a map-style and a streaming loader have in common: one epoch per iteration, a
    resumable position, a context that closes them (also done on garbage collection)."""

    _epoch: int

    @abc.abstractmethod
    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    @abc.abstractmethod
    def set_epoch(self, epoch: int) -> None: ...

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    def epoch(self) -> int:
        """The epoch of the latest iteration (before any: the one the first iteration reads)."""
        return self._epoch

    def __del__(self) -> None:
        try:  # noqa: SIM105 - at interpreter shutdown anything may be gone
            self.close()
        except Exception:
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
