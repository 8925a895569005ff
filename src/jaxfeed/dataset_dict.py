"""`DatasetDict`: a dict of named splits, each a :class:`~jaxfeed.Dataset`; its methods run the
Dataset's on every split. It sits above :mod:`jaxfeed.dataset` (which re-exports it for old
imports and reaches it lazily, for ``train_test_split`` and ``load_from_disk``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.dataset import Dataset, load_from_disk
from jaxfeed.features import Features
from jaxfeed.saved import save_dataset_dict


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
        """Run :meth:`Dataset.map` on every split."""
        if args:
            return self._each("map", function, *args, **kwargs)
        return self._each("map", function, **kwargs)

    def filter(self, function: Any, **kwargs: Any) -> DatasetDict:
        return self._each("filter", function, **kwargs)

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
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        """Write every split under ``dataset_dict_path`` atomically (``num_shards`` per split;
        a URL too, with ``storage_options``)."""
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
