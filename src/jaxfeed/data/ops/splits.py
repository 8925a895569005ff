"""``train_test_split``: the sizes, checks and rows of `datasets`' (scikit-learn's) split."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import ClassLabel
from jaxfeed.data.ops.rows import _seed, select

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class


def train_test_split(
    ds: Dataset,
    test_size: float | int | None = None,
    train_size: float | int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    stratify_by_column: str | None = None,
    generator: np.random.Generator | None = None,
) -> dict[str, Dataset]:
    """Split as `datasets` splits: same sizes, same checks, same rows for the same seed;
    ``{"train", "test"}`` (``Dataset.train_test_split`` makes it a ``DatasetDict``)."""
    n = ds.num_rows
    if n == 0:
        return {"train": ds, "test": ds}
    n_test, n_train = _split_sizes(n, test_size, train_size)
    if generator is None and shuffle:
        generator = np.random.default_rng(_seed(seed))
    if not shuffle:
        if stratify_by_column is not None:
            raise ValueError("Stratified train/test split is not implemented for `shuffle=False`")
        train_idx, test_idx = np.arange(n_train), np.arange(n_train, n_train + n_test)
    elif stratify_by_column is not None:
        if stratify_by_column not in ds.features:
            raise ValueError(f"Key {stratify_by_column} not found in {list(ds.features)}")
        if not isinstance(ds.features[stratify_by_column], ClassLabel):
            raise ValueError(
                f"Stratifying by column is only supported for ClassLabel column, and column "
                f"{stratify_by_column} is {type(ds.features[stratify_by_column]).__name__}."
            )
        labels = np.asarray(ds._internal.arrow(columns=[stratify_by_column]).column(0))
        train_idx, test_idx = _stratified(labels, n_train, n_test, generator, stratify_by_column)
    else:
        order = generator.permutation(n)
        test_idx, train_idx = order[:n_test], order[n_test : n_test + n_train]
    return {
        "train": select(ds, np.asarray(train_idx, dtype=np.int64)),
        "test": select(ds, np.asarray(test_idx, dtype=np.int64)),
    }


def _split_sizes(
    n: int, test_size: float | int | None, train_size: float | int | None
) -> tuple[int, int]:
    """Row counts of the test and train splits, with `datasets`' (scikit-learn's) checks."""
    if test_size is None and train_size is None:
        test_size = 0.25
    for name, value in (("test_size", test_size), ("train_size", train_size)):
        if value is not None and not isinstance(value, int | float):
            raise ValueError(f"Invalid value for {name}: {value} of type {type(value)}")
        if (isinstance(value, int) and not 0 < value < n) or (
            isinstance(value, float) and not 0 < value < 1
        ):
            raise ValueError(
                f"{name}={value} should be either positive and smaller than the number of "
                f"samples {n} or a float in the (0, 1) range"
            )
    if (
        isinstance(train_size, float)
        and isinstance(test_size, float)
        and train_size + test_size > 1
    ):
        raise ValueError(
            f"The sum of test_size and train_size = {train_size + test_size}, should be in the "
            "(0, 1) range. Reduce test_size and/or train_size."
        )
    n_test = math.ceil(test_size * n) if isinstance(test_size, float) else test_size
    n_train = math.floor(train_size * n) if isinstance(train_size, float) else train_size
    if train_size is None:
        n_train = n - n_test
    elif test_size is None:
        n_test = n - n_train
    if n_train + n_test > n:
        raise ValueError(
            f"The sum of train_size and test_size = {n_train + n_test}, should be smaller than "
            f"the number of samples {n}. Reduce test_size and/or train_size."
        )
    if n_train == 0:
        raise ValueError(
            f"With n_samples={n}, test_size={test_size} and train_size={train_size}, the resulting "
            "train set will be empty. Adjust any of the aforementioned parameters."
        )
    return int(n_test), int(n_train)


def _approximate_mode(counts: np.ndarray, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Per-class counts of a draw of ``n_draws`` (scikit-learn's rule, as `datasets` uses it)."""
    continuous = n_draws * counts / counts.sum()
    floored = np.floor(continuous)
    need = int(n_draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add = min(len(inds), need)
            inds = rng.choice(inds, size=add, replace=False)
            floored[inds] += 1
            need -= add
            if need == 0:
                break
    return floored.astype(np.int64)


def _stratified(
    labels: np.ndarray, n_train: int, n_test: int, rng: np.random.Generator, column: str
) -> tuple[np.ndarray, np.ndarray]:
    classes, y = np.unique(labels, return_inverse=True)
    counts = np.bincount(y)
    if counts.min() < 2:
        raise ValueError(
            f"The least populated class in {column} column has only 1 member, which is too few. "
            "The minimum number of groups for any class cannot be less than 2."
        )
    if n_train < len(classes):
        raise ValueError(
            f"The train_size = {n_train} should be greater or equal to the number of classes = "
            f"{len(classes)}"
        )
    if n_test < len(classes):
        raise ValueError(
            f"The test_size = {n_test} should be greater or equal to the number of classes = "
            f"{len(classes)}"
        )
    members = np.split(np.argsort(y, kind="mergesort"), np.cumsum(counts)[:-1])
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i in range(len(classes)):
        picked = members[i].take(rng.permutation(counts[i]), mode="clip")
        train.extend(picked[: n_i[i]])
        test.extend(picked[n_i[i] : n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)
