"""`Padding`: variable-length columns of a batch padded to one of few lengths (few compiled shapes).

JAX compiles one program per input shape, so a batch of rows of different lengths is padded to a
length chosen from a short list (``lengths=``), to a multiple (``multiple_of=``), or to its longest
row (one compilation per new length). ``DataLoader(..., padding=Padding(...))`` applies it to every
batch, in the worker processes when there are any; :func:`pad_batch` is the same step on a numpy
batch.

Columns whose rows have the same lengths row by row (``input_ids``, ``attention_mask``,
``labels``) are padded together to one length; ``attention_mask`` (boolean, True on real
positions) is added when the batch has none. Pad values are 0, -100 for ``labels`` (the
`transformers` convention), the tokenizer's pad id for ``input_ids`` with ``tokenizer=``.
Rows are padded on the right, or on the left (``side="left"``, what batched generation needs);
``side=None`` with a tokenizer follows the tokenizer's padding side.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jaxfeed.data.ragged import Ragged

LABEL_PAD = -100
# Columns a tokenizer makes alongside ``input_ids``: a row of another length is a broken row.
COMPANIONS = ("attention_mask", "token_type_ids", "special_tokens_mask", "position_ids")
_PAD_TOKENS = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>", "<PAD>")
SIDES = ("right", "left")


def tokenizer_padding_side(tokenizer: Any) -> str:
    """The side a tokenizer pads on: ``padding_side`` (a `transformers` tokenizer), else the
    ``direction`` of its padding setting (``tokenizer.json``), else ``"right"``.

    >>> from tokenizers import Tokenizer, models
    >>> tok = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1}, unk_token="[UNK]"))
    >>> tokenizer_padding_side(tok)
    'right'
    >>> tok.enable_padding(direction="left", pad_id=1)
    >>> tokenizer_padding_side(tok)
    'left'
    """
    side = getattr(tokenizer, "padding_side", None)
    if side is None:
        padding = getattr(tokenizer, "padding", None)
        side = padding.get("direction") if isinstance(padding, dict) else None
    side = str(side or "right").lower()
    if side not in SIDES:
        raise ValueError(f"the tokenizer pads on side {side!r}; expected 'right' or 'left'")
    return side


def tokenizer_pad_id(tokenizer: Any) -> int:
    """The pad id of a ``tokenizers.Tokenizer``: its padding setting, else a ``<pad>``/``[PAD]``
    token of its vocabulary.

    >>> from tokenizers import Tokenizer, models
    >>> tokenizer_pad_id(Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1}, unk_token="[UNK]")))
    1
    """
    padding = getattr(tokenizer, "padding", None)
    if isinstance(padding, dict) and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    for token in _PAD_TOKENS:
        i = tokenizer.token_to_id(token)
        if i is not None:
            return int(i)
    raise ValueError(
        f"the tokenizer has no pad token (none of {', '.join(_PAD_TOKENS)} is in its vocabulary "
        "and padding is not enabled); give Padding(pad_values={'input_ids': id})"
    )


@dataclass(frozen=True)
class Padding:
    """How ``DataLoader`` pads the variable-length columns of each batch.

    Args:
        lengths: allowed lengths, increasing (e.g. ``(64, 128, 256, 512)``): a batch is padded to
            the smallest that holds its longest row, so a whole run compiles at most
            ``len(lengths)`` shapes. A longer row is an error naming it, or is cut with
            ``truncate=True``.
        multiple_of: pad to the longest row rounded up to this multiple.
        pad_values: ``{column: value}``; default 0, -100 for ``labels``, and the tokenizer's pad
            id for ``input_ids`` when ``tokenizer=`` is given. Each must fit the column's dtype.
        truncate: cut rows longer than ``max(lengths)`` instead of raising.
        tokenizer: a ``tokenizers.Tokenizer`` whose pad id pads ``input_ids``.
        columns: the columns to pad (default: every column of numbers whose rows have lengths:
            those the dataset stores as ragged lists and any whose rows differ in length).
        side: ``"right"`` (pad after the values) or ``"left"`` (pad before them, so every row
            ends at the last position: what batched generation needs). ``None``: the
            tokenizer's padding side with ``tokenizer=`` (``padding_side``, or the padding
            ``direction`` of its ``tokenizer.json``), else ``"right"``. ``truncate=True`` keeps
            a row's first values on either side.

    With neither ``lengths`` nor ``multiple_of`` each batch is padded to its longest row: one
    compilation per new length.

    >>> import numpy as np
    >>> batch = {"input_ids": [np.array([5, 6, 7]), np.array([8])], "labels": [np.array([1, 2, 3]), np.array([4])]}
    >>> out = pad_batch(batch, Padding(lengths=(4, 8)))
    >>> out["input_ids"].tolist(), out["labels"].tolist()
    ([[5, 6, 7, 0], [8, 0, 0, 0]], [[1, 2, 3, -100], [4, -100, -100, -100]])
    >>> out["attention_mask"].tolist()
    [[True, True, True, False], [True, False, False, False]]
    >>> pad_batch(batch, Padding(side="left"))["input_ids"].tolist()
    [[5, 6, 7], [0, 0, 8]]
    """

    lengths: Sequence[int] | None = None
    multiple_of: int | None = None
    pad_values: Mapping[str, Any] | None = None
    truncate: bool = False
    tokenizer: Any = field(default=None, repr=False, compare=False)
    columns: Sequence[str] | None = None
    side: str | None = None

    def __post_init__(self) -> None:
        if self.side is not None and self.side not in SIDES:
            raise ValueError(
                f"Padding(side=...) must be 'right', 'left' or None, got {self.side!r}"
            )
        if self.lengths is not None:
            if isinstance(self.lengths, str | bytes) or not isinstance(self.lengths, Sequence):
                raise ValueError(
                    f"Padding(lengths=...) must be a sequence of ints, got {self.lengths!r}"
                )
            lengths = tuple(self.lengths)
            if not lengths:
                raise ValueError("Padding(lengths=[]): give at least one allowed length, or None")
            if not all(_positive_int(v) for v in lengths):
                raise ValueError(f"Padding(lengths=...) must be positive ints, got {lengths!r}")
            if any(b <= a for a, b in itertools.pairwise(lengths)):
                raise ValueError(
                    f"Padding(lengths=...) must be strictly increasing, got {lengths!r}; "
                    f"e.g. {tuple(sorted(set(lengths)))!r}"
                )
            object.__setattr__(self, "lengths", tuple(int(v) for v in lengths))
        if self.multiple_of is not None and not _positive_int(self.multiple_of):
            raise ValueError(
                f"Padding(multiple_of=...) must be a positive int, got {self.multiple_of!r}"
            )
        if self.lengths is not None and self.multiple_of is not None:
            raise ValueError("Padding: give lengths= or multiple_of=, not both")
        if self.pad_values is not None:
            if not isinstance(self.pad_values, Mapping):
                raise ValueError(
                    f"Padding(pad_values=...) must be a dict of column -> value, got "
                    f"{self.pad_values!r}"
                )
            for column, value in self.pad_values.items():
                if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                    raise ValueError(
                        f"Padding(pad_values=...): the value for column {column!r} must be a "
                        f"number, got {value!r}"
                    )
            object.__setattr__(self, "pad_values", dict(self.pad_values))
        if self.columns is not None:
            if isinstance(self.columns, str):
                object.__setattr__(self, "columns", (self.columns,))
            object.__setattr__(self, "columns", tuple(self.columns))
        if not isinstance(self.truncate, bool):
            raise ValueError(f"Padding(truncate=...) must be True or False, got {self.truncate!r}")
        if self.tokenizer is not None:
            tokenizer_pad_id(self.tokenizer)  # fail now, not in a worker
            tokenizer_padding_side(self.tokenizer)

    @property
    def padding_side(self) -> str:
        """The side rows are padded on: ``side``, else the tokenizer's, else ``"right"``.

        >>> Padding().padding_side, Padding(side="left").padding_side
        ('right', 'left')
        """
        if self.side is not None:
            return self.side
        if self.tokenizer is not None:
            return tokenizer_padding_side(self.tokenizer)
        return "right"

    @property
    def max_length(self) -> int | None:
        """The longest row a batch may hold (``max(lengths)``), or None."""
        return None if self.lengths is None else self.lengths[-1]

    def target(self, longest: int) -> int:
        """The padded length for a batch whose longest row is ``longest`` (before truncation).

        >>> Padding(lengths=(8, 16)).target(9), Padding(multiple_of=8).target(9), Padding().target(9)
        (16, 16, 9)
        """
        if self.lengths is not None:
            for length in self.lengths:
                if longest <= length:
                    return length
            return self.lengths[-1]
        if self.multiple_of is not None:
            return max(1, math.ceil(longest / self.multiple_of)) * self.multiple_of
        return longest

    def pad_value(self, column: str) -> Any:
        """The value that pads ``column``."""
        if self.pad_values is not None and column in self.pad_values:
            return self.pad_values[column]
        if column == "labels":
            return LABEL_PAD
        if column == "input_ids" and self.tokenizer is not None:
            return tokenizer_pad_id(self.tokenizer)
        return 0


def choose_lengths(row_lengths: Any, count: int = 4, multiple_of: int = 64) -> tuple[int, ...]:
    """``count`` allowed lengths (multiples of ``multiple_of``, the last holding the longest row)
    that waste the fewest pad positions when each row is padded to the smallest that holds it:
    exact, by dynamic programming over the candidate lengths. With ``bucket_by_length=True``
    (batches of similar rows) this is close to the padding a whole epoch gets.

    >>> choose_lengths([10, 12, 60, 64, 200], count=2, multiple_of=16)
    (64, 208)
    """
    lengths = np.sort(np.asarray(row_lengths, dtype=np.int64).reshape(-1))
    if not _positive_int(count) or not _positive_int(multiple_of):
        raise ValueError("choose_lengths: count and multiple_of must be positive ints")
    if not len(lengths):
        raise ValueError("choose_lengths: no row lengths given")
    top = max(1, math.ceil(int(lengths[-1]) / multiple_of))
    candidates = np.arange(1, top + 1, dtype=np.int64) * multiple_of
    # rows and summed lengths at or below each candidate
    upto = np.searchsorted(lengths, candidates, side="right")
    sums = np.concatenate([[0], np.cumsum(lengths)])[upto]
    m, k = len(candidates), min(count, len(candidates))
    inf = np.iinfo(np.int64).max // 4
    best = np.full((k + 1, m), inf, dtype=np.int64)
    back = np.zeros((k + 1, m), dtype=np.int64)
    best[1] = candidates * upto - sums  # one length: every row up to it padded to it
    for level in range(2, k + 1):
        for j in range(level - 1, m):
            i = np.arange(level - 2, j)
            cost = best[level - 1, i] + candidates[j] * (upto[j] - upto[i]) - (sums[j] - sums[i])
            pick = int(np.argmin(cost))
            best[level, j], back[level, j] = cost[pick], i[pick]
    chosen, j = [], m - 1
    for level in range(k, 0, -1):
        chosen.append(int(candidates[j]))
        j = int(back[level, j])
    return tuple(sorted(set(chosen)))


def _positive_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value > 0


def check_fits(value: Any, dtype: np.dtype, column: str) -> Any:
    """``value`` as a scalar of ``dtype``, or a ``ValueError`` naming the column."""
    dtype = np.dtype(dtype)
    ok = True
    if dtype.kind == "b":
        ok = value in (0, 1)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        ok = float(value).is_integer() and info.min <= value <= info.max
    elif dtype.kind == "f":
        ok = bool(np.isfinite(value)) and abs(value) <= np.finfo(dtype).max
    if not ok:
        raise ValueError(
            f"the pad value {value!r} of column {column!r} does not fit its dtype {dtype.name}; "
            f"give Padding(pad_values={{{column!r}: ...}}) a value it can hold"
        )
    return dtype.type(value)


def variable_columns(batch: Mapping[str, Any], declared: Sequence[str] = ()) -> list[str]:
    """Columns of ``batch`` that hold rows of lengths: ``declared`` ones (stored as ragged lists)
    and any column of number arrays whose first dimensions differ."""
    out = []
    for column, value in batch.items():
        if column in declared or isinstance(value, Ragged):
            out.append(column)
        elif isinstance(value, list | tuple) and value:
            arrays = [v for v in value if isinstance(v, np.ndarray | list | tuple)]
            if len(arrays) == len(value):
                shapes = {np.shape(v) for v in value}
                kinds = {np.asarray(v).dtype.kind for v in value}
                if len(shapes) > 1 and kinds <= set("biuf") and all(len(s) for s in shapes):
                    out.append(column)
    return out


def _row(rows: Any, i: int) -> int:
    return i if rows is None else int(rows[i])


def length_groups(
    ragged: dict[str, Ragged], rows: Any = None
) -> list[tuple[list[str], np.ndarray]]:
    """Columns with equal lengths row by row, grouped (``input_ids`` first, its companions
    required to match it)."""
    groups: list[tuple[list[str], np.ndarray]] = []
    order = sorted(ragged, key=lambda c: c != "input_ids")
    ids = ragged.get("input_ids")
    for column in order:
        lengths = ragged[column].lengths
        if ids is not None and column in COMPANIONS and not np.array_equal(lengths, ids.lengths):
            i = int(np.argmax(lengths != ids.lengths))
            raise ValueError(
                f"row {_row(rows, i)}: column {column!r} has {int(lengths[i])} values but "
                f"'input_ids' has {int(ids.lengths[i])}; they must have the same length"
            )
        for members, group_lengths in groups:
            if np.array_equal(group_lengths, lengths):
                members.append(column)
                break
        else:
            groups.append(([column], lengths))
    return groups


def scatter(
    ragged: Ragged,
    width: int,
    fill: Any,
    dtype: np.dtype | None = None,
    starts: Any = None,
    left: bool = False,
) -> np.ndarray:
    """``(rows, width, ...)`` array: row ``i`` gets ``ragged[i]`` (cut at ``width``), rest ``fill``
    (after the values, or before them with ``left=True``)."""
    n = len(ragged)
    dtype = ragged.dtype if dtype is None else dtype
    out = np.full((n, width, *ragged.row_shape), fill, dtype=dtype)
    lengths = np.minimum(ragged.lengths, width)
    total = int(lengths.sum())
    if total == 0:
        return out
    row_index = np.repeat(np.arange(n), lengths)
    base = np.repeat(np.cumsum(lengths) - lengths, lengths)
    col_index = np.arange(total) - base
    source = np.repeat(ragged.offsets[:-1], lengths) + col_index
    if left:
        out[row_index, col_index + np.repeat(width - lengths, lengths)] = ragged.values[source]
    else:
        out[row_index, col_index] = ragged.values[source]
    return out


def pad_batch(
    batch: Mapping[str, Any],
    padding: Padding,
    rows: Any = None,
    declared: Sequence[str] = (),
    longest: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """``batch`` with its variable-length columns padded as ``padding`` says.

    ``rows`` (the dataset rows of the batch) names rows in errors; ``declared`` lists columns the
    dataset stores as ragged (padded even when a batch's rows happen to share one length);
    ``longest`` gives columns' longest row in the whole global batch when this is one process's
    share of it (so that every process pads to the same length).

    >>> import numpy as np
    >>> out = pad_batch({"x": [np.ones((2, 3)), np.ones((1, 3))]}, Padding(multiple_of=4))
    >>> out["x"].shape, out["attention_mask"].sum(axis=1).tolist()
    ((2, 4, 3), [2, 1])
    """
    if padding.columns is not None:
        missing = [c for c in padding.columns if c not in batch]
        if missing:
            raise ValueError(
                f"Padding(columns=...) names {missing}, which the batch does not have (it has "
                f"{sorted(batch)})"
            )
        names = list(padding.columns)
    else:
        names = variable_columns(batch, declared)
    if not names:
        return dict(batch)
    ragged = {c: Ragged.from_value(batch[c], c, rows) for c in names}
    out = dict(batch)
    mask_lengths: np.ndarray | None = None
    mask_width = 0
    left = padding.padding_side == "left"
    for members, lengths in length_groups(ragged, rows):
        local = int(lengths.max()) if len(lengths) else 0
        widest = max([local, *((longest or {}).get(c, 0) for c in members)])
        width = padding.target(widest)
        limit = padding.max_length
        if limit is not None and local > limit and not padding.truncate:
            i = int(np.argmax(lengths > limit))
            raise ValueError(
                f"row {_row(rows, i)}: column {members[0]!r} has {int(lengths[i])} values, more "
                f"than the largest allowed length {limit} (Padding(lengths={padding.lengths})); "
                "add a larger length or set truncate=True to cut such rows"
            )
        for column in members:
            r = ragged[column]
            fill = check_fits(padding.pad_value(column), r.dtype, column)
            out[column] = scatter(r, width, fill, left=left)
        if mask_lengths is None:
            mask_lengths, mask_width = np.minimum(lengths, width), width
    if "attention_mask" not in out and mask_lengths is not None:
        positions = np.arange(mask_width)[None, :]
        if left:
            out["attention_mask"] = positions >= (mask_width - mask_lengths)[:, None]
        else:
            out["attention_mask"] = positions < mask_lengths[:, None]
    return out


@dataclass(frozen=True)
class PadStep:
    """The loader's collation step: :func:`pad_batch` on a built batch (runs in the workers)."""

    padding: Padding
    declared: tuple[str, ...] = ()

    def __call__(self, batch: dict[str, Any], job: Any) -> dict[str, Any]:
        return pad_batch(batch, self.padding, job.rows, self.declared, job.layout)
