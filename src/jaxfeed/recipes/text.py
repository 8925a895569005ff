"""Text in ``jaxfeed train``: free-text columns found, tokenized, padded in buckets or packed.

A string column is *free text* (not a category) when its median text has at least
:data:`MIN_WORDS` words and it has more than ten distinct values; ``--text-column`` names it
instead. The run learns from that one column: a classifier or regressor of its label
(``kind="text"``, padded to a few bucket lengths, batches of similar lengths), or a causal
language model of the text itself (``--task lm``, ``kind="lm"``, rows packed to ``--seq-len``).
Its tokenizer (``--tokenizer FILE``, or a byte-level BPE trained on the train split) is kept in
the run folder as ``tokenizer.json``: data read by the ``tokenizers`` library, never code.

>>> from jaxfeed import Dataset
>>> ds = Dataset.from_dict({"review": ["a fine film with a good cast"] * 6 + ["dull and long, sadly"] * 6,
...                         "city": ["Rome", "Oslo"] * 6})
>>> free_text(ds, "review"), free_text(ds, "city")
(False, False)
>>> ds = Dataset.from_dict({"review": [f"film number {i} was good" for i in range(20)]})
>>> free_text(ds, "review")
True
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jaxfeed._base.files import atomic_write
from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Value
from jaxfeed.data.load.load import load_dataset
from jaxfeed.data.text.tokenizer import check_texts
from jaxfeed.loading.packing import Packing
from jaxfeed.loading.padding import Padding, choose_lengths
from jaxfeed.recipes.config import ConfigError, RunConfig, did_you_mean
from jaxfeed.recipes.spec import TEXT_COLUMNS, TEXT_KINDS, Preprocessing
from jaxfeed.serve.spec import SpecError
from jaxfeed.serve.spec import token_batch as spec_token_batch

MIN_WORDS = 3  # a string column whose median row has this many words is free text
MIN_DISTINCT = 10  # ... and more distinct values than this (else: a category)
MOSTLY_EMPTY = 0.5  # a text column empty in more than this share of rows is refused
TOKENIZER_FILE = "tokenizer.json"
LM_SEQ_LEN = 128  # --seq-len of a language model by default
MAX_TEXT_TOKENS = 512  # a classifier's longest text by default (longer ones are truncated)
BUCKETS = 4  # pad lengths of a classifier's batches
SAMPLE = 2000  # rows read to tell free text from categories
# a tokenizer's end-of-sequence token, by name (as jaxfeed.train.generation.EOS_TOKENS)
EOS_NAMES = ("<eos>", "</s>", "<|endoftext|>", "<|eos|>", "[SEP]")

__all__ = [
    "LM_SEQ_LEN",
    "MIN_WORDS",
    "TEXT_KINDS",
    "TOKENIZER_FILE",
    "check_options",
    "free_text",
    "plan_text",
    "text_column_of",
]


def _is_string(feature: Any) -> bool:
    return isinstance(feature, Value) and feature.dtype in ("string", "large_string")


def _words(ds: Dataset, column: str) -> tuple[float, int]:
    """The median word count of the first :data:`SAMPLE` non-empty texts, and their distinct
    values."""
    head = ds.select_columns([column]).select(range(min(ds.num_rows, SAMPLE)))
    values = head.flatten_indices().data.column(column)
    values = pc.drop_null(values)
    values = pc.filter(values, pc.greater(pc.utf8_length(values), 0))
    if len(values) == 0:
        return 0.0, 0
    counts = pc.list_value_length(pc.utf8_split_whitespace(values)).to_numpy(zero_copy_only=False)
    return float(np.median(counts)), len(pc.unique(values))


def free_text(ds: Dataset, column: str) -> bool:
    """Whether string column ``column`` is free text: a median of at least :data:`MIN_WORDS`
    words and more than :data:`MIN_DISTINCT` distinct values (see the module doc)."""
    if not _is_string(ds.features.get(column)):
        return False
    median, distinct = _words(ds, column)
    return median >= MIN_WORDS and distinct > MIN_DISTINCT


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
        if not _is_string(features[text_column]):
            raise ConfigError(
                f"--text-column {text_column!r} is {features[text_column]!r}, not text (strings)"
            )
        if text_column == label:
            raise ConfigError(f"--text-column {text_column!r} is also the label column")
        return text_column
    if inputs is not None:
        return None
    if task == "lm" and _is_string(features.get("text")):
        return "text"
    for name, feature in features.items():
        if name != label and _is_string(feature) and free_text(ds, name):
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
    shown = _rows(np.flatnonzero(empty))
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
            f"row{'s' if len(rows) > 1 else ''} ({_rows(rows)}); fill or drop such rows"
        )


def _rows(rows: np.ndarray, limit: int = 5) -> str:
    """``row 7`` or ``rows 1, 2, 4, ...`` for a message.

    >>> _rows(np.array([7])), _rows(np.arange(8))
    ('row 7', 'rows 0, 1, 2, 3, 4, ...')
    """
    shown = ", ".join(map(str, rows[:limit])) + (", ..." if len(rows) > limit else "")
    return f"row{'s' if len(rows) > 1 else ''} {shown}"


# ---------------------------------------------------------------------------------- options
def load_tokenizer_option(path: str) -> Any:
    """``--tokenizer FILE`` as a ``tokenizers.Tokenizer``, or one clear error naming it."""
    from jaxfeed.text import load_tokenizer  # import cost: JAX via jaxfeed.text; detection must not

    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--tokenizer {path}: {err}") from None
    except ImportError as err:
        raise ConfigError(f"--tokenizer: {err}") from None


def check_options(config: RunConfig) -> None:
    """The text options that can be checked before any data is read or anything written."""
    if config.task == "lm" and config.label_column is not None:
        raise ConfigError("--task lm learns the text itself: drop --label-column")
    if config.task == "lm" and config.class_weights is not None:
        raise ConfigError("--class-weights is for classification; --task lm predicts tokens")
    if config.tokenizer is not None and not config.resume:
        load_tokenizer_option(config.tokenizer)


# ---------------------------------------------------------------------------------- planning
def _special(tokenizer: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        token = tokenizer.token_to_id(name)
        if token is not None:
            return int(token)
    return None


def token_lengths(ds: Dataset) -> np.ndarray:
    """Tokens per row of a tokenized dataset.

    >>> token_lengths(Dataset.from_dict({"input_ids": [[1, 2, 3], [4]]})).tolist()
    [3, 1]
    """
    column = ds.select_columns(["input_ids"]).flatten_indices().data.column("input_ids")
    return pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)


def plan_text(
    train: Dataset, column: str, label: str | None, task: str, config: RunConfig, *,
    eos_fallback: int | None = None, owner: str | None = None,
) -> tuple[Preprocessing, list[str]]:  # fmt: skip
    """The preprocessing of a text run, planned on the train split: its tokenizer (given, or a
    byte-level BPE trained on ``train``), and the bucket lengths of a classifier's padding or
    the packed row length of a language model.

    A language model's texts put end to end (no ``--sample-by``) are separated by the
    tokenizer's end-of-sequence token (``eos_fallback`` when it has none: a checkpoint's
    ``eos_token_id``) unless they end with their own line breaks; with neither, the plan is
    refused (:func:`no_separator`; ``owner`` names where the tokenizer came from), before
    anything is written."""
    from jaxfeed.text import tokenize, train_tokenizer  # import cost: JAX via jaxfeed.text

    if task != "lm" and config.component("model")[0] == "transformer_lm":
        raise ConfigError(
            "--model transformer_lm is a language model: train it with --task lm (a text column "
            "with a label takes --model transformer)"
        )
    median, distinct = _words(train, column)
    if config.text_column is not None:
        said = f"text: column {column!r} (--text-column), median {median:g} words"
    elif task == "lm":
        said = f"text: column {column!r}" + (
            f", one text per {config.sample_by} (--sample-by)"
            if config.sample_by
            else ", concatenated (--sample-by line|paragraph|document: one text per row)"
        )
    else:
        said = (
            f"text: column {column!r} is free text (median {median:g} words, {distinct:,} distinct "
            f"of the first {min(train.num_rows, SAMPLE):,} rows) (--text-column to choose)"
        )
    notes = [said]
    if config.tokenizer is not None:
        tokenizer = load_tokenizer_option(config.tokenizer)
        notes.append(
            f"tokenizer: {config.tokenizer} (--tokenizer; {tokenizer.get_vocab_size():,} tokens), "
            f"copied into the run folder as {TOKENIZER_FILE}"
        )
        source = config.tokenizer
    else:
        try:
            tokenizer = train_tokenizer(train, column, vocab_size=config.vocab_size, kind="bpe")
        except ValueError as err:
            raise ConfigError(f"--data {config.data}: {err}") from None
        notes.append(
            f"tokenizer: byte-level BPE trained on the train split ({tokenizer.get_vocab_size():,} "
            f"tokens, --vocab-size {config.vocab_size}), saved as {TOKENIZER_FILE} in the run "
            "folder (--tokenizer to give one)"
        )
        source = "trained"
    pad = _special(tokenizer, ("<pad>", "[PAD]", "<|pad|>"))
    eos = _special(tokenizer, EOS_NAMES)
    if eos is None:
        eos = eos_fallback
    try:
        tokens = tokenize(train.select_columns([column]), tokenizer, column, remove_columns=True)
    except ValueError as err:
        raise ConfigError(f"--data {config.data}: {err}") from None
    lengths = token_lengths(tokens)
    text: dict[str, Any] = {
        "column": column,
        "tokenizer": TOKENIZER_FILE,
        "source": source,
        "sha256": hashlib.sha256(_tokenizer_bytes(source, tokenizer)).hexdigest(),
        "vocab_size": int(tokenizer.get_vocab_size()),
        "pad_id": 0 if pad is None else pad,
        "eos_id": eos,
    }
    if task == "lm":
        seq_len = config.seq_len or LM_SEQ_LEN
        text.update(max_length=seq_len, lengths=[seq_len], sample_by=config.sample_by or CONCAT)
        longer = int((lengths > seq_len).sum())
        if config.sample_by is None:
            text["separator"] = separator(train, column, eos)
            if eos is None and not ends_with_line_breaks(train, column):
                raise no_separator(config, len(lengths), owner)
            joined = int(lengths.sum()) - (len(lengths) if text["separator"] is None else 0)
            notes.append(
                f"packing: the {len(lengths):,} texts put end to end ("
                + (
                    "line breaks kept"
                    if text["separator"] is None
                    else "each ended by the end-of-sequence token"
                )
                + f") and cut into windows of {seq_len} tokens (--seq-len), as run_clm: "
                f"{-(-joined // seq_len):,} windows (the packed rows an epoch counts) of "
                f"{joined:,} tokens; attention crosses line ends (--sample-by "
                "line|paragraph|document: one segment per text instead)"
            )
        else:
            notes.append(
                f"packing: rows of {seq_len} tokens (--seq-len; the rows an epoch counts), "
                f"{len(lengths):,} texts (one per "
                f"{config.sample_by}, --sample-by) of {int(lengths.sum()):,} tokens (median "
                f"{np.median(lengths):g}); each text is its own segment (attention never crosses "
                "one)" + (f"; {longer:,} texts longer than {seq_len} are split" if longer else "")
            )
        kind, shape = "lm", [seq_len]
    else:
        cap = config.seq_len or min(int(lengths.max()), MAX_TEXT_TOKENS)
        clipped = np.minimum(lengths, cap)
        buckets = [int(v) for v in choose_lengths(clipped, count=BUCKETS, multiple_of=8)]
        buckets[-1] = max(buckets[-1], cap) if config.seq_len else buckets[-1]
        text.update(max_length=cap, lengths=buckets)
        longer = int((lengths > cap).sum())
        notes.append(
            f"padding: to {len(buckets)} lengths {tuple(buckets)} tokens, batches of similar "
            f"lengths (bucket_by_length); texts of {int(lengths.min())}-{int(lengths.max())} "
            f"tokens (median {np.median(lengths):g})"
            + (
                f"; {longer:,} longer than {cap} tokens are cut (--seq-len)"
                if longer
                else f"; longer texts in eval and predict are cut to {cap} (--seq-len)"
            )
        )
        kind, shape = "text", [buckets[-1]]
    prep = Preprocessing(kind, [column], label or "", shape, task, scale=False, text=text)
    prep.tokenizer = tokenizer
    if task == "regression":  # the model learns the standardised target, as for tables
        y = train.select_columns([label]).flatten_indices().data.column(label)
        y = np.asarray(y.to_numpy(zero_copy_only=False), np.float64)
        if not np.all(np.isfinite(y)):
            row = int(np.flatnonzero(~np.isfinite(y))[0])
            raise ConfigError(f"the label column {label!r} is not finite at row {row}")
        prep.target_mean, prep.target_std = float(y.mean()), float(y.std() or 1.0)
    return prep, notes


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


# ---------------------------------------------------------------------------------- datasets
def prepare(prep: Preprocessing, ds: Dataset) -> Dataset:
    """``ds`` tokenized as the run reads it: ``input_ids`` and ``attention_mask`` (and the label
    of a classifier), the text column dropped; an empty text is refused naming the row."""
    from jaxfeed.text import tokenize  # import cost: JAX via jaxfeed.text; detection must not

    column = prep.text["column"]
    if column not in ds.features:
        raise ConfigError(
            f"the data has no column {column!r} (the run's text column); its columns are "
            f"{list(ds.features)[:12]}"
        )
    keep = [column] + ([prep.label_column] if prep.kind == "text" else [])
    missing = [c for c in keep if c not in ds.features]
    if missing:
        raise ConfigError(
            f"the data has no column {missing[0]!r} (the run reads {keep}); its columns are "
            f"{list(ds.features)[:12]}"
        )
    if prep.tokenizer is None:
        raise ConfigError("the run's tokenizer is not loaded (its tokenizer.json)")
    max_length = None if prep.kind == "lm" else int(prep.text["max_length"])
    joined = prep.kind == "lm" and prep.text.get("sample_by") == CONCAT
    try:
        tokens = tokenize(
            ds.select_columns(keep), prep.tokenizer, column, max_length, remove_columns=True,
            add_special_tokens=not joined,
        )  # fmt: skip
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if joined:
        return concatenate(tokens, int(prep.text["max_length"]), prep.text.get("separator"))
    return tokens


def loader_options(prep: Preprocessing) -> dict[str, Any]:
    """The ``DataLoader`` options of a text run (training; evaluation takes the same but
    ``bucket_by_length``): a classifier's buckets, or a language model's packing."""
    text = prep.text
    if prep.kind == "lm":
        packing = Packing(
            length=int(text["max_length"]),
            long_rows="split",
            pad_values={"input_ids": int(text["pad_id"])},
            columns=["input_ids", "attention_mask"],
        )
        return {"packing": packing}
    padding = Padding(
        lengths=tuple(int(v) for v in text["lengths"]),
        truncate=True,
        pad_values={"input_ids": int(text["pad_id"])},
        columns=["input_ids", "attention_mask"],
    )
    return {"padding": padding, "bucket_by_length": True}


# ---------------------------------------------------------------------------------- run files
def attach_tokenizer(prep: Preprocessing, run: Path) -> None:
    """Load the run's ``tokenizer.json`` into ``prep``, checked against the model: the SHA-256
    that ``config.json`` records (runs of an earlier jaxfeed have none) and the vocabulary size
    the model was built for; a clear error when it is gone or replaced."""
    from jaxfeed.text import load_tokenizer  # import cost: JAX via jaxfeed.text; detection must not

    path = Path(run) / prep.text["tokenizer"]
    try:
        data = path.read_bytes()
        prep.tokenizer = load_tokenizer(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{run}: the run's tokenizer: {err}") from None
    recorded = prep.text.get("sha256")
    if isinstance(recorded, str) and hashlib.sha256(data).hexdigest() != recorded:
        raise ConfigError(
            f"{path} is not the tokenizer this run was trained with (its SHA-256 differs from "
            "the one in config.json): put the run's own tokenizer.json back, or train again "
            "with --tokenizer"
        )
    vocab, want = int(prep.tokenizer.get_vocab_size()), int(prep.text["vocab_size"])
    if vocab != want:
        raise ConfigError(
            f"{path} has {vocab:,} tokens, but the run's model was trained on a vocabulary of "
            f"{want:,} (config.json): it is not the run's tokenizer; put the run's own "
            "tokenizer.json back"
        )


def _tokenizer_bytes(source: Any, tokenizer: Any) -> bytes:
    """What ``tokenizer.json`` holds: a copy of ``--tokenizer``'s file, or the trained one."""
    if source not in (None, "trained") and Path(source).is_file():
        return Path(source).read_bytes()
    if tokenizer is None:
        raise ConfigError("no tokenizer to save")
    return tokenizer.to_str().encode("utf-8")


