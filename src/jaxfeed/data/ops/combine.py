"""Several datasets into one (``concatenate_datasets``, ``interleave_datasets``), and a dataset from
a generator (``from_generator``)."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features, Value
from jaxfeed.data.features.struct import FeatureLike
from jaxfeed.data.ops.rows import select

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class


def _check_map_style(dsets: Sequence[Any], what: str) -> None:
    """Refuse streams: jaxfeed joins and interleaves datasets with rows, not IterableDatasets."""
    for i, d in enumerate(dsets):
        if not isinstance(d, DatasetCore):
            raise TypeError(
                f"{what}: item {i} is a {type(d).__name__}; jaxfeed joins Datasets (an "
                "IterableDataset is not supported here)"
            )


def concatenate_datasets(dsets: Sequence[Dataset], axis: int = 0) -> Dataset:
    """Join datasets row-wise (``axis=0``, same features) or column-wise (``axis=1``, same length).

    >>> from jaxfeed import Dataset, concatenate_datasets
    >>> a, b = Dataset.from_dict({"x": [1, 2]}), Dataset.from_dict({"x": [3]})
    >>> concatenate_datasets([a, b])["x"][:]
    [1, 2, 3]
    """
    dsets = list(dsets)
    _check_map_style(dsets, "concatenate_datasets")
    if not dsets:
        raise ValueError("concatenate_datasets needs at least one dataset")
    first = dsets[0]
    if axis == 0:
        # As `datasets`: columns are the union in order of appearance; a column one dataset
        # lacks is filled with nulls; features of a shared column must agree.
        features: dict[str, FeatureLike] = {}
        for i, d in enumerate(dsets):
            for name, feature in d.features.items():
                known = features.get(name)
                if known is None or known == Value("null"):
                    features[name] = feature
                elif feature != known and feature != Value("null"):
                    raise ValueError(
                        f"concatenate_datasets: dataset {i} differs from an earlier dataset in "
                        f"column {name!r}: {feature!r} vs {known!r}"
                    )
        merged = Features(features)
        schema = merged.arrow_schema
        tables = []
        for d in dsets:
            part = d._internal.arrow()
            columns = [
                part.column(c)
                if c in part.column_names
                else pa.nulls(len(part), schema.field(c).type)
                for c in merged
            ]
            tables.append(pa.Table.from_arrays(columns, schema=schema) if columns else part)
        out = first._internal.derive(pa.concat_tables(tables), features=merged, indices=None)
        if any(d.format != first.format for d in dsets):
            out.reset_format()  # disparate formats: reset, as `datasets` does
        return out
    if axis == 1:
        names = [c for d in dsets for c in d.column_names]
        if len(set(names)) != len(names):
            twice = sorted({c for c in names if names.count(c) > 1})
            raise ValueError(
                f"The table can't have duplicated columns but columns {twice} are duplicated. "
                f"(concatenate_datasets(axis=1) of columns {names})"
            )
        if len({d.num_rows for d in dsets}) > 1:
            raise ValueError(
                f"concatenate_datasets(axis=1): row counts differ: {[d.num_rows for d in dsets]}"
            )
        features = Features({k: v for d in dsets for k, v in d.features.items()})
        columns = [d._internal.arrow().column(c) for d in dsets for c in d.column_names]
        return first._internal.derive(
            pa.Table.from_arrays(columns, schema=features.arrow_schema), features=features
        )
    raise ValueError(f"axis must be 0 or 1, got {axis!r}")


def interleave_datasets(
    dsets: Sequence[Dataset],
    probabilities: Sequence[float] | None = None,
    seed: int | None = None,
    stopping_strategy: str = "first_exhausted",
) -> Dataset:
    """Alternate rows of several datasets (or draw them with ``probabilities``), picking exactly
    the rows `datasets` picks for the same ``seed``.

    >>> from jaxfeed import Dataset, interleave_datasets
    >>> a, b = Dataset.from_dict({"x": [0, 1, 2]}), Dataset.from_dict({"x": [10, 11]})
    >>> interleave_datasets([a, b])["x"]
    Column([0, 10, 1, 11])
    """
    if not dsets:
        raise ValueError("Unable to interleave an empty list of datasets.")
    _check_map_style(dsets, "interleave_datasets")
    strategies = ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")
    if stopping_strategy not in strategies:
        raise ValueError(
            f"{stopping_strategy} is not supported. Please enter a valid stopping_strategy."
        )
    joined = concatenate_datasets(dsets)
    lengths = [len(d) for d in dsets]
    offsets = np.cumsum([0, *lengths[:-1]])
    oversampling = stopping_strategy == "all_exhausted"
    if probabilities is None and stopping_strategy == "all_exhausted_without_replacement":
        chunks = [0, *sorted(set(lengths))]
        parts = []
        for start, end in itertools.pairwise(chunks):
            parts.append((offsets.reshape(1, -1) + np.arange(start, end).reshape(-1, 1)).ravel())
            gone = [i for i in range(len(lengths)) if lengths[i] == end]
            lengths = np.delete(lengths, gone).tolist()
            offsets = np.delete(offsets, gone)
        indices = np.concatenate(parts)
    elif probabilities is None and not oversampling:
        indices = (offsets.reshape(1, -1) + np.arange(min(lengths)).reshape(-1, 1)).ravel()
    elif probabilities is None:
        grid = np.mod(np.arange(max(lengths)).reshape(-1, 1), np.array(lengths).reshape(1, -1))
        indices = (grid + offsets).ravel()
    elif stopping_strategy in ("first_exhausted", "all_exhausted"):
        indices = _draw_with_replacement(lengths, offsets, probabilities, seed, oversampling)
    else:
        exhausted = np.full(len(lengths), False)
        current = [0] * len(lengths)
        picked: list[int] = []
        rng = np.random.default_rng(seed)
        while not exhausted.all():
            for source in rng.choice(len(lengths), size=1000, p=probabilities):
                if exhausted.all():
                    break
                source = int(source)
                if not exhausted[source]:
                    picked.append(current[source] + offsets[source])
                    current[source] += 1
                if current[source] >= lengths[source]:
                    exhausted[source] = True
        indices = np.asarray(picked, dtype=np.int64)
    return select(joined, np.asarray(indices, dtype=np.int64))


def _draw_with_replacement(
    lengths: list[int],
    offsets: np.ndarray,
    probabilities: Sequence[float],
    seed: int | None,
    oversampling: bool,
) -> np.ndarray:
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    drawable = np.asarray(probabilities, dtype=np.float64) > 0
    empty = [i for i in range(n) if lengths[i] == 0 and drawable[i]]
    if empty:
        raise ValueError(
            "interleave_datasets with probabilities requires every dataset that can be sampled "
            f"(probability > 0) to be non-empty; datasets at indices {empty} are empty."
        )
    if oversampling and not drawable.all():
        unreachable = [i for i in range(n) if not drawable[i]]
        raise ValueError(
            'interleave_datasets with stopping_strategy="all_exhausted" cannot exhaust a dataset '
            f"that is never sampled; datasets at indices {unreachable} have probability 0."
        )
    rng = np.random.default_rng(seed)
    blocks = []
    counts = np.zeros(n, dtype=np.int64)
    reached = np.zeros(n, dtype=bool)
    while not (reached[drawable].all() if oversampling else reached[drawable].any()):
        block = rng.choice(n, size=1000, p=probabilities)
        blocks.append(block)
        counts += np.bincount(block, minlength=n)
        reached = counts >= lengths_arr
    draws = np.concatenate(blocks)
    exhaust = np.full(n, -1, dtype=np.int64)
    for s in range(n):
        if drawable[s]:
            occ = np.flatnonzero(draws == s)
            if len(occ) >= lengths[s]:
                exhaust[s] = occ[lengths[s] - 1]
    valid = exhaust[exhaust >= 0]
    used = draws[: (valid.max() if oversampling else valid.min()) + 1]
    out = np.empty(len(used), dtype=np.int64)
    for s in range(n):
        if drawable[s]:
            pos = np.flatnonzero(used == s)
            out[pos] = (np.arange(len(pos)) % lengths[s]) + offsets[s]
    return out


def from_generator(
    cls: type[Dataset],
    generator: Callable[..., Iterable[Mapping[str, Any]]],
    features: Features | None = None,
    gen_kwargs: dict | None = None,
    chunk_rows: int = 1000,
    directory: str | os.PathLike | None = None,
) -> Dataset:
    """A ``cls`` dataset of the rows ``generator`` yields, read ``chunk_rows`` at a time.

    With ``directory``, each chunk is written to an Arrow file there as it comes (memory stays at
    about one chunk) and the dataset memory-maps it, as `datasets` does; else it is in memory.
    """
    tables: list[pa.Table] = []
    rows: list[Mapping[str, Any]] = []
    names: list[str] | None = None
    path = None if directory is None else Path(directory) / f"generator-{uuid.uuid4().hex}.arrow"
    tmp = None if path is None else path.with_name(f".{path.name}.tmp")
    writer: pa.ipc.RecordBatchStreamWriter | None = None

    def flush() -> None:
        nonlocal features, writer
        chunk = cls.from_dict({k: [r.get(k) for r in rows] for k in names}, features=features)
        features = chunk.features
        if tmp is None:
            tables.append(chunk.data)
        else:
            if writer is None:
                tmp.parent.mkdir(parents=True, exist_ok=True)
                writer = pa.ipc.new_stream(str(tmp), chunk.data.schema)
            writer.write_table(chunk.data)
        rows.clear()

    try:
        for i, row in enumerate(generator(**(gen_kwargs or {}))):
            if not isinstance(row, Mapping):
                raise TypeError(
                    f"from_generator: item {i} is a {type(row).__name__}, expected a dict of "
                    "column values"
                )
            if names is None:
                names = list(features) if features is not None else list(row)
            elif set(row) - set(names):
                raise ValueError(
                    f"from_generator: item {i} has unknown columns {sorted(set(row) - set(names))}"
                )
            rows.append(row)
            if len(rows) >= chunk_rows:
                flush()
        if rows:
            flush()
    except BaseException:
        if writer is not None:
            writer.close()
            tmp.unlink(missing_ok=True)
        raise
    if writer is not None:
        writer.close()
        os.replace(tmp, path)
        table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
        out = cls(table, features)
        out._internal.set_cache(path.parent, [path.name])
        return out
    if not tables:
        if features is None:
            raise ValueError(
                "from_generator: the generator yielded no rows and no features were given"
            )
        return cls(Features(features).arrow_schema.empty_table(), features)
    return cls(pa.concat_tables(tables), features)
