"""Tables: numeric columns standardised, text, bool and few-valued integer columns one-hot with an
unknown slot, identifier-like columns and free text left out (:func:`plan_table`); encoded in the
loader by :func:`jaxfeed.serve.spec.encode_table`, as an export's declared spec does; ``mlp`` by
default; predict reads tables (CSV, Parquet, JSON Lines, Arrow).

>>> from jaxfeed import Dataset
>>> ds = Dataset.from_dict({"x": [1.0, 2.0, 3.0, 4.0], "city": ["a", "b", "a", "b"], "y": [0, 1, 0, 1]})
>>> prep, notes = plan_table(ds, ["x", "city"], "y", "classification", TableOptions())
>>> prep.input_shape, notes[0]
([4], 'inputs: 2 table columns: 1 numeric (x), standardised; 1 categorical (city: 2 values), one-hot with an unknown slot')
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.base import Baseline, Kind
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.serve.spec import category_key

MAX_INT_CATEGORIES = 10  # integer columns with at most this many values are categories
MAX_CATEGORIES = 1000  # text columns with more distinct values are free text, left out
ID_NAME = re.compile(r"(?:^|[_\\W])(?:id|uuid|guid|key|index)$", re.IGNORECASE)


@dataclass
class TableOptions:
    """How a table's columns are chosen and encoded (``--input-columns``,
    ``--categorical-columns``, ``--missing``)."""

    given: bool = False  # the inputs were named: none is excluded
    categorical: list[str] | None = None  # these columns are categories, whatever their type
    impute: bool = False  # missing cells: filled (numeric: train mean; else the unknown slot)
    excluded: list[tuple[str, str]] = dataclasses.field(default_factory=list)


class TableKind(Kind):
    """Rows of a table (see the module docstring).

    >>> TableKind().default_model
    'mlp'
    """

    default_model = "mlp"
    reads = "tables"  # CSV, Parquet, JSON Lines, Arrow (or folders of them)

    def __init__(self) -> None:
        super().__init__("table")

    def table_options(self, config: RunConfig, columns: Any) -> TableOptions:
        return TableOptions(
            given=columns.given,
            categorical=config.categorical_columns,
            impute=config.missing == "impute",
            excluded=columns.excluded,
        )

    def plan_inputs(self, train: Dataset, inputs: list[str], label: str, task: str,
                    image_size: Any, options: Any = None,
                    image_mode: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        return plan_table(train, inputs, label, task, options or TableOptions())

    def baseline(self, prep: Preprocessing) -> Baseline | None:
        """The built-in ``linear`` on the encoded row: numbers standardised, categories one-hot.

        >>> TableKind().baseline(Preprocessing("table", ["a", "b"], "y", [5], categories={"b": ["u", "v", "w"]})).reads
        'the 5 encoded inputs (1 number standardised, 1 category one-hot)'
        """
        categories = len(prep.categories or {})
        numbers = len(prep.input_columns) - categories
        parts = [f"{numbers} number{'s' if numbers != 1 else ''} standardised"] if numbers else []
        if categories:
            parts.append(f"{categories} categor{'ies' if categories != 1 else 'y'} one-hot")
        shown = f"the {prep.input_shape[0]} encoded inputs ({', '.join(parts)})"
        return Baseline("linear", {}, shown)

    def raw_batch(self, prep: Preprocessing, batch: dict[str, Any]) -> Any:
        return {c: batch[c] for c in prep.input_columns}

    def raw_columns(self, prep: Preprocessing, raw: Any) -> dict[str, Any]:
        return raw


@dataclass
class _Column:
    """What :func:`plan_table` makes of one column: left out (``why``), or kept as categories
    (``keys``) or a number (``mean``, ``std``), with its ``holes`` and their ``fill``."""

    why: str | None = None
    keys: list[str] | None = None
    mean: float = 0.0
    std: float = 1.0
    fill: float = 0.0
    holes: int = 0
    first_hole: int = -1  # the row of the first empty or non-finite cell (-1: none)


F32_MAX = float(np.finfo(np.float32).max)  # inputs are float32: a larger magnitude becomes inf


class CellError(ConfigError):
    """A table cell refused while planning; ``row`` is its row in the train part (after the
    validation split), which :func:`jaxfeed.recipes.train.plan` turns into the data's own row
    (``where`` in ``template``).

    >>> str(CellError("column 'a' at {where}: refused", 3))
    "column 'a' at row 3 of the train part: refused"
    """

    def __init__(self, template: str, row: int) -> None:
        self.template, self.row = template, row
        super().__init__(template.format(where=f"row {row} of the train part"))


def _plan_column(name: str, column: Any, rows: int, options: TableOptions,
                 forced: set[str]) -> _Column:  # fmt: skip
    """One column of :func:`plan_table` (one pass over it)."""
    t = column.type
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    integer = pa.types.is_integer(t)
    categorical = text or pa.types.is_boolean(t) or name in forced
    distinct = 0
    if categorical or integer:
        unique = pc.unique(column)
        distinct = len(unique) - unique.null_count
        categorical = categorical or distinct <= MAX_INT_CATEGORIES
    if not options.given and name not in forced and rows > 1 and distinct == rows:
        low, high = (pc.min_max(column)[k].as_py() for k in ("min", "max")) if integer else (0, 0)
        if text or ID_NAME.search(name) or (integer and high - low == rows - 1):
            return _Column(why="unique per row: an identifier")
    if text and distinct > MAX_CATEGORIES and name not in forced:
        return _Column(
            why=f"{distinct:,} distinct texts: too many categories (--categorical-columns keeps it)"
        )
    if categorical:
        holes = column.null_count + (
            int(pc.sum(pc.is_nan(column)).as_py() or 0) if pa.types.is_floating(t) else 0
        )
        keys = {category_key(v) for v in pc.unique(column).to_pylist()}
        return _Column(keys=sorted(keys - {None}), holes=holes)
    values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
    bad = ~np.isfinite(values)
    huge = np.flatnonzero(~bad & (np.abs(np.where(bad, 0.0, values)) > F32_MAX))
    if len(huge):
        raise CellError(
            f"input column {name!r} holds {values[huge[0]]:g} at {{where}}, beyond the float32 "
            f"range the model computes in (about ±{F32_MAX:.3g}): scale the column (a log, a unit) "
            "or drop such rows",
            int(huge[0]),
        )
    holes = int(bad.sum())
    finite = values[~bad]
    fill = float(finite.mean()) if len(finite) else 0.0
    if holes and options.impute:
        values = np.where(bad, fill, values)
    if holes and not options.impute:
        return _Column(fill=fill, holes=holes, first_hole=int(np.flatnonzero(bad)[0]))
    return _Column(
        mean=float(values.mean()), std=float(values.std() or 1.0), fill=fill, holes=holes
    )


def check_cells(part: Dataset, prep: Preprocessing) -> None:
    """The numeric input cells of another part (the validation split) held to the rules the
    train part's were planned by: a :class:`CellError` naming the first one that is empty or
    not finite (unless imputed) or past float32's range.

    >>> prep, _ = plan_table(Dataset.from_dict({"x": [1.0, 2.0], "y": [0, 1]}), ["x"], "y",
    ...                      "classification", TableOptions())
    >>> check_cells(Dataset.from_dict({"x": [1.0, float("inf")]}), prep)
    Traceback (most recent call last):
    jaxfeed.recipes.kinds.table.CellError: input column 'x' is empty or not finite at row 1 of the train part: fill or drop such rows, or give --missing impute
    """
    categorical = set(prep.categories or {})
    for name in prep.input_columns:
        if name in categorical or name not in part.column_names:
            continue
        column = part.select_columns([name]).flatten_indices().data.column(name)
        values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
        bad = ~np.isfinite(values)
        huge = np.flatnonzero(~bad & (np.abs(np.where(bad, 0.0, values)) > F32_MAX))
        if len(huge):
            raise CellError(
                f"input column {name!r} holds {values[huge[0]]:g} at {{where}}, beyond the "
                f"float32 range the model computes in (about ±{F32_MAX:.3g}): scale the column "
                "(a log, a unit) or drop such rows",
                int(huge[0]),
            )
        if bad.any() and not prep.impute:
            raise CellError(
                f"input column {name!r} is empty or not finite at {{where}}: fill or drop such "
                "rows, or give --missing impute",
                int(np.flatnonzero(bad)[0]),
            )


def plan_table(
    train: Dataset, inputs: list[str], label: str, task: str, options: TableOptions
) -> tuple[Preprocessing, list[str]]:
    """Numeric columns standardised, text, bool and few-valued integer columns one-hot,
    identifier-like columns (unique per row) and free text left out; one pass per column, so the
    time is linear in rows and columns."""
    forced = set(options.categorical or [])
    stray = sorted(forced - set(inputs))
    if stray:
        raise ConfigError(f"--categorical-columns {stray[0]!r} is not one of the input columns")
    table = train.select_columns(inputs).flatten_indices().data
    planned: dict[str, _Column] = {}
    excluded = list(options.excluded)
    for name, column in zip(table.column_names, table.columns, strict=True):
        plan = _plan_column(name, column, table.num_rows, options, forced)
        if plan.why is not None:
            excluded.append((name, plan.why))
            continue
        if plan.holes and not options.impute:
            row = plan.first_hole
            if row < 0:  # a category column: its first null or NaN
                row = int(np.flatnonzero(np.asarray(pc.is_null(column, nan_is_null=True)))[0])
            raise CellError(
                f"input column {name!r} is empty or not finite at {{where}}: fill or drop such "
                "rows, or give --missing impute",
                row,
            )
        planned[name] = plan
    if not planned:
        raise ConfigError(
            f"no input column is left to learn {label!r} from (excluded: "
            f"{', '.join(c for c, _ in excluded[:5])}); give --input-columns"
        )
    categories = {c: p.keys for c, p in planned.items() if p.keys is not None}
    width = sum(len(categories[c]) + 1 if c in categories else 1 for c in planned)
    prep = Preprocessing(
        "table", list(planned), label, [width], task, scale=False,
        mean=[p.mean for p in planned.values()], std=[p.std for p in planned.values()],
        categories=categories or None,
        fill=[p.fill for p in planned.values()] if options.impute else None,
        impute=options.impute,
    )  # fmt: skip
    return prep, _table_notes(planned, categories, excluded)


def _table_notes(planned: dict[str, _Column], categories: dict[str, list[str]],
                 excluded: list[tuple[str, str]]) -> list[str]:  # fmt: skip
    """What :func:`plan_table` chose, as lines for the user."""
    numeric = [c for c in planned if c not in categories]
    parts = []
    if numeric:
        parts.append(f"{len(numeric)} numeric ({_short(numeric)}), standardised")
    if categories:
        shown = [f"{c}: {len(v)} values" for c, v in categories.items()]
        parts.append(
            f"{len(categories)} categorical ({_short(shown)}), one-hot with an unknown slot"
        )
    notes = [f"inputs: {len(planned)} table columns: {'; '.join(parts)}"]
    if excluded:
        shown = [f"{c} ({why})" for c, why in excluded]
        notes.append(f"excluded: {_short(shown)} (--input-columns to choose)")
    imputed = [p.holes for p in planned.values() if p.holes]
    if imputed:
        notes.append(
            f"missing values: imputed {sum(imputed):,} cells in {len(imputed)} columns "
            "(numbers: the train mean; categories: the unknown slot)"
        )
    return notes


def _short(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:5])}, ... {names[-1]}"
