"""A language model's corpus: a ``.txt`` file read as rows (:func:`read_corpus`, ``--sample-by``),
and texts put end to end and cut into windows (:func:`concatenate`), with what separates them
(:func:`separator`; none at all is refused: :func:`no_separator`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.load.load import load_dataset
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.text_columns import SAMPLE
from jaxfeed.recipes.tokenizer import EOS_NAMES

CORPUS_SUFFIXES = (".txt",)

CONCAT = "concat"  # --task lm by default: the corpus concatenated and cut into windows

CORPUS_MODES = (CONCAT, "line", "paragraph", "document")


def read_corpus(path: Path, sample_by: str = "line") -> Dataset:
    """A ``.txt`` corpus as a ``text`` column (``load_dataset("text", sample_by=...)``), blank
    rows left out: one row per line, paragraph or document; ``"concat"`` keeps every line with
    its line break (a blank line joins the line before it), so that the rows put end to end are
    the file as written. A file that is not UTF-8 is refused naming the line and byte.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "c.txt"
    >>> _ = p.write_bytes(b"one line\\n\\nanother\\n")
    >>> read_corpus(p)["text"][:], read_corpus(p, "concat")["text"][:]
    (['one line', 'another'], ['one line\\n\\n', 'another\\n'])
    >>> _ = p.write_bytes(b"fine\\nbad \\xff byte\\n")
    >>> read_corpus(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: --data ...c.txt: not UTF-8 text: byte 0xff at line 2, column 5 (offset 9); save the corpus as UTF-8
    """
    if sample_by not in CORPUS_MODES:
        raise ConfigError(f"--sample-by {sample_by!r}: expected one of line, paragraph, document")
    data = Path(path).read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            f"--data {path}: not UTF-8 text: byte 0x{data[err.start]:02x} at line {line}, column "
            f"{column} (offset {err.start}); save the corpus as UTF-8"
        ) from None
    mode = "line" if sample_by == CONCAT else sample_by
    read = load_dataset(
        "text", data_files=str(path), sample_by=mode, keep_linebreaks=sample_by == CONCAT
    )["train"]["text"][:]
    if sample_by == CONCAT:
        rows: list[str] = []
        for row in read:
            if rows and not row.strip():
                rows[-1] += row  # a blank line stays in the stream, after the line before it
            elif row.strip() or rows:
                rows.append(row)
    else:
        rows = [row.rstrip("\r") for row in read if row.strip()]
    if not rows:
        raise ConfigError(f"--data {path}: the corpus has no text (every line is blank)")
    return Dataset.from_dict({"text": rows})


def ends_with_line_breaks(ds: Dataset, column: str) -> bool:
    """Whether the texts of ``ds`` end with their own line break (the lines of a ``.txt``
    corpus; the last row may lack it, as a file that does not end with one), so that put end to
    end they stay apart; a single text needs nothing either.

    >>> ends_with_line_breaks(Dataset.from_dict({"t": ["a b\\n", "c d"]}), "t")
    True
    >>> ends_with_line_breaks(Dataset.from_dict({"t": ["a b", "c d"]}), "t")
    False
    """
    head = ds.select_columns([column]).select(range(min(ds.num_rows - 1, SAMPLE)))
    values = pc.drop_null(head.flatten_indices().data.column(column))
    return ds.num_rows == 1 or bool(len(values) and pc.all(pc.ends_with(values, "\n")).as_py())


def separator(ds: Dataset, column: str, eos: int | None) -> int | None:
    """What ends each text when a language model's texts are concatenated: nothing when they
    end with their own line break (:func:`ends_with_line_breaks`), else the end-of-sequence
    token (the rows of a table are separate texts).

    >>> separator(Dataset.from_dict({"t": ["a b\\n", "c d"]}), "t", 3)
    >>> separator(Dataset.from_dict({"t": ["a b", "c d"]}), "t", 3)
    3
    """
    return None if ends_with_line_breaks(ds, column) else eos


def no_separator(config: RunConfig, texts: int, owner: str | None = None) -> ConfigError:
    """The error of a language model whose texts would be put end to end with nothing between
    them: texts without their own line breaks, and no end-of-sequence token in the tokenizer
    (``owner``: the checkpoint it came from, e.g. ``--model hf:ORG/NAME``; else ``--tokenizer``
    or the trained one)."""
    names = ", ".join(EOS_NAMES)
    if owner is not None:
        who = (
            f"{owner}: its tokenizer.json has no end-of-sequence token ({names}) and its "
            "config.json sets no eos_token_id"
        )
        other = "a checkpoint whose tokenizer.json or config.json names one"
    elif config.tokenizer is not None:
        who = f"--tokenizer {config.tokenizer} has no end-of-sequence token ({names})"
        other = "a tokenizer.json that has one"
    else:
        who = f"the tokenizer has no end-of-sequence token ({names})"
        other = "a tokenizer.json that has one (--tokenizer)"
    return ConfigError(
        f"{who}, and --task lm puts the {texts:,} texts of --data {config.data} end to end (they "
        "do not end with line breaks, as the lines of a .txt corpus do): each text would run "
        "into the next with nothing to mark where it ends. Give --sample-by "
        f"line|paragraph|document (each text its own segment), or {other}"
    )


def concatenate(ds: Dataset, length: int, separator: int | None) -> Dataset:
    """The token rows of ``ds`` put end to end (each followed by ``separator`` unless None) and
    cut into windows of ``length`` tokens, the last one shorter (run_clm's ``group_texts``,
    the remainder kept).

    >>> ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]], "attention_mask": [[1] * 3, [1] * 2]})
    >>> concatenate(ds, 2, None)["input_ids"][:], concatenate(ds, 4, 9)["input_ids"][:]
    ([[1, 2], [3, 4], [5]], [[1, 2, 3, 9], [4, 5, 9]])
    """
    column = ds.select_columns(["input_ids"]).flatten_indices().data.column("input_ids")
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    flat = np.asarray(column.flatten().to_numpy(zero_copy_only=False), np.int32)
    if separator is not None:
        ends = np.cumsum(pc.list_value_length(column).to_numpy(zero_copy_only=False))
        flat = np.insert(flat, ends, np.int32(separator))
    offsets = np.append(np.arange(0, len(flat), length), len(flat)).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int32()))
    mask = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(len(flat), np.int8)))
    return Dataset(pa.table({"input_ids": ids, "attention_mask": mask}))
