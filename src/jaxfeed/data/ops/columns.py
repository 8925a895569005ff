"""Column edits: rename, remove, select, cast, add, flatten, class-encode; ``unique`` and ``sort``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.core import DatasetCore
from jaxfeed.data.features import ClassLabel, FeatureError, Features, Value
from jaxfeed.data.features.features import infer_column
from jaxfeed.data.features.media import MediaFeature
from jaxfeed.data.features.struct import FeatureLike, decode_python, encode_column, pa_type_of
from jaxfeed.data.features.value import check_float_overflow
from jaxfeed.data.ops._common import _column_list
from jaxfeed.data.ops.rows import select

if TYPE_CHECKING:
    Dataset = DatasetCore  # any dataset: results keep its class

# pyarrow 25 moved null_placement from SortOptions into each sort key
PER_KEY_NULL_PLACEMENT = int(pa.__version__.split(".")[0]) >= 25


def rename_columns(ds: Dataset, mapping: Mapping[str, str]) -> Dataset:
    _column_list(ds, list(mapping), "rename_columns")
    for old, new in mapping.items():
        if not new:
            raise ValueError(f"New column name is empty (renaming column {old!r}).")
        if new in ds.column_names and mapping.get(new, new) == new and new != old:
            raise ValueError(
                f"New column name {new} already in the dataset. Please choose a column name "
                f"which is not already in the dataset. Current columns in the dataset: "
                f"{ds.column_names}"
            )
    names = [mapping.get(c, c) for c in ds.column_names]
    if len(set(names)) != len(names):
        raise ValueError(
            f"New column names must all be different, but this column mapping has "
            f"{len(names) - len(set(names))} duplicates (new names {names})"
        )
    features = Features({mapping.get(k, k): v for k, v in ds.features.items()})
    table = ds.data.rename_columns(names).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def remove_columns(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    remove = set(_column_list(ds, columns, "remove_columns"))
    keep = [c for c in ds.column_names if c not in remove]
    features = Features({k: ds.features[k] for k in keep})
    table = ds.data.select(keep).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def select_columns(ds: Dataset, columns: str | Sequence[str]) -> Dataset:
    """The given columns, in the order given (as `datasets`)."""
    keep = list(dict.fromkeys(_column_list(ds, columns, "select_columns")))
    features = Features({k: ds.features[k] for k in keep})
    table = ds.data.select(keep).replace_schema_metadata(features.arrow_schema.metadata)
    return ds._internal.derive(table, features=features, indices=ds._internal.indices)


def cast(ds: Dataset, features: Features, batch_size: int | None = 1000) -> Dataset:
    features = Features(features)
    if set(features) != set(ds.column_names):
        raise ValueError(
            f"cast: features {list(features)} must name exactly the columns {ds.column_names}"
        )
    table = ds.data
    columns = []
    for name in ds.column_names:
        columns.append(
            _cast_column(table.column(name), ds.features[name], features[name], name, batch_size)
        )
    features = Features({k: features[k] for k in ds.column_names})
    return ds._internal.derive(
        pa.Table.from_arrays(columns, schema=features.arrow_schema),
        features=features,
        indices=ds._internal.indices,
    )


def cast_column(ds: Dataset, column: str, feature: FeatureLike) -> Dataset:
    _column_list(ds, column, "cast_column")
    return cast(ds, Features({**ds.features, column: feature}))


def _cast_column(
    column: pa.ChunkedArray,
    old: FeatureLike,
    new: FeatureLike,
    name: str,
    batch_size: int | None = 1000,
) -> pa.ChunkedArray:
    if old == new:
        return column
    want = pa_type_of(new)
    if not isinstance(new, ClassLabel):  # ClassLabel must check its range: go through encode
        try:
            out = column.cast(want, safe=True)
            return check_float_overflow(column, out, name, f"a {want} value")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    # Python path, ``batch_size`` rows at a time; errors name the row in the whole column.
    size = batch_size if batch_size and batch_size > 0 else max(len(column), 1)
    parts = []
    for start in range(0, len(column), size):
        chunk = column.slice(start, size).combine_chunks()
        values = (
            decode_python(old, chunk)
            if not getattr(old, "requires_decoding", False)
            else chunk.to_pylist()
        )
        try:
            parts.append(encode_column(new, values, name))
        except FeatureError as err:
            row = None if err.row is None else err.row + start
            raise FeatureError(name, row, err.expected, err.value) from None
    return pa.chunked_array(parts, type=want)


def unique(ds: Dataset, column: str) -> list:
    _column_list(ds, column, "unique")
    # As `datasets`: the table's order, unless the index mapping drops or repeats rows.
    indices = ds._internal.indices
    if indices is not None and len(indices) != ds.data.num_rows:
        values = ds._internal.arrow(columns=[column]).column(column)
    else:
        values = ds.data.column(column)
    return values.unique().to_pylist()


def sort(
    ds: Dataset,
    column_names: str | Sequence[str],
    reverse: bool | Sequence[bool] = False,
    null_placement: str = "at_end",
) -> Dataset:
    if ds.num_rows == 0:
        return ds
    names = [column_names] if isinstance(column_names, str) else list(column_names)
    for name in names:
        if not isinstance(name, str) or name not in ds.column_names:
            raise ValueError(
                f"Column '{name}' not found in the dataset. Please provide a column selected in: "
                f"{ds.column_names}"
            )
    if isinstance(reverse, bool):
        reverse = [reverse] * len(names)
    elif len(reverse) != len(names):
        raise ValueError(
            "Parameter 'reverse' should be either a boolean or a list of booleans with the same "
            "length as 'column_names'."
        )
    placement = {"first": "at_start", "last": "at_end"}.get(null_placement, null_placement)
    if placement not in ("at_start", "at_end"):
        raise ValueError(
            f"null_placement '{null_placement}' is an invalid parameter value. Must be either "
            "'last', 'at_end', 'first' or 'at_start'."
        )
    orders = ["descending" if r else "ascending" for r in reverse]
    table = ds._internal.arrow(columns=names)
    if PER_KEY_NULL_PLACEMENT:  # pyarrow 25+: per key (the SortOptions argument is deprecated)
        keys = [(n, o, placement) for n, o in zip(names, orders, strict=True)]
        order = pc.sort_indices(table, sort_keys=keys)
    else:  # pyarrow 21 to 24 take sort keys as (name, order) pairs only
        keys = [(n, o) for n, o in zip(names, orders, strict=True)]
        order = pc.sort_indices(table, sort_keys=keys, null_placement=placement)
    return select(ds, order.to_numpy(zero_copy_only=False))


def add_column(ds: Dataset, name: str, column: Any, feature: FeatureLike | None = None) -> Dataset:
    if name in ds.column_names:
        raise ValueError(
            f"The table can't have duplicated columns but columns {[name]} are duplicated."
        )
    if len(column) != ds.num_rows:
        raise ValueError(
            f"add_column: column {name!r} has {len(column)} values for {ds.num_rows} rows"
        )
    if feature is not None:
        array = encode_column(feature, column, name)
    else:
        feature, array = infer_column(column, name)
    features = Features({**ds.features, name: feature})
    base = ds._internal.arrow()
    table = pa.Table.from_arrays(
        [base.column(c) for c in ds.column_names] + [array], schema=features.arrow_schema
    )
    return ds._internal.derive(table, features=features, indices=None)


def add_item(ds: Dataset, item: Mapping[str, Any]) -> Dataset:
    if not isinstance(item, Mapping):
        raise TypeError(f"add_item needs a dict of column values, got {type(item).__name__}")
    # As `datasets`: new keys become columns (earlier rows None), and a column of nulls takes the
    # item's type.
    base = ds._internal.arrow().cast(ds.features.arrow_schema)
    features = dict(ds.features)
    for name in ds.column_names:
        value = item.get(name)
        if base.column(name).type == pa.null() and value is not None:
            features[name] = infer_column([value], name)[0]
    for name, value in item.items():
        if name not in features:
            features[name] = infer_column([value], name)[0]
    out = Features(features)
    columns = [
        base.column(c).cast(pa_type_of(out[c]))
        if c in base.column_names
        else pa.nulls(base.num_rows, pa_type_of(out[c]))
        for c in out
    ]
    base = pa.Table.from_arrays(columns, schema=out.arrow_schema)
    row = type(ds).from_dict({k: [_as_arrow_casts(item.get(k), out[k])] for k in out}, features=out)
    table = pa.concat_tables([base, row.data])
    return ds._internal.derive(table, features=out, indices=None)


def _as_arrow_casts(value: Any, feature: FeatureLike) -> Any:
    """An ``add_item`` value as `datasets` stores it there (it casts the item's Arrow column to
    the dataset's type) where nothing is lost: an integral float into an integer or
    ``ClassLabel`` column as that int (``2.0`` -> ``2``; ``2.5`` stays refused), a float into a
    string column as Arrow writes it (``2.0`` -> ``"2"``), 0 or 1 into a bool column. A string
    into a bool column stays refused (``"False"``, ``"no"``: Arrow parses a few spellings only)."""
    storage = pa_type_of(feature)
    if (
        pa.types.is_boolean(storage)
        and isinstance(value, int | np.integer)
        and not isinstance(value, bool)
        and value in (0, 1)
    ):
        return bool(value)  # 0 and 1 into a bool column, as Arrow casts them (2 stays refused)
    if not isinstance(value, float | np.floating) or not np.isfinite(value):
        return value
    if pa.types.is_integer(storage) and float(value).is_integer():
        return int(value)
    if pa.types.is_string(storage) or pa.types.is_large_string(storage):
        return pa.array([float(value)], pa.float64()).cast(storage)[0].as_py()
    return value


def flatten(ds: Dataset, max_depth: int = 16) -> Dataset:
    table = ds._internal.arrow()
    features: dict[str, FeatureLike] = dict(ds.features)
    for _ in range(1, max_depth):
        flat: dict[str, FeatureLike] = {}
        changed = False
        for name, feature in features.items():
            sub = _struct_fields(feature)
            if sub is None:
                flat[name] = feature
                continue
            changed = True
            for key, f in sub.items():
                flat[f"{name}.{key}"] = f
        if not changed:
            break
        features = flat
        table = table.flatten()
    out = Features(features)
    table = table.select(list(out)).cast(out.arrow_schema)
    return ds._internal.derive(table, features=out, indices=None)


def _struct_fields(feature: FeatureLike) -> dict[str, FeatureLike] | None:
    if isinstance(feature, Mapping):
        return dict(feature)
    if isinstance(feature, MediaFeature) and not feature.decode:  # stored dicts, as `datasets`
        return {"bytes": Value("binary"), "path": Value("string")}
    flat = getattr(feature, "flatten", None)
    if callable(flat) and not isinstance(feature, Features):
        return flat()
    return None


def class_encode_column(ds: Dataset, column: str, include_nulls: bool = False) -> Dataset:
    _column_list(ds, column, "class_encode_column")
    feature = ds.features[column]
    if not isinstance(feature, Value):
        raise ValueError(
            f"Class encoding is only supported for Value column, and column {column} is "
            f"{type(feature).__name__}."
        )
    values = ds._internal.arrow(columns=[column]).column(column).to_pylist()
    present = [v for v in dict.fromkeys(values) if include_nulls or v is not None]
    names = sorted(str(v) for v in present)
    label = ClassLabel(names=names)
    ids = [label.str2int(str(v)) if (include_nulls or v is not None) else None for v in values]
    features = Features({**ds.features, column: label})
    base = ds._internal.arrow()
    arrays = [label.encode(ids, column) if c == column else base.column(c) for c in ds.column_names]
    table = pa.Table.from_arrays(arrays, schema=features.arrow_schema)
    return ds._internal.derive(table, features=features, indices=None)
