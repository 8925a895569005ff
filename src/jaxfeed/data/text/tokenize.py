"""`tokenize`: a dataset's text column encoded to ragged ``input_ids`` and ``attention_mask``."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.dataset import Dataset, DatasetDict
from jaxfeed.data.features import Features, List, Value
from jaxfeed.data.iterable import IterableDataset, IterableDatasetDict
from jaxfeed.data.text.tokenizer import EMPTY_FIX, check_texts, text_pieces, tokenizers_module

# A text longer than CHUNK_CHARS is encoded in pieces of about that many characters, and texts
# are encoded GROUP_CHARS at a time: the tokenizer holds a few hundred bytes per token while it
# encodes, so one 5 MB line took 2 GB whole; in pieces the peak is bounded by the group.
CHUNK_CHARS = 1 << 16
GROUP_CHARS = 1 << 18


SIDES = ("right", "left")


def _truncation_side(tokenizer: Any, side: str | None = None) -> str:
    """The side ``max_length`` cuts: ``side`` when given, else the tokenizer's
    ``truncation_side`` (a `transformers` tokenizer), else the ``direction`` of the truncation
    setting of its ``tokenizer.json``, else ``"right"`` (keep a text's first tokens).

    >>> from tokenizers import Tokenizer, models
    >>> tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    >>> _truncation_side(tok)
    'right'
    >>> tok.enable_truncation(8, direction="left")
    >>> _truncation_side(tok), _truncation_side(tok, "right")
    ('left', 'right')
    """
    if side is None:
        side = getattr(tokenizer, "truncation_side", None)
    if side is None:
        truncation = getattr(tokenizer, "truncation", None)
        side = truncation.get("direction") if isinstance(truncation, dict) else None
    side = str(side or "right").lower()
    if side not in SIDES:
        raise ValueError(f"tokenize: truncation side must be 'right' or 'left', got {side!r}")
    return side


class _Encode:
    """The batched ``map`` function: ``encode_batch`` (the tokenizer's Rust threads) on groups of
    texts of about ``GROUP_CHARS`` characters, the ids written straight into Arrow list arrays
    (no per-row Python lists kept). A text over ``CHUNK_CHARS`` characters is encoded in pieces
    (:func:`text_pieces`) without special tokens, then cut to ``max_length`` and given the
    special tokens the tokenizer's post-processor adds around one sequence."""

    def __init__(
        self,
        tokenizer: Any,
        column: str,
        max_length: int | None,
        add_special_tokens: bool,
        side: str = "right",
    ) -> None:
        tokenizers = tokenizers_module()
        tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())  # a copy: settings changed below
        tok.no_padding()
        if max_length is None:
            tok.no_truncation()
        else:
            tok.enable_truncation(max_length, direction=side)
        self.tokenizer = tok
        self.column = column
        self.add_special_tokens = add_special_tokens
        self.max_length = max_length
        self._plain: Any = None  # the tokenizer without truncation, for the pieces of long texts
        self._around: tuple[list[int], list[int]] | None = None
        self._around_checked = False

    def _encode(self, texts: list[str], **kwargs: Any) -> list[list[int]]:
        tok = kwargs.pop("tokenizer", self.tokenizer)
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        return [e.ids for e in encode(texts, **kwargs)]

    def _special_around(self) -> tuple[list[int], list[int]] | None:
        """The ids the post-processor puts before and after one sequence (None when it does
        something else: such long texts are then encoded whole)."""
        if not self._around_checked:
            probe = "a b c"
            plain = self._encode([probe], tokenizer=self._plain, add_special_tokens=False)[0]
            full = self._encode([probe], tokenizer=self._plain, add_special_tokens=True)[0]
            starts = range(len(full) - len(plain) + 1) if plain else range(0)
            k = next((i for i in starts if full[i : i + len(plain)] == plain), None)
            self._around = None if k is None else (full[:k], full[k + len(plain) :])
            self._around_checked = True
        return self._around

    def _encode_long(self, text: str) -> list[int] | np.ndarray:
        """One long text encoded piece by piece, a group of pieces at a time."""
        if self._plain is None:
            plain = tokenizers_module().Tokenizer.from_str(self.tokenizer.to_str())
            plain.no_truncation()
            self._plain = plain
        around = self._special_around() if self.add_special_tokens else ([], [])
        if around is None:
            return self._encode([text], add_special_tokens=self.add_special_tokens)[0]
        before, after = around
        keep = (
            None if self.max_length is None else max(0, self.max_length - len(before) - len(after))
        )
        from_end = (self.tokenizer.truncation or {}).get("direction") == "left"
        pieces = list(text_pieces(text))
        if from_end:
            pieces.reverse()
        parts: list[np.ndarray] = []
        count, group, size = 0, [], 0
        for i, piece in enumerate(pieces):
            group.append(piece)
            size += len(piece)
            if size < GROUP_CHARS and i + 1 < len(pieces):
                continue
            encoded = self._encode(
                group[::-1] if from_end else group, tokenizer=self._plain, add_special_tokens=False
            )
            for ids in encoded[::-1] if from_end else encoded:
                parts.append(np.asarray(ids, dtype=np.int32))
                count += len(ids)
            group, size = [], 0
            if keep is not None and count >= keep:
                break
        if from_end:
            parts.reverse()
        n = count if keep is None else min(count, keep)
        out = np.empty(len(before) + n + len(after), dtype=np.int32)  # one copy of the ids
        out[: len(before)] = before
        out[len(out) - len(after) :] = after
        at, skip = len(before), count - n if from_end else 0
        for part in parts:
            if skip >= len(part):  # left truncation: the first tokens are dropped
                skip -= len(part)
                continue
            part, skip = part[skip:], 0
            take = min(len(part), len(before) + n - at)
            out[at : at + take] = part[:take]
            at += take
        return out

    def _encode_all(self, texts: list[str]) -> list[list[int] | np.ndarray]:
        """Every text's ids: short ones in groups of about ``GROUP_CHARS``, long ones in pieces."""
        out: list[Any] = [None] * len(texts)
        group: list[int] = []
        size = 0

        def flush() -> None:
            encoded = self._encode(
                [texts[j] for j in group], add_special_tokens=self.add_special_tokens
            )
            for j, ids in zip(group, encoded, strict=True):
                out[j] = ids
            group.clear()

        for i, text in enumerate(texts):
            if len(text) > CHUNK_CHARS:
                out[i] = self._encode_long(text)
                continue
            if group and size + len(text) > GROUP_CHARS:
                flush()
                size = 0
            group.append(i)
            size += len(text)
        if group:
            flush()
        return out

    def __call__(self, texts: Any, indices: Any = None) -> dict[str, pa.Array]:
        if isinstance(texts, pa.Array | pa.ChunkedArray):
            texts = texts.to_pylist()
        first = 0 if indices is None else None
        texts = check_texts(texts, self.column, first or 0, indices)
        ids = self._encode_all(texts)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            i = int(empty[0])
            row = i if indices is None else int(indices[i])
            raise ValueError(
                f"column {self.column!r}, row {row}: {texts[i][:60]!r} gives no tokens with this "
                f"tokenizer ({EMPTY_FIX.format(column=self.column)})"
            )
        total = int(lengths.sum())
        if any(isinstance(row, np.ndarray) for row in ids):  # long texts encoded in pieces
            flat = np.concatenate([np.asarray(row, dtype=np.int32) for row in ids])
        else:
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=total)
        offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        offsets_array = pa.array(offsets)
        return {
            "input_ids": pa.ListArray.from_arrays(offsets_array, pa.array(flat)),
            "attention_mask": pa.ListArray.from_arrays(
                offsets_array, pa.array(np.ones(total, dtype=np.int8))
            ),
        }


