"""Row selections: ``select``, ``shuffle``, ``shard``, ``flatten_indices``, and ``batch``.

``select``, ``shuffle`` and ``shard`` only build an index mapping (or slice the table when the rows
are contiguous); reads through it gather rows in bulk. ``flatten_indices`` writes the mapping out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features, List
from jaxfeed.data.ops._common import _column_list
from jaxfeed.data.reader import normalize_rows

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class


def select(ds: Dataset, indices: Iterable[int] | np.ndarray) -> Dataset:
    if isinstance(indices, range) and indices.step == 1 and ds._internal.indices is None:
        rows, _ = normalize_rows(slice(indices.start, indices.stop), ds.num_rows)
        if len(indices) and (indices.start < 0 or indices.stop > ds.num_rows):
            raise IndexError(
                f"select: range {indices} is out of range for a dataset of {ds.num_rows} rows"
            )
        return ds._internal.derive(ds.data.slice(rows.start, rows.stop - rows.start))
    if not isinstance(indices, np.ndarray | list | tuple | range):
        indices = list(indices)
    if len(indices) and ds._internal.indices is None:
        wanted = np.asarray(indices)
        if (
            wanted.ndim == 1
            and wanted.dtype.kind in "iu"
            and wanted[0] >= 0
            and wanted[-1] < ds.num_rows
            and (len(wanted) == 1 or bool(np.all(np.diff(wanted) == 1)))
        ):  # contiguous: a slice of the table, no index mapping (as `datasets`)
            return ds._internal.derive(ds.data.slice(int(wanted[0]), len(wanted)))
    rows, _ = normalize_rows(
        np.asarray(indices, dtype=np.int64) if len(indices) else [], ds.num_rows
    )
    return ds._internal.derive(ds.data, indices=ds._internal.table_rows(rows))


def shuffle(
    ds: Dataset, seed: int | None = None, generator: np.random.Generator | None = None
) -> Dataset:
    if seed is not None and generator is not None:
        raise ValueError(
            "Both `seed` and `generator` were provided. Please specify just one of them."
        )
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise ValueError("The provided generator must be an instance of numpy.random.Generator")
    rng = generator if generator is not None else np.random.default_rng(_seed(seed))
    inner = ds._internal
    return inner.derive(ds.data, indices=inner.table_rows(rng.permutation(ds.num_rows)))


def _seed(seed: int | None) -> int:
    """``seed``, or one drawn from numpy's global generator as `datasets` draws it."""
    if seed is not None:
        return seed
    _, state, pos, *_ = np.random.get_state()
    seed = int(state[pos] if pos < 624 else state[0])
    np.random.random()  # advance the global generator one step, as there
    return seed


def flatten_indices(ds: Dataset) -> Dataset:
    if ds._internal.indices is None:
        return ds
    return ds._internal.derive(ds._internal.arrow().combine_chunks(), indices=None)


def batch(
    ds: Dataset,
    batch_size: int | None = None,
    by_column: str | Sequence[str] | None = None,
    drop_last_batch: bool = False,
) -> Dataset:
    """Rows grouped: each row holds lists of ``batch_size`` values of every column (or of a run of
    rows equal in ``by_column``), features ``List(feature)``; built with Arrow offsets, no copy
    of the values."""
    if batch_size is None and by_column is None:
        raise ValueError("Dataset.batch() misses `batch_size` or `by_column` argument.")
    table = ds._internal.arrow()
    n = table.num_rows
    if by_column is not None:
        names = _column_list(ds, by_column, "batch(by_column=)")
        keys = table.select(names)
        change = np.zeros(max(n - 1, 0), dtype=bool)
        for name in names:
            values = keys.column(name)
            differs = pc.not_equal(values.slice(1), values.slice(0, max(n - 1, 0)))
            change |= pc.fill_null(differs, False).to_numpy(zero_copy_only=False)
        offsets = np.concatenate([[0], np.nonzero(change)[0] + 1, [n]]) if n else np.zeros(1)
    else:
        if not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        stop = n - n % batch_size if drop_last_batch else n
        offsets = np.append(np.arange(0, stop, batch_size), stop) if stop else np.zeros(1)
    features = Features({k: List(v) for k, v in ds.features.items()})
    offsets = pa.array(offsets.astype(np.int32))
    columns = [
        pa.ListArray.from_arrays(offsets, table.column(c).combine_chunks()).cast(
            features.arrow_schema.field(c).type
        )
        for c in ds.column_names
    ]
    out = pa.Table.from_arrays(columns, schema=features.arrow_schema)
    return ds._internal.derive(out, features=features, indices=None)


def shard(ds: Dataset, num_shards: int, index: int, contiguous: bool = True) -> Dataset:
    if not 0 <= index < num_shards:
        raise ValueError("index should be in [0, num_shards-1]")
    n = ds.num_rows
    if contiguous:
        div, mod = divmod(n, num_shards)
        start = div * index + min(index, mod)
        stop = start + div + (1 if index < mod else 0)
        return select(ds, np.arange(start, stop))
    return select(ds, np.arange(index, n, num_shards))
