"""A language model's corpus: how its texts are sampled (``--sample-by``: :data:`CORPUS_MODES`),
put end to end and cut into windows (:func:`concatenate`), with what separates them
(:func:`separator`; none at all is refused: :func:`no_separator`). A ``.txt`` file is read as
rows by :func:`jaxfeed.recipes.text.corpus_reader.read_corpus`."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.text.tokenizer import EOS_NAMES
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.text.text_columns import SAMPLE

CORPUS_SUFFIXES = (".txt",)

CONCAT = "concat"  # --task lm by default: the corpus concatenated and cut into windows

CORPUS_MODES = (CONCAT, "line", "paragraph", "document")


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
