"""Free-text columns: which string column is a run's text (:func:`text_column_of`,
:func:`free_text`), and the checks of its rows (empty texts left out, missing labels refused).

A string column is *free text* (not a category) when its median text has at least
:data:`MIN_WORDS` words, it has more than :data:`MIN_DISTINCT` distinct values, and at most
:data:`MAX_REPEATED` of its rows repeat a value of another row: names and e-mail addresses of a
table (``"Jane Doe <jane@example.org>"``), a few of them on most rows, are a category, not text
(:func:`string_profile` says why, in the run's column lines). ``--text-column`` names a text
column instead.

>>> from jaxfeed import Dataset
>>> ds = Dataset.from_dict({"review": ["a fine film with a good cast"] * 6 + ["dull and long, sadly"] * 6,
...                         "city": ["Rome", "Oslo"] * 6})
>>> free_text(ds, "review"), free_text(ds, "city")
(False, False)
>>> ds = Dataset.from_dict({"review": [f"film number {i} was good" for i in range(20)]})
>>> free_text(ds, "review")
True
>>> people = [f"Dev {i} <dev{i}@example.org>" for i in range(12)] + ["Core Team <core@example.org>"] * 30
>>> string_profile(Dataset.from_dict({"maintainer": people}), "maintainer").why()
'a category, not free text: 13 distinct values in 42 rows (69% of rows repeat a value; free text repeats in at most 50%)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Value
from jaxfeed.recipes.config import ConfigError

MIN_WORDS = 3  # a string column whose median row has this many words is free text
MIN_DISTINCT = 10  # ... and more distinct values than this (else: a category)
MAX_REPEATED = 0.5  # ... and at most this share of its rows repeat a value (else: a category)
MOSTLY_EMPTY = 0.5  # a text column empty in more than this share of rows is refused
SAMPLE = 2000  # rows read to tell free text from categories


def is_string(feature: Any) -> bool:
    return isinstance(feature, Value) and feature.dtype in ("string", "large_string")


@dataclass(frozen=True)
class StringProfile:
    """What tells free text from a category, read on the first :data:`SAMPLE` non-empty values
    of a string column: their median word count, distinct values and number."""

    median: float
    distinct: int
    rows: int

    @property
    def repeated(self) -> float:
        """The share of rows whose value another row holds before it (0: all distinct)."""
        return 1 - self.distinct / self.rows if self.rows else 0.0

    @property
    def free_text(self) -> bool:
        """Free text: see the module doc."""
        return (
            self.median >= MIN_WORDS
            and self.distinct > MIN_DISTINCT
            and self.repeated <= MAX_REPEATED
        )

    def why(self) -> str:
        """Why the column is free text or not, in the words of the rule (for the run's lines).

        >>> StringProfile(2.0, 500, 500).why()
        'not free text: a median of 2 words (free text has 3 or more)'
        """
        counts = f"{self.distinct:,} distinct values in {self.rows:,} rows"
        repeats = f"{self.repeated:.0%} of rows repeat a value"
        if self.free_text:
            return f"free text: a median of {self.median:g} words, {counts} ({repeats})"
        if self.median < MIN_WORDS:
            return f"not free text: a median of {self.median:g} words (free text has {MIN_WORDS} or more)"
        if self.distinct <= MIN_DISTINCT:
            return f"a category, not free text: {counts} (free text has more than {MIN_DISTINCT})"
        return (
            f"a category, not free text: {counts} ({repeats}; free text repeats in at most "
            f"{MAX_REPEATED:.0%})"
        )


def string_profile(ds: Dataset, column: str) -> StringProfile:
    """The :class:`StringProfile` of string column ``column`` (its first :data:`SAMPLE` rows,
    empty ones left out)."""
    head = ds.select_columns([column]).select(range(min(ds.num_rows, SAMPLE)))
    values = head.flatten_indices().data.column(column)
    values = pc.drop_null(values)
    values = pc.filter(values, pc.greater(pc.utf8_length(values), 0))
    if len(values) == 0:
        return StringProfile(0.0, 0, 0)
    counts = pc.list_value_length(pc.utf8_split_whitespace(values)).to_numpy(zero_copy_only=False)
    return StringProfile(float(np.median(counts)), len(pc.unique(values)), len(values))


def words(ds: Dataset, column: str) -> tuple[float, int]:
    """The median word count of the first :data:`SAMPLE` non-empty texts, and their distinct
    values."""
    profile = string_profile(ds, column)
    return profile.median, profile.distinct


def free_text(ds: Dataset, column: str) -> bool:
    """Whether string column ``column`` is free text: a median of at least :data:`MIN_WORDS`
    words, more than :data:`MIN_DISTINCT` distinct values, at most :data:`MAX_REPEATED` of its
    rows repeating a value (see the module doc)."""
    if not is_string(ds.features.get(column)):
        return False
    return string_profile(ds, column).free_text


def text_column_of(
    ds: Dataset, inputs: list[str] | None, label: str | None, text_column: str | None, task: Any
) -> str | None:
    """The run's text column: ``--text-column``; else, when no ``--input-columns`` are given, the
    first string column of free text but the label (``--task lm``: also a column named ``text``);
    None for a run that is not on text.

    >>> ds = Dataset.from_dict({"note": [f"the {i} th note here" for i in range(12)], "y": [0] * 12})
    >>> text_column_of(ds, None, "y", None, None), text_column_of(ds, ["note"], "y", None, None)
    ('note', None)
    """
    features = ds.features
    if text_column is not None:
        if text_column not in features:
            raise ConfigError(
                f"--text-column {text_column!r} is not a column; the columns are {list(features)[:12]}"
            )
        if not is_string(features[text_column]):
            raise ConfigError(
                f"--text-column {text_column!r} is {features[text_column]!r}, not text (strings)"
            )
        if text_column == label:
            raise ConfigError(f"--text-column {text_column!r} is also the label column")
        return text_column
    if inputs is not None:
        return None
    if task == "lm" and is_string(features.get("text")):
        return "text"
    for name, feature in features.items():
        if name != label and is_string(feature) and free_text(ds, name):
            return name
    if task == "lm":
        raise ConfigError(
            f"--task lm needs a text column: none of {list(features)[:12]} is free text; give "
            "--text-column"
        )
    return None


def check_text_column(ds: Dataset, column: str, where: str) -> tuple[Dataset, str | None]:
    """``ds`` without its rows of empty text (said in the note), or an error when most are empty.

    >>> ds = Dataset.from_dict({"t": ["a b c", "", None, "d e", "f"]})
    >>> kept, note = check_text_column(ds, "t", "split 'train'")
    >>> kept["t"][:], note
    (['a b c', 'd e', 'f'], "text: left out 2 rows of split 'train' whose 't' is empty (rows 1, 2)")
    """
    values = ds.select_columns([column]).flatten_indices().data.column(column)
    empty = pc.or_kleene(
        pc.is_null(values), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
    )
    empty = np.asarray(pc.fill_null(empty, True).to_numpy(zero_copy_only=False), bool)
    count = int(empty.sum())
    if not count:
        return ds, None
    shown = rows_shown(np.flatnonzero(empty))
    if count > MOSTLY_EMPTY * len(empty):
        raise ConfigError(
            f"{where}: the text column {column!r} is empty in {count:,} of {len(empty):,} rows "
            f"({shown}); is it the text column? (--text-column to choose)"
        )
    kept = ds.select(np.flatnonzero(~empty).tolist()).flatten_indices()  # later reads use .data
    return kept, f"text: left out {count:,} rows of {where} whose {column!r} is empty ({shown})"


def check_labels(ds: Dataset, label: str, where: str) -> None:
    """Refuse a label column with a missing value (null, NaN or an empty string) naming the row.

    >>> check_labels(Dataset.from_dict({"y": ["pos", " ", "neg"]}), "y", "split 'train'")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: split 'train': the label column 'y' is empty in 1 row (row 1); fill or drop such rows
    """
    values = ds.select_columns([label]).flatten_indices().data.column(label)
    missing = pc.is_null(values, nan_is_null=True)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
        missing = pc.or_kleene(missing, pc.fill_null(blank, True))
    rows = np.flatnonzero(np.asarray(missing.to_numpy(zero_copy_only=False), bool))
    if len(rows):
        raise ConfigError(
            f"{where}: the label column {label!r} is empty in {len(rows):,} "
            f"row{'s' if len(rows) > 1 else ''} ({rows_shown(rows)}); fill or drop such rows"
        )


def rows_shown(rows: np.ndarray, limit: int = 5) -> str:
    """``row 7`` or ``rows 1, 2, 4, ...`` for a message.

    >>> rows_shown(np.array([7])), rows_shown(np.arange(8))
    ('row 7', 'rows 0, 1, 2, 3, 4, ...')
    """
    shown = ", ".join(map(str, rows[:limit])) + (", ..." if len(rows) > limit else "")
    return f"row{'s' if len(rows) > 1 else ''} {shown}"