def write_tokenizer(prep: Preprocessing, out: Path) -> None:
    """The run's ``tokenizer.json``: a copy of ``--tokenizer``, or the trained one (atomic); the
    bytes whose SHA-256 the plan recorded (a ``--tokenizer`` file changed since is refused)."""
    target = Path(out) / prep.text["tokenizer"]
    source = prep.text.get("source")
    data = _tokenizer_bytes(source, prep.tokenizer)
    recorded = prep.text.get("sha256")
    if isinstance(recorded, str) and hashlib.sha256(data).hexdigest() != recorded:
        raise ConfigError(
            f"--tokenizer {source}: the file changed while the run was being prepared; train again"
        )
    atomic_write(target, data)


def is_text(prep: Preprocessing) -> bool:
    return prep.kind in TEXT_KINDS


def describe_inputs(prep: Preprocessing) -> str:
    """The inputs of a text run, for the line that sums the data up.

    >>> describe_inputs(Preprocessing("text", ["t"], "y", [24], text={}))
    'inputs: token ids (up to 24)'
    """
    if prep.kind == "lm":
        return f"inputs: packed rows of {prep.input_shape[0]} token ids, target: the next token"
    return f"inputs: token ids (up to {prep.input_shape[0]})"


def token_batch(prep: Preprocessing, texts: list[str]) -> dict[str, np.ndarray]:
    """``texts`` tokenized as in training (cut to the run's ``--seq-len`` with the tokenizer's
    own truncation, special tokens kept) and padded with its pad id to the longest of them: the
    inputs the exported classifier takes (``input_ids`` and ``attention_mask``, int32), made by
    the function the export's own preprocessing uses
    (:func:`jaxfeed.serve.spec.token_batch`)."""
    try:
        batch = spec_token_batch(
            prep.tokenizer, texts, int(prep.text["max_length"]), int(prep.text["pad_id"])
        )
    except SpecError as err:
        raise ConfigError(str(err)) from None
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def as_texts(values: Any) -> list[str]:
    """A column of texts as a list of str (the checks of :func:`jaxfeed.data.text.tokenize`)."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        values = values.to_pylist()
    try:
        return check_texts(list(values), "text")
    except ValueError as err:
        raise ConfigError(str(err)) from None


# ---------------------------------------------------------------------------------- corpora
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


# ---------------------------------------------------------------------------------- models
LM_LOSS = "next_token"  # the Trainer's causal language-model loss
LM_METRICS = ("perplexity", "token_accuracy")


def lm_metrics(config: RunConfig) -> list[str]:
    """``--metrics`` of a language model (default: perplexity and token accuracy).

    >>> lm_metrics(RunConfig())
    ['perplexity', 'token_accuracy']
    """
    names = config.metrics or list(LM_METRICS)
    for name in names:
        if name not in LM_METRICS:
            raise ConfigError(
                f"--metrics {name}: not a language-model metric; known: {', '.join(LM_METRICS)}"
                + did_you_mean(name, LM_METRICS)
            )
    return list(names)


def _parameters(function: Any) -> dict[str, Any]:
    import inspect

    try:
        return dict(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return {}


def transformer_name(name: str, prep: Preprocessing) -> str:
    """The registry name of the transformer a text run builds: ``transformer`` is the classifier
    of a text column and, on ``--task lm``, the language model (``transformer_lm``).

    >>> transformer_name("transformer", Preprocessing("lm", ["t"], "", [8], "lm", text={}))
    'transformer_lm'
    """
    return "transformer_lm" if prep.kind == "lm" else name


def model_inputs(prep: Preprocessing, model: Any) -> dict[str, str]:
    """The Trainer's ``inputs=`` for a text model: ``{argument: column}`` for the token columns
    its ``__call__`` takes by name (a model whose first argument has another name gets
    ``input_ids`` there)."""
    params = [p for p in _parameters(type(model).__call__) if p != "self"]
    columns = TEXT_COLUMNS if prep.kind == "lm" else TEXT_COLUMNS[:2]
    wanted = {c: c for c in columns if c in params}
    if "input_ids" not in wanted:
        if not params:
            raise ConfigError(f"the model {type(model).__name__} takes no input")
        wanted = {params[0]: "input_ids", **wanted}
    return wanted


def export_example(prep: Preprocessing, inputs: dict[str, str]) -> dict[str, np.ndarray]:
    """One batch of the exported text model's inputs, ``{argument: array}`` as ``inputs``
    (the Trainer's) names them: token ids padded to the run's longest length (the batch
    dimension is symbolic).

    >>> prep = Preprocessing("lm", ["t"], "", [4], "lm", text={})
    >>> export_example(prep, {"input_ids": "input_ids", "positions": "positions"})["positions"]
    array([[0, 1, 2, 3]], dtype=int32)
    """
    length = int(prep.input_shape[0])
    ones = np.ones((1, length), np.int32)
    columns = {
        "input_ids": ones,
        "attention_mask": ones,
        "segment_ids": ones,
        "positions": np.arange(length, dtype=np.int32)[None],
    }
    return {argument: columns[column] for argument, column in inputs.items()}