def tokenize(
    dataset: Dataset | IterableDataset | DatasetDict | IterableDatasetDict,
    tokenizer: Any,
    column: str = "text",
    max_length: int | None = None,
    *,
    num_proc: int | None = None,
    batch_size: int = 1000,
    add_special_tokens: bool = True,
    remove_columns: bool = False,
    truncation_side: str | None = None,
) -> Dataset | IterableDataset | DatasetDict | IterableDatasetDict:
    """``dataset`` (or every split of a ``DatasetDict``) with ``input_ids`` (int32) and ``attention_mask`` (int8) lists added, one row of
    ids per text of ``column``.

    Batches of ``batch_size`` texts are encoded by ``tokenizer.encode_batch`` (its own threads);
    ``num_proc`` also splits the rows over processes (:meth:`Dataset.map`). Special tokens
    (``[CLS]``/``[SEP]``, ``<eos>``...) come from the tokenizer's post-processor; ``max_length``
    truncates (special tokens included) on the tokenizer's truncation side, as `transformers`
    does: ``"right"`` keeps a text's first tokens, ``"left"`` its last; the side is
    ``truncation_side=`` when given, else the tokenizer's (its ``truncation_side``, or the
    truncation ``direction`` in its ``tokenizer.json``), else right. A ``None``, an empty string, non-UTF-8 bytes or a text
    that gives no tokens raises ``ValueError`` naming the column and row. On an
    :class:`~jaxfeed.IterableDataset` the encoding runs as the stream is read.
    ``remove_columns=True`` drops the text column.

    >>> from jaxfeed import Dataset
    >>> from jaxfeed.text import train_tokenizer
    >>> ds = Dataset.from_dict({"text": ["the cat sat", "a dog"] * 10})
    >>> tok = train_tokenizer(ds, "text", vocab_size=60, kind="wordpiece")
    >>> out = tokenize(ds, tok, "text")
    >>> out.features["input_ids"], out[1]["attention_mask"]
    (List(Value('int32')), [1, 1, 1, 1])
    >>> tok.decode(out[0]["input_ids"])
    'the cat sat'
    """
    tokenizers_module()
    if isinstance(dataset, DatasetDict | IterableDatasetDict):
        return type(dataset)(
            {
                split: tokenize(
                    part,
                    tokenizer,
                    column,
                    max_length,
                    num_proc=num_proc,
                    batch_size=batch_size,
                    add_special_tokens=add_special_tokens,
                    remove_columns=remove_columns,
                    truncation_side=truncation_side,
                )
                for split, part in dataset.items()
            }
        )
    _check_arguments(dataset, tokenizer, column, max_length)
    side = _truncation_side(tokenizer, truncation_side)
    encode = _Encode(tokenizer, column, max_length, add_special_tokens, side)
    removed = [column] if remove_columns else None
    features = _tokenized_features(dataset, column, remove_columns)
    return _map_encode(dataset, encode, column, batch_size, num_proc, removed, features)


