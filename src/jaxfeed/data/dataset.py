"""`Dataset`, `DatasetDict` and ``load_from_disk``: the public API. A :class:`Dataset` is a
:class:`~jaxfeed.data.core.DatasetCore` (an Arrow table, its features and an output format) with the
operations of :mod:`jaxfeed.data.ops`, the files of :mod:`jaxfeed.data.formats.tabular`, :mod:`jaxfeed.data.formats.saved` and the
cache (:mod:`jaxfeed.data.formats.cache`), and streaming through :mod:`jaxfeed.data.iterable`; this module sits
above all of them. Those readers return tables; the classmethods here wrap them as Datasets.
Long because ``Dataset`` and ``DatasetDict`` build each other (``train_test_split``,
``load_from_disk``): in two modules they would import each other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data import ops
from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import Features
from jaxfeed.data.formats import saved, tabular
from jaxfeed.data.formats.cache import CachedTable, load_cached, needs_conversion
from jaxfeed.data.formats.files import read_tables
from jaxfeed.data.formats.ray import dataset_to_ray, write_ray
from jaxfeed.data.formats.saved import save_dataset, save_dataset_dict
from jaxfeed.data.formats.shards import MAX_SHARD_SIZE
from jaxfeed.data.formats.spark import write_spark
from jaxfeed.data.iterable import IterableDataset
from jaxfeed.data.splits import reader_split


def load_from_disk(
    path: str | os.PathLike,
    keep_in_memory: bool = False,
    storage_options: dict | None = None,
    verify: bool = False,
    data_dir: str | os.PathLike | None = None,
) -> Dataset | DatasetDict:
    """Load a dataset saved with ``save_to_disk`` (by jaxfeed or `datasets`), memory-mapped.

    Only files inside ``path`` are read: a ``state.json`` or ``dataset_dict.json`` naming files
    or splits outside it is refused, as are features contradicted by the data (class ids out of
    range, wrong list lengths). The sizes recorded at save time are always checked;
    ``verify=True`` also checks every file's SHA-256 and raises :class:`ChecksumError` on any
    difference (or when the folder was saved without checksums, e.g. by `datasets`).

    Image and Audio cells stored as a path only (no bytes) may name files inside ``path``, or
    inside ``data_dir`` when you give one (e.g. the image folder an older save pointed into);
    others raise :class:`UnsafePathError`. ``save_to_disk`` embeds the files' bytes, so its
    folders need neither.

    >>> import tempfile
    >>> from jaxfeed import Dataset, load_from_disk
    >>> folder = tempfile.mkdtemp()
    >>> Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(folder + "/ds")
    >>> list(load_from_disk(folder + "/ds", verify=True)["x"])
    [1, 2, 3]

    A URL (``s3://bucket/ds``...) is copied once into the local cache (``$JAXFEED_CACHE``), then
    memory-mapped; ``storage_options`` go to fsspec. The folder is read by :mod:`jaxfeed.data.formats.saved`.
    """
    path, is_dict = saved.open_saved(path, storage_options)
    if not is_dict:
        return Dataset._from_saved(saved.read_split(path, keep_in_memory, verify, data_dir))
    return DatasetDict(
        {
            name: Dataset._from_saved(split)
            for name, split in saved.read_splits(path, keep_in_memory, verify, data_dir)
        }
    )


def _with_file_features(ds: Dataset, features: Features | None) -> Dataset:
    if features is None:
        return ds
    features = Features(features)
    missing = [c for c in ds.column_names if c not in features]
    if missing:
        raise ValueError(f"columns {missing} of the file are not in the given features")
    return ds.cast(Features({c: features[c] for c in ds.column_names}))


class Dataset(DatasetCore):
    """A table of rows backed by Apache Arrow, read as Python, numpy, JAX, Arrow or pandas values.

    >>> from jaxfeed import Dataset
    >>> ds = Dataset.from_dict({"data": [[1, 2], [3, 4]]}).with_format("jax")
    >>> ds[0]
    {'data': Array([1, 2], dtype=int32)}
    >>> ds[:2]["data"].shape
    (2, 2)
    """

    def to_csv(
        self,
        path_or_buf: str | os.PathLike | Any,
        batch_size: int | None = None,
        **to_csv_kwargs: Any,
    ) -> int:
        """Write CSV (header, no index, pandas options as in `datasets`); return bytes written."""
        return tabular.to_csv(self, path_or_buf, batch_size, **to_csv_kwargs)

    def to_json(
        self,
        path_or_buf: str | os.PathLike | Any,
        batch_size: int | None = None,
        **to_json_kwargs: Any,
    ) -> int:
        """Write JSON Lines (``orient="records"``; pandas options as in `datasets`); return bytes
        written."""
        return tabular.to_json(self, path_or_buf, batch_size, **to_json_kwargs)

    def to_parquet(
        self,
        path_or_buf: str | os.PathLike | Any,
        batch_size: int | None = None,
        **parquet_writer_kwargs: Any,
    ) -> int:
        """Write Parquet with the features in its schema metadata; return bytes written.

        >>> import os, tempfile
        >>> from jaxfeed import ClassLabel, Dataset, Features
        >>> ds = Dataset.from_dict({"y": [0, 1]}, features=Features({"y": ClassLabel(names=["a", "b"])}))
        >>> path = os.path.join(tempfile.mkdtemp(), "y.parquet")
        >>> _ = ds.to_parquet(path)
        >>> Dataset.from_parquet(path).features
        Features({'y': ClassLabel(names=['a', 'b'])})
        """
        return tabular.to_parquet(self, path_or_buf, batch_size, **parquet_writer_kwargs)

    @classmethod
    def from_parquet(
        cls,
        path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
        split: str | None = None,
        features: Features | None = None,
        cache_dir: str | None = None,
        keep_in_memory: bool = False,
        columns: Sequence[str] | None = None,
        num_proc: int | None = None,
        **kwargs: Any,
    ) -> Dataset:
        """Read Parquet file(s) (features from the schema metadata unless given).

        As ``load_dataset``, the files are converted once into the memory-mapped Arrow cache
        under ``cache_dir`` (``keep_in_memory=True``: read into RAM); ``split`` names the split.
        """
        split = reader_split(split)
        if keep_in_memory:
            table = tabular.read_parquet(path_or_paths, columns=columns)
            return cls._from_table(table, features)._named(split)
        out = cls._from_files(tabular.paths(path_or_paths), "parquet", cache_dir)
        if columns is not None:
            out = out.select_columns(list(columns))
        return _with_file_features(out, features)._named(split)

    @classmethod
    def from_csv(
        cls,
        path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
        split: str | None = None,
        features: Features | None = None,
        cache_dir: str | None = None,
        keep_in_memory: bool = False,
        num_proc: int | None = None,
        **read_csv_kwargs: Any,
    ) -> Dataset:
        """Read CSV file(s) with ``pandas.read_csv`` (its type inference, as `datasets`), into
        memory (``keep_in_memory=True``: into Arrow's memory pool, as there)."""
        split = reader_split(split)
        table = tabular.read_csv(path_or_paths, **read_csv_kwargs)
        if keep_in_memory:
            table = tabular.in_arrow_memory(table)
        return cls._from_table(table, features)._named(split)

    @classmethod
    def from_json(
        cls,
        path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
        split: str | None = None,
        features: Features | None = None,
        cache_dir: str | None = None,
        keep_in_memory: bool = False,
        field: str | None = None,
        num_proc: int | None = None,
        **kwargs: Any,
    ) -> Dataset:
        """Read JSON Lines or JSON file(s) (a list of rows, a dict of columns, or ``field`` of it).

        The files are converted once into the memory-mapped Arrow cache under
        ``cache_dir``, as ``load_dataset`` does (``keep_in_memory=True``: read into RAM).
        """
        split = reader_split(split)
        if keep_in_memory or field is not None:
            table = tabular.read_json(path_or_paths, field=field)
            return cls._from_table(table, features)._named(split)
        out = cls._from_files(tabular.paths(path_or_paths), "json", cache_dir)
        return _with_file_features(out, features)._named(split)

    @classmethod
    def _from_files(cls, files: Sequence[Any], fmt: str, cache_dir: str | None) -> Dataset:
        """Local Arrow files memory-mapped where they are; other files converted once into the
        memory-mapped cache (as ``load_dataset`` reads a split)."""
        files = [str(f) for f in files]
        if needs_conversion(files, fmt):
            return cls._from_cached(load_cached(files, fmt, cache_dir))
        return cls(read_tables(files, fmt))

    @classmethod
    def _from_cached(cls, cached: CachedTable) -> Dataset:
        """A dataset over a cache entry (:func:`~jaxfeed.data.formats.cache.load_cached`,
        :func:`~jaxfeed.data.formats.cache.cached_dataset`), listing its file in ``cache_files``."""
        ds = cls._wrap(cached.table, cached.features)
        ds._internal.set_cache(cached.cache_dir, cached.cache_files)
        return ds

    @classmethod
    def _from_saved(cls, split: saved.SavedSplit) -> Dataset:
        """A dataset over a folder read by :func:`jaxfeed.data.formats.saved.read_split`, in its saved state."""
        return saved.restore_state(cls._wrap(split.table, split.features), split)

    @classmethod
    def _from_table(cls, table: pa.Table, features: Features | None) -> Dataset:
        if features is None:
            return cls(table)
        features = Features(features)
        missing = [c for c in table.column_names if c not in features]
        if missing:
            raise ValueError(f"columns {missing} of the file are not in the given features")
        return cls(table, Features({c: features[c] for c in table.column_names}))

    def unique(self, column: str) -> list:
        """The distinct values of ``column``, in order of first appearance.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [3, 1, 3, 2]}).unique("x")
        [3, 1, 2]
        """
        return ops.unique(self, column)

    def sort(
        self,
        column_names: str | Sequence[str],
        reverse: bool | Sequence[bool] = False,
        null_placement: str = "at_end",
        **kwargs: Any,
    ) -> Dataset:
        """Rows sorted by one or more columns (a stable sort; an index mapping).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [3, 1, 2]}).sort("x")["x"]
        Column([1, 2, 3])
        """
        return ops.sort(self, column_names, reverse, null_placement)

    def add_column(self, name: str, column: Any, feature: Any = None, **kwargs: Any) -> Dataset:
        """A new dataset with one more column (``feature`` inferred unless given).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2]}).add_column("y", ["a", "b"])[1]
        {'x': 2, 'y': 'b'}
        """
        return ops.add_column(self, name, column, feature)

    def add_item(self, item: Mapping[str, Any], **kwargs: Any) -> Dataset:
        """A new dataset with ``item`` (a row dict) appended."""
        return ops.add_item(self, item)

    def flatten(self, max_depth: int = 16, **kwargs: Any) -> Dataset:
        """Struct columns split into one column per field (``"a.b"``), as `datasets` names them.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"a": [{"b": 1, "c": "x"}]}).flatten().column_names
        ['a.b', 'a.c']
        """
        return ops.flatten(self, max_depth)

    def class_encode_column(self, column: str, include_nulls: bool = False) -> Dataset:
        """Turn a column of values into a :class:`ClassLabel` (names: the sorted distinct values).

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"y": ["dog", "cat", "dog"]}).class_encode_column("y")
        >>> ds.features["y"], ds["y"]
        (ClassLabel(names=['cat', 'dog']), Column([1, 0, 1]))
        """
        return ops.class_encode_column(self, column, include_nulls)

    def shard(self, num_shards: int, index: int, contiguous: bool = True, **kwargs: Any) -> Dataset:
        """Shard ``index`` of ``num_shards``: contiguous blocks, or every ``num_shards``-th row.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": list(range(5))}).shard(2, 0)["x"]
        Column([0, 1, 2])
        """
        return ops.shard(self, num_shards, index, contiguous)

    def batch(
        self,
        batch_size: int | None = None,
        by_column: str | Sequence[str] | None = None,
        drop_last_batch: bool = False,
        num_proc: int | None = None,
        new_fingerprint: str | None = None,
    ) -> Dataset:
        """Rows grouped: each row holds lists of ``batch_size`` values (or of a run of rows with
        the same ``by_column`` values), as `datasets`' ``Dataset.batch``.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2, 3]}).batch(2)[:]
        {'x': [[1, 2], [3]]}
        """
        return ops.batch(self, batch_size, by_column, drop_last_batch)

    def take(self, n: int) -> Dataset:
        """The first ``n`` rows (a slice).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2, 3]}).take(2)["x"][:]
        [1, 2]
        """
        return ops.select(self, range(min(int(n), self.num_rows)))

    def skip(self, n: int) -> Dataset:
        """All rows after the first ``n`` (a slice)."""
        return ops.select(self, range(min(int(n), self.num_rows), self.num_rows))

    def repeat(self, num_times: int) -> Dataset:
        """The rows ``num_times`` times over, in order.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2]}).repeat(2)["x"][:]
        [1, 2, 1, 2]
        """
        if num_times is None:
            raise ValueError("Map style datasets do not support indefinite repetition.")
        if not isinstance(num_times, int):
            raise ValueError(f"num_times must be an int, got {num_times!r}")
        if num_times <= 0:  # as datasets (and a list times a negative number): no rows
            return self.select([])
        return ops.concatenate_datasets([self] * num_times)

    def to_iterable_dataset(self, num_shards: int | None = 1) -> Any:
        """A streaming view of this dataset (rows in order, in this dataset's format)."""
        shards = 1 if num_shards is None else int(num_shards)
        if shards < 1 or shards > max(self.num_rows, 1):
            raise ValueError(
                f"to_iterable_dataset: num_shards must be in [1, {max(self.num_rows, 1)}] (the "
                f"number of rows), got {num_shards!r}"
            )
        out = IterableDataset.from_dataset(self, num_shards=shards)
        fmt = self.format
        if fmt["type"] not in (None, "custom"):
            out = out.with_format(fmt["type"])
        return out

    @classmethod
    def load_from_disk(cls, dataset_path: str | os.PathLike, **kwargs: Any) -> Dataset:
        """Load a dataset written by :meth:`save_to_disk` (see :func:`jaxfeed.load_from_disk`)."""
        out = load_from_disk(dataset_path, **kwargs)
        if not isinstance(out, Dataset):
            raise ValueError(
                f"{dataset_path} holds a DatasetDict; use DatasetDict.load_from_disk or "
                "jaxfeed.load_from_disk"
            )
        return out

    def select(
        self,
        indices: Any,
        keep_in_memory: bool = False,
        indices_cache_file_name: str | None = None,
        writer_batch_size: int | None = 1000,
        new_fingerprint: str | None = None,
    ) -> Dataset:
        """Rows at ``indices`` (an index mapping: nothing is copied).

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [10, 11, 12]}).select([2, 0])["x"][:]
        [12, 10]
        """
        # keep_in_memory, indices_cache_file_name, writer_batch_size, new_fingerprint: accepted
        # (datasets' cache arguments; the index mapping is held in memory)
        return ops.select(self, indices)

    def shuffle(
        self,
        seed: int | None = None,
        generator: np.random.Generator | None = None,
        keep_in_memory: bool = False,
        load_from_cache_file: bool | None = None,
        indices_cache_file_name: str | None = None,
        writer_batch_size: int | None = 1000,
        new_fingerprint: str | None = None,
    ) -> Dataset:
        """Rows in a random order (an index mapping; reads gather in bulk).

        >>> from jaxfeed import Dataset
        >>> sorted(Dataset.from_dict({"x": [1, 2, 3]}).shuffle(seed=0)["x"])
        [1, 2, 3]
        """
        # the cache arguments of datasets are accepted: the index mapping is held in memory
        return ops.shuffle(self, seed, generator)

    def flatten_indices(self) -> Dataset:
        """Materialise an index mapping (from select/shuffle/filter) into a contiguous table."""
        return ops.flatten_indices(self)

    def filter(
        self,
        function: Any,
        with_indices: bool = False,
        with_rank: bool = False,
        input_columns: str | Sequence[str] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        keep_in_memory: bool = False,
        load_from_cache_file: bool | None = None,
        cache_file_name: str | None = None,
        writer_batch_size: int | None = 1000,
        fn_kwargs: dict | None = None,
        num_proc: int | None = None,
        suffix_template: str = "_{rank:05d}_of_{num_proc:05d}",
        new_fingerprint: str | None = None,
        desc: str | None = None,
    ) -> Dataset:
        """Rows for which ``function`` returns True (one bool per row; a list of them if batched).

        ``num_proc=N`` runs it in N spawned processes (same result; see :mod:`jaxfeed.data.ops.parallel`).
        ``with_rank=True`` passes the process rank after the indices (None without ``num_proc``).
        ``desc`` titles the progress bar. The result is an index mapping over this dataset's
        table (nothing is written), so `datasets`' ``keep_in_memory``, ``load_from_cache_file``,
        ``cache_file_name``, ``writer_batch_size``, ``suffix_template`` and ``new_fingerprint``
        are accepted and change nothing.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2, 3, 4]}).filter(lambda r: r["x"] % 2 == 0)["x"][:]
        [2, 4]
        """
        return ops.filter(
            self,
            function,
            with_indices,
            input_columns,
            batched,
            batch_size,
            fn_kwargs,
            num_proc,
            with_rank=with_rank,
            desc=desc,
        )

    def map(
        self,
        function: Any = None,
        with_indices: bool = False,
        with_rank: bool = False,
        input_columns: str | Sequence[str] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        drop_last_batch: bool = False,
        remove_columns: str | Sequence[str] | None = None,
        keep_in_memory: bool = False,
        load_from_cache_file: bool | None = None,
        cache_file_name: str | os.PathLike | None = None,
        writer_batch_size: int | None = 1000,
        features: Features | None = None,
        disable_nullable: bool = False,
        fn_kwargs: dict | None = None,
        new_fingerprint: str | None = None,
        desc: str | None = None,
        try_original_type: bool | None = True,
        num_proc: int | None = None,
        on_mixed_types: str | None = "use_json",
    ) -> Dataset:
        """Apply ``function`` to every row (or batch) and add or replace the columns it returns.

        Batches are given in the dataset's format (numpy with ``with_format("numpy")``: vectorised).
        On a dataset loaded from disk the result is written to an Arrow file in its folder.

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_dict({"x": [1, 2, 3]}).with_format("numpy")
        >>> ds.map(lambda b: {"y": b["x"] * 2}, batched=True)[:]["y"].tolist()
        [2, 4, 6]

        As in `datasets`: the result is ``{**inputs minus remove_columns, **returned}``; without
        ``features=`` a returned column named like an input keeps its feature when its values fit
        (``try_original_type``), new columns are inferred (1-d arrays as variable-length
        ``List``); ``async def`` functions run concurrently; on arrow/pandas-formatted datasets
        the function gets and may return a ``pyarrow.Table`` / ``pandas.DataFrame``.
        ``keep_in_memory=True`` keeps the output in memory; ``cache_file_name`` names the Arrow
        file it is written to; ``desc`` titles the progress bar. ``load_from_cache_file``,
        ``writer_batch_size`` and ``new_fingerprint`` are accepted: jaxfeed has no fingerprint cache,
        so ``map`` always runs the function. ``num_proc=N`` splits the rows into N contiguous
        shards mapped in spawned processes, with the same result (see :mod:`jaxfeed.data.ops.parallel`);
        ``with_rank=True`` passes each process's rank after the indices (None without
        ``num_proc``). A new column of values of several types is stored as ``Json`` (as
        `datasets`' default ``on_mixed_types="use_json"``; ``None`` refuses it).
        """
        return ops.map(
            self,
            function,
            with_indices=with_indices,
            input_columns=input_columns,
            batched=batched,
            batch_size=batch_size,
            drop_last_batch=drop_last_batch,
            remove_columns=remove_columns,
            keep_in_memory=keep_in_memory,
            cache_file_name=cache_file_name,
            features=features,
            fn_kwargs=fn_kwargs,
            try_original_type=try_original_type,
            num_proc=num_proc,
            with_rank=with_rank,
            desc=desc,
            on_mixed_types=on_mixed_types,
        )

    def train_test_split(
        self,
        test_size: float | int | None = None,
        train_size: float | int | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        stratify_by_column: str | None = None,
    ) -> DatasetDict:
        """Split into ``{"train", "test"}``; ``stratify_by_column`` keeps class proportions.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": list(range(10))}).train_test_split(test_size=0.2, seed=0).num_rows
        {'train': 8, 'test': 2}
        """
        return DatasetDict(
            ops.train_test_split(self, test_size, train_size, shuffle, seed, stratify_by_column)
        )

    def rename_column(self, original_column_name: str, new_column_name: str) -> Dataset:
        return ops.rename_columns(self, {original_column_name: new_column_name})

    def rename_columns(self, column_mapping: Mapping[str, str]) -> Dataset:
        return ops.rename_columns(self, column_mapping)

    def remove_columns(self, column_names: str | Sequence[str]) -> Dataset:
        return ops.remove_columns(self, column_names)

    def select_columns(self, column_names: str | Sequence[str]) -> Dataset:
        return ops.select_columns(self, column_names)

    def cast_column(self, column: str, feature: Any) -> Dataset:
        """Convert one column to another feature (e.g. int -> float, strings -> ClassLabel).

        >>> from jaxfeed import ClassLabel, Dataset
        >>> ds = Dataset.from_dict({"y": ["cat", "dog"]})
        >>> ds.cast_column("y", ClassLabel(names=["cat", "dog"]))["y"][:]
        [0, 1]
        """
        return ops.cast_column(self, column, feature)

    def cast(
        self,
        features: Features,
        batch_size: int | None = 1000,
        keep_in_memory: bool = False,
        **kwargs: Any,
    ) -> Dataset:
        """Convert every column to ``features`` (names must match); values are checked, in
        batches of ``batch_size`` rows where a conversion needs Python (e.g. to ClassLabel)."""
        return ops.cast(self, features, batch_size=batch_size)

    @classmethod
    def from_generator(
        cls,
        generator: Any,
        features: Features | None = None,
        cache_dir: str | None = None,
        keep_in_memory: bool = False,
        gen_kwargs: dict | None = None,
        num_proc: int | None = None,
        split: str = "train",
        fingerprint: str | None = None,
    ) -> Dataset:
        """Build a dataset from a function that yields row dicts (read in chunks of 1,000 rows).

        With ``cache_dir`` (and not ``keep_in_memory``) the rows are written to an Arrow file in
        that folder as they come and memory-mapped, as `datasets` does; else they stay in memory.

        >>> from jaxfeed import Dataset
        >>> def rows():
        ...     yield from ({"x": i} for i in range(3))
        >>> Dataset.from_generator(rows)["x"][:]
        [0, 1, 2]
        """
        # datasets' order of arguments; num_proc and fingerprint are accepted (the generator runs
        # once per call: there is no fingerprint cache)
        directory = None if keep_in_memory or cache_dir is None else cache_dir
        out = ops.from_generator(cls, generator, features, gen_kwargs, directory=directory)
        return out._named(reader_split(split))

    @staticmethod
    def from_spark(
        df: Any,
        split: str | None = None,
        features: Features | None = None,
        keep_in_memory: bool = False,
        cache_dir: str | None = None,
        working_dir: str | None = None,
        load_from_cache_file: bool = True,
        **kwargs: Any,
    ) -> Dataset:
        """A Spark DataFrame as a memory-mapped dataset (the ``spark`` extra), as `datasets`.

        Spark's executors write the rows as Arrow files into the cache (``cache_dir``, else
        ``$JAXFEED_CACHE``) or into ``working_dir`` first (then moved into the cache); the
        driver memory-maps them in the DataFrame's order and never collects a row. On a cluster
        of several machines the folder must be one every executor and the driver reach. The
        same DataFrame (``semanticHash``) and features map the files written before, unless
        ``load_from_cache_file=False``. Spark's types map to features (arrays to ``List``,
        structs to dicts); ``features=`` casts (a binary column to :class:`~jaxfeed.Image`); a
        type with no feature raises ``TypeError`` naming the column. ``max_shard_size`` (bytes,
        default 500 MB) bounds each file an executor writes. See :mod:`jaxfeed.data.formats.spark`.

        >>> from jaxfeed import Dataset
        >>> ds = Dataset.from_spark(spark.createDataFrame([(1, "a")], "id int, name string"))  # doctest: +SKIP
        """
        unknown = sorted(set(kwargs) - {"max_shard_size"})
        if unknown:
            raise TypeError(f"from_spark got unexpected keyword arguments {unknown}")
        cached = write_spark(
            df,
            features,
            cache_dir,
            working_dir,
            load_from_cache_file,
            kwargs.get("max_shard_size", MAX_SHARD_SIZE),
        )
        out = Dataset._from_cached(cached)
        if keep_in_memory:
            out = Dataset(tabular.in_arrow_memory(cached.table), cached.features)
        return out._named(reader_split(split))

    @staticmethod
    def from_ray(
        ds: Any,
        features: Features | None = None,
        cache_dir: str | None = None,
        keep_in_memory: bool = False,
    ) -> Dataset:
        """A Ray Dataset as a memory-mapped dataset (the ``ray`` extra).

        One Ray task per block writes it as Arrow files into the cache folder (``cache_dir``,
        else ``$JAXFEED_CACHE``), which the driver memory-maps in the dataset's order without
        receiving a row; the folder is removed once mapped (the files live while mapped:
        ``save_to_disk`` keeps a copy). Features stored in the blocks' schema (``to_ray`` and
        `datasets` put them there) are kept. See :mod:`jaxfeed.data.formats.ray`.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_ray(Dataset.from_dict({"x": [1, 2]}).to_ray())["x"][:]  # doctest: +SKIP
        [1, 2]
        """
        cached = write_ray(ds, features, cache_dir)
        if keep_in_memory:
            return Dataset(tabular.in_arrow_memory(cached.table), cached.features)
        return Dataset._wrap(cached.table, cached.features)

    def to_ray(self) -> Any:
        """This dataset's rows (index mapping applied) as a Ray Dataset (the ``ray`` extra):
        Arrow tables put into Ray's object store as blocks of about 64 MB, in order, with the
        features (``ClassLabel`` names, ``Image``, ``Audio``) in their schema.

        >>> from jaxfeed import Dataset
        >>> Dataset.from_dict({"x": [1, 2]}).to_ray().take_all()  # doctest: +SKIP
        [{'x': 1}, {'x': 2}]
        """
        return dataset_to_ray(self)

    def save_to_disk(
        self,
        dataset_path: str | os.PathLike,
        max_shard_size: str | int | None = None,
        num_shards: int | None = None,
        num_proc: int | None = None,
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        """Write Arrow IPC + JSON to ``dataset_path`` atomically (see :func:`jaxfeed.load_from_disk`).

        ``num_shards`` or ``max_shard_size`` (``"500MB"``) split the rows over several
        ``data-0000i-of-0000n.arrow`` files, as `datasets` names them; ``num_proc`` without
        ``num_shards`` writes that many shards, as there. ``dataset_path`` may be a URL
        (``s3://bucket/ds``); ``storage_options`` go to fsspec.
        """
        if num_shards is None and num_proc and max_shard_size is None:
            num_shards = max(1, min(int(num_proc), self.num_rows))
        save_dataset(
            self,
            dataset_path,
            num_shards=num_shards,
            max_shard_size=max_shard_size,
            storage_options=storage_options,
        )

    def cleanup_cache_files(self) -> int:
        """Delete ``map`` output files in this dataset's folder, except the one it reads; return how many."""
        if self._cache_dir is None:
            return 0
        removed = 0
        for f in Path(self._cache_dir).glob("cache-map-*.arrow*"):
            if f.name not in self._source_files:
                f.unlink(missing_ok=True)
                removed += 1
        return removed


def _check_split_value(name: str, split: Any) -> None:
    if not isinstance(split, Dataset):
        raise TypeError(
            f"Values in `DatasetDict` should be of type `Dataset` but got type '{type(split)}' "
            f"(split {name!r})"
        )


class DatasetDict(dict):
    """A dict of named splits (``"train"``, ``"test"``, ...), each a :class:`Dataset`.

    >>> from jaxfeed import DatasetDict
    >>> dds = DatasetDict.from_dict({"train": {"data": [[1, 2], [3, 4]]}, "test": {"data": [[5, 6]]}})
    >>> dds.num_rows
    {'train': 2, 'test': 1}
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, split in self.items():
            _check_split_value(name, split)

    def __setitem__(self, key: str, value: Dataset) -> None:
        _check_split_value(key, value)
        super().__setitem__(key, value)

    @classmethod
    def from_dict(
        cls, splits: Mapping[str, Mapping[str, Any]], features: Features | None = None
    ) -> DatasetDict:
        """Build every split with :meth:`Dataset.from_dict`."""
        return cls(
            {name: Dataset.from_dict(data, features=features) for name, data in splits.items()}
        )

    @property
    def num_rows(self) -> dict[str, int]:
        return {k: v.num_rows for k, v in self.items()}

    @property
    def column_names(self) -> dict[str, list[str]]:
        return {k: v.column_names for k, v in self.items()}

    @property
    def shape(self) -> dict[str, tuple[int, int]]:
        return {k: v.shape for k, v in self.items()}

    def with_format(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> DatasetDict:
        """Format every split (see :meth:`Dataset.set_format`)."""
        return DatasetDict(
            {
                k: v.with_format(type, columns, output_all_columns, **format_kwargs)
                for k, v in self.items()
            }
        )

    def set_format(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> None:
        for split in self.values():
            split.set_format(type, columns, output_all_columns, **format_kwargs)

    def reset_format(self) -> None:
        for split in self.values():
            split.reset_format()

    def _each(self, method: str, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: getattr(v, method)(*args, **kwargs) for k, v in self.items()})

    def map(self, function: Any = None, *args: Any, **kwargs: Any) -> DatasetDict:
        """Run :meth:`Dataset.map` on every split (``cache_file_names={split: path}`` gives each
        split's ``cache_file_name``, as `datasets`)."""
        return self._per_split("map", function, args, kwargs)

    def filter(self, function: Any, *args: Any, **kwargs: Any) -> DatasetDict:
        """Run :meth:`Dataset.filter` on every split (``cache_file_names={split: path}`` as in
        :meth:`map`)."""
        return self._per_split("filter", function, args, kwargs)

    def _per_split(self, method: str, function: Any, args: tuple, kwargs: dict) -> DatasetDict:
        names = kwargs.pop("cache_file_names", None) or {}
        if not isinstance(names, Mapping):
            raise TypeError(
                f"{method}: cache_file_names must be a dict of split -> path, got {names!r}"
            )
        out = {}
        for split, ds in self.items():
            own = dict(kwargs)
            if names.get(split) is not None:
                own["cache_file_name"] = names[split]
            out[split] = getattr(ds, method)(function, *args, **own)
        return DatasetDict(out)

    def __enter__(self) -> DatasetDict:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @contextlib.contextmanager
    def formatted_as(
        self,
        type: str | None = None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
        **format_kwargs: Any,
    ) -> Iterator[None]:
        """Format every split inside a ``with`` block; the previous formats come back after it."""
        with contextlib.ExitStack() as stack:
            for split in self.values():
                stack.enter_context(
                    split.formatted_as(type, columns, output_all_columns, **format_kwargs)
                )
            yield

    def set_transform(
        self,
        transform: Callable[[dict], dict] | None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
    ) -> None:
        for split in self.values():
            split.set_transform(transform, columns, output_all_columns)

    def with_transform(
        self,
        transform: Callable[[dict], dict] | None,
        columns: str | Sequence[str] | None = None,
        output_all_columns: bool = False,
    ) -> DatasetDict:
        return DatasetDict(
            {k: v.with_transform(transform, columns, output_all_columns) for k, v in self.items()}
        )

    @property
    def num_columns(self) -> dict[str, int]:
        return {k: v.num_columns for k, v in self.items()}

    @property
    def data(self) -> dict[str, pa.Table]:
        return {k: v.data for k, v in self.items()}

    def shuffle(
        self,
        seeds: int | dict[str, int | None] | None = None,
        seed: int | None = None,
        generators: dict[str, np.random.Generator] | None = None,
        **kwargs: Any,
    ) -> DatasetDict:
        """Shuffle every split: one ``seed`` for all, or ``seeds`` / ``generators`` per split."""
        if seed is not None and seeds is not None:
            raise ValueError("Please specify seed or seeds, but not both")
        seeds = seed if seed is not None else seeds
        if not isinstance(seeds, dict):
            seeds = dict.fromkeys(self, seeds)
        generators = generators or {}
        return DatasetDict(
            {k: v.shuffle(seed=seeds.get(k), generator=generators.get(k)) for k, v in self.items()}
        )

    def cast(self, features: Features, **kwargs: Any) -> DatasetDict:
        return self._each("cast", features, **kwargs)

    def class_encode_column(self, column: str, include_nulls: bool = False) -> DatasetDict:
        """Encode ``column`` in every split (each split gets the names it holds, as `datasets`)."""
        return self._each("class_encode_column", column, include_nulls)

    def unique(self, column: str) -> dict[str, list]:
        return {k: v.unique(column) for k, v in self.items()}

    def sort(self, column_names: str | Sequence[str], **kwargs: Any) -> DatasetDict:
        return self._each("sort", column_names, **kwargs)

    def flatten(self, max_depth: int = 16) -> DatasetDict:
        return self._each("flatten", max_depth)

    def rename_columns(self, column_mapping: Mapping[str, str]) -> DatasetDict:
        return self._each("rename_columns", column_mapping)

    def cleanup_cache_files(self) -> dict[str, int]:
        return {k: v.cleanup_cache_files() for k, v in self.items()}

    @property
    def cache_files(self) -> dict[str, list[dict[str, str]]]:
        return {k: v.cache_files for k, v in self.items()}

    @classmethod
    def from_csv(
        cls, path_or_paths: Mapping[str, Any], features: Features | None = None, **kwargs: Any
    ) -> DatasetDict:
        return cls(
            {k: Dataset.from_csv(p, k, features, **kwargs) for k, p in path_or_paths.items()}
        )

    @classmethod
    def from_json(
        cls, path_or_paths: Mapping[str, Any], features: Features | None = None, **kwargs: Any
    ) -> DatasetDict:
        return cls(
            {k: Dataset.from_json(p, k, features, **kwargs) for k, p in path_or_paths.items()}
        )

    @classmethod
    def from_parquet(
        cls, path_or_paths: Mapping[str, Any], features: Features | None = None, **kwargs: Any
    ) -> DatasetDict:
        return cls(
            {k: Dataset.from_parquet(p, k, features, **kwargs) for k, p in path_or_paths.items()}
        )

    def flatten_indices(self) -> DatasetDict:
        return self._each("flatten_indices")

    def rename_column(self, original_column_name: str, new_column_name: str) -> DatasetDict:
        return self._each("rename_column", original_column_name, new_column_name)

    def remove_columns(self, column_names: str | Sequence[str]) -> DatasetDict:
        return self._each("remove_columns", column_names)

    def select_columns(self, column_names: str | Sequence[str]) -> DatasetDict:
        return self._each("select_columns", column_names)

    def cast_column(self, column: str, feature: Any) -> DatasetDict:
        return self._each("cast_column", column, feature)

    def save_to_disk(
        self,
        dataset_dict_path: str | os.PathLike,
        max_shard_size: str | int | None = None,
        num_shards: dict[str, int] | None = None,
        num_proc: int | None = None,
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        """Write every split under ``dataset_dict_path`` atomically (``num_shards`` per split,
        ``num_proc`` shards for the others, as `datasets`; a URL too, with ``storage_options``)."""
        if num_proc and max_shard_size is None:
            given = dict(num_shards or {})
            num_shards = {
                k: given.get(k, max(1, min(int(num_proc), ds.num_rows))) for k, ds in self.items()
            }
        save_dataset_dict(
            self,
            dataset_dict_path,
            num_shards=num_shards,
            max_shard_size=max_shard_size,
            storage_options=storage_options,
        )

    @classmethod
    def load_from_disk(cls, dataset_dict_path: str | os.PathLike, **kwargs: Any) -> DatasetDict:
        """Load a dataset dict written by :meth:`save_to_disk`."""
        out = load_from_disk(dataset_dict_path, **kwargs)
        if not isinstance(out, DatasetDict):
            raise ValueError(
                f"{dataset_dict_path} holds a Dataset; use Dataset.load_from_disk or "
                "jaxfeed.load_from_disk"
            )
        return out

    def __repr__(self) -> str:
        body = ",\n".join(f"    {k}: {v!r}".replace("\n", "\n    ") for k, v in self.items())
        return f"DatasetDict({{\n{body}\n}})"
