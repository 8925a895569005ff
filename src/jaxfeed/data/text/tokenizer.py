"""Loading and training ``tokenizers.Tokenizer`` objects (the Hub's ``tokenizer.json`` format)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

from jaxfeed._base import remote
from jaxfeed._base.extras import require

KINDS = ("bpe", "wordpiece", "unigram")
# the names of special tokens in a vocabulary, most usual first (the first one found is used)
EOS_NAMES = ("<eos>", "</s>", "<|endoftext|>", "<|eos|>", "[SEP]")
PAD_NAMES = ("<pad>", "[PAD]", "<|pad|>")
_BATCH = 1000


def tokenizers_module() -> Any:
    """The ``tokenizers`` package, or a ``MissingExtraError`` naming the ``text`` extra."""
    return require("tokenizers", "text", "jaxfeed.text")


def load_tokenizer(path_or_url: str | os.PathLike, storage_options: dict | None = None) -> Any:
    """The ``tokenizers.Tokenizer`` saved in a ``tokenizer.json`` (a file, or a folder holding
    one; local or any fsspec URL such as ``hf://``, ``s3://``, ``https://``).

    The file is parsed as JSON, never executed. A file that is not a tokenizer raises a
    ``ValueError`` naming it.

    >>> import tempfile, os
    >>> from jaxfeed import Dataset
    >>> ds = Dataset.from_dict({"text": ["a b c", "b c d"] * 10})
    >>> tok = train_tokenizer(ds, "text", vocab_size=30, kind="wordpiece")
    >>> path = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
    >>> tok.save(path)
    >>> load_tokenizer(path).encode("b c").ids == tok.encode("b c").ids
    True
    """
    tokenizers = tokenizers_module()
    path = os.fspath(path_or_url)
    if remote.is_remote(path):
        fs, inner = remote.filesystem(path, storage_options)
        if fs.isdir(inner):
            inner = inner.rstrip("/") + "/tokenizer.json"
            path = path.rstrip("/") + "/tokenizer.json"
        if not fs.exists(inner):
            raise FileNotFoundError(f"no tokenizer file at {path}")
        with fs.open(inner, "rb") as f:
            data = f.read()
    else:
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no tokenizer file at {path}")
        with open(path, "rb") as f:
            data = f.read()
    try:
        text = data.decode("utf-8")
        spec = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a tokenizer.json: it is not JSON text ({err})") from None
    except RecursionError:
        raise ValueError(
            f"{path} is not a tokenizer.json: its JSON nests too deeply to be read"
        ) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise ValueError(
            f"{path} is not a tokenizer.json: JSON without the 'model' object of the tokenizers "
            "format (a transformers tokenizer_config.json or vocab file is not enough)"
        )
    try:
        return tokenizers.Tokenizer.from_str(text)
    except Exception as err:  # the Rust side raises a plain Exception
        raise ValueError(f"{path} is not a valid tokenizer.json: {err}") from None
    except BaseException as err:  # a Rust panic (pyo3's PanicException is a BaseException)
        if type(err).__name__ != "PanicException":
            raise
        raise ValueError(f"{path} is not a valid tokenizer.json: {err}") from None


def special_tokens(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's special tokens and their ids (``[CLS]``, ``[SEP]``, ``<pad>``, ``<eos>``...).

    >>> from jaxfeed import Dataset
    >>> tok = train_tokenizer(Dataset.from_dict({"text": ["a b", "c d"]}), "text", vocab_size=30, kind="wordpiece")
    >>> special_tokens(tok)
    {'[PAD]': 0, '[UNK]': 1, '[CLS]': 2, '[SEP]': 3, '[MASK]': 4}
    """
    added = tokenizer.get_added_tokens_decoder()
    return {t.content: int(i) for i, t in sorted(added.items()) if t.special}


def _texts(dataset: Any, column: str) -> Iterator[list[str]]:
    """The column's strings in batches, each checked (None, non-text are errors naming the row);
    a text over :data:`PIECE_CHARS` characters in pieces (:func:`text_pieces`), and a batch at
    most about :data:`BATCH_CHARS` characters: the trainer holds a few hundred bytes per
    character of a text while it splits it into words (one 5 MB line took 700 MB whole), and
    words never cross a piece's boundary, so the counts it learns from are the same."""
    if column not in dataset.column_names:
        raise ValueError(
            f"column {column!r} is not in the dataset; its columns are {dataset.column_names}"
        )
    table = dataset.with_format("arrow")
    for lo in range(0, dataset.num_rows, _BATCH):
        values = check_texts(table[lo : lo + _BATCH][column].to_pylist(), column, lo)
        batch: list[str] = []
        size = 0
        for text in values:
            for piece in text_pieces(text, PIECE_CHARS) if len(text) > PIECE_CHARS else (text,):
                batch.append(piece)
                size += len(piece)
                if size >= BATCH_CHARS:
                    yield batch
                    batch, size = [], 0
        if batch:
            yield batch


# A text longer than PIECE_CHARS is read in pieces of about that many characters, cut where a
# word ends; a tokenizer batch holds about BATCH_CHARS characters at most.
PIECE_CHARS = 1 << 16
BATCH_CHARS = 1 << 20
_LAST_WORD_END = re.compile(r".*\S(?=\s)", re.S)  # the last non-space followed by a space


def text_pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, each cut where a word
    ends (before the spaces that follow it, which go with the next word as every pre-tokenizer
    expects); a stretch of ``size // 2`` characters without a space is cut where it reaches
    ``size``.

    >>> list(text_pieces("the cat sat on the mat", size=8))
    ['the cat', ' sat on', ' the mat']
    >>> "".join(text_pieces("x" * 20, size=8)) == "x" * 20
    True
    """
    start, n = 0, len(text)
    while n - start > size:
        end = start + size
        found = _LAST_WORD_END.match(text, start + size // 2, end + 1)
        cut = found.end() if found else end
        yield text[start:cut]
        start = cut
    yield text[start:]


# how to drop the rows tokenize refuses (load_dataset("text") keeps a blank line as an empty row)
EMPTY_FIX = (
    'load_dataset("text") keeps blank lines as empty rows, as datasets does; drop them first: '
    "ds = ds.filter(lambda row: row[{column!r}].strip() != '')"
)


def check_texts(values: Any, column: str, first: int = 0, rows: Any = None) -> list[str]:
    """``values`` as a list of non-empty str, or an error naming the column and row.

    >>> check_texts(["a", None], "text")
    Traceback (most recent call last):
    ...
    ValueError: column 'text', row 1: expected a non-empty string, got None
    """
    out = list(values)
    for i, v in enumerate(out):
        if type(v) is str and v:
            continue
        row = first + i if rows is None else int(rows[i])
        if isinstance(v, bytes | bytearray | memoryview):
            try:
                out[i] = bytes(v).decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"column {column!r}, row {row}: bytes that are not UTF-8 text ({err})"
                ) from None
            if out[i]:
                continue
            v = out[i]
        elif isinstance(v, str) and v:  # a str subclass (numpy's str_)
            out[i] = str(v)
            continue
        what = f"an empty string ({EMPTY_FIX.format(column=column)})" if v == "" else repr(v)[:80]
        raise ValueError(f"column {column!r}, row {row}: expected a non-empty string, got {what}")
    return out


def train_tokenizer(
    dataset: Any,
    column: str = "text",
    vocab_size: int = 8000,
    kind: str = "bpe",
    *,
    min_frequency: int = 2,
    lowercase: bool = False,
) -> Any:
    """A tokenizer trained on ``dataset[column]``, in memory, with no download.

    ``kind``: ``"bpe"`` (byte-level, as GPT-2: every text encodes, ``<eos>`` appended),
    ``"wordpiece"`` (as BERT: ``[CLS] ... [SEP]``, ``[UNK]`` for unknown pieces) or ``"unigram"``
    (SentencePiece-style, ``<eos>`` appended). The pad token (``<pad>`` / ``[PAD]``) is id 0.
    Returns a ``tokenizers.Tokenizer``: ``.save("tokenizer.json")`` writes the Hub's format.

    >>> from jaxfeed import Dataset
    >>> ds = Dataset.from_dict({"text": ["the cat sat", "the dog sat", "a cat ran"] * 20})
    >>> tok = train_tokenizer(ds, "text", vocab_size=300, kind="bpe")
    >>> tok.decode(tok.encode("the cat ran").ids)
    'the cat ran'
    >>> tok.encode("the cat").tokens[-1], tok.token_to_id("<pad>")
    ('<eos>', 0)
    """
    tokenizers = tokenizers_module()
    from tokenizers import processors  # noqa: PLC0415 (optional: the text extra)

    if kind not in KINDS:
        raise ValueError(f"train_tokenizer: kind must be one of {KINDS}, got {kind!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"train_tokenizer: vocab_size must be an int >= 2, got {vocab_size!r}")
    if kind == "bpe" and vocab_size <= 260:
        raise ValueError(
            f"train_tokenizer: a byte-level BPE starts from 256 bytes and 4 special tokens, so "
            f"vocab_size must be above 260, got {vocab_size}"
        )
    if dataset.num_rows == 0:
        raise ValueError("train_tokenizer: the dataset has no rows to learn from")
    tok, trainer, specials, template = _untrained(
        tokenizers, kind, vocab_size, min_frequency, lowercase
    )
    tok.train_from_iterator(_texts(dataset, column), trainer=trainer, length=dataset.num_rows)
    ids = {t: tok.token_to_id(t) for t in specials}
    used = [t for t in specials if t in template[2].split()]
    tok.post_processor = processors.TemplateProcessing(
        single=template[0], pair=template[1], special_tokens=[(t, ids[t]) for t in used]
    )
    return tok


def _untrained(
    tokenizers: Any, kind: str, vocab_size: int, min_frequency: int, lowercase: bool
) -> tuple[Any, Any, list[str], tuple[str, str, str]]:
    """An untrained tokenizer of ``kind``, its trainer, its special tokens and its post-processing
    template (single, pair, the specials it uses)."""
    from tokenizers import (  # noqa: PLC0415 (optional: the text extra)
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    lower = [normalizers.Lowercase()] if lowercase else []
    if kind == "bpe":
        specials = ["<pad>", "<unk>", "<bos>", "<eos>"]
        tok = tokenizers.Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([normalizers.NFC(), *lower])
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        template = ("$A <eos>", "$A <eos> $B:1 <eos>:1", "<eos>")
    elif kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            show_progress=False,
        )
        template = ("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", "[CLS] [SEP]")
    else:
        specials = ["<pad>", "<unk>", "<bos>", "<eos>"]
        tok = tokenizers.Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), *lower])
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            unk_token="<unk>",
            show_progress=False,
        )
        template = ("$A <eos>", "$A <eos> $B:1 <eos>:1", "<eos>")
    return tok, trainer, specials, template