def _check_arguments(dataset: Any, tokenizer: Any, column: str, max_length: int | None) -> None:
    """Refuse what :func:`tokenize` cannot do: not a tokenizer, a bad ``max_length``, a missing
    text column, or output columns the dataset already has."""
    if not hasattr(tokenizer, "encode_batch") or not hasattr(tokenizer, "to_str"):
        raise TypeError(
            f"tokenize needs a tokenizers.Tokenizer (jaxfeed.text.load_tokenizer or "
            f"train_tokenizer), got {type(tokenizer).__name__}"
        )
    if max_length is not None and (
        isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
    ):
        raise ValueError(f"tokenize: max_length must be a positive int or None, got {max_length!r}")
    if column not in (dataset.column_names or [column]):
        raise ValueError(
            f"column {column!r} is not in the dataset; its columns are {dataset.column_names}"
        )
    taken = [
        c
        for c in ("input_ids", "attention_mask")
        if c != column and c in (dataset.column_names or ())
    ]
    if taken:
        raise ValueError(
            f"the dataset already has {taken}; remove them first (tokenize adds input_ids and "
            "attention_mask)"
        )


def _map_encode(
    dataset: Any,
    encode: _Encode,
    column: str,
    batch_size: int,
    num_proc: int | None,
    removed: list[str] | None,
    features: Features | None,
) -> Dataset | IterableDataset:
    """``encode`` mapped over ``dataset`` in batches: as the stream is read, or written."""
    if isinstance(dataset, IterableDataset):
        return dataset.map(
            encode,
            input_columns=column,
            batched=True,
            batch_size=batch_size,
            remove_columns=removed,
            features=features,
        )
    if not isinstance(dataset, Dataset):
        raise TypeError(
            f"tokenize needs a jaxfeed Dataset or IterableDataset, got {type(dataset).__name__}"
        )
    return dataset.map(
        encode,
        with_indices=True,
        input_columns=column,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=removed,
        features=features,
    )


def _tokenized_features(dataset: Any, column: str, remove_columns: bool) -> Features | None:
    """The features of :func:`tokenize`'s output (None when the dataset's are unknown)."""
    features = None
    if dataset.features is not None:
        features = Features(
            {
                **{k: v for k, v in dataset.features.items() if not remove_columns or k != column},
                "input_ids": List(Value("int32")),
                "attention_mask": List(Value("int8")),
            }
        )
    return features
