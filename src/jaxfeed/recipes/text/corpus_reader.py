"""A ``.txt`` corpus read as the rows of a ``text`` column (:func:`read_corpus`, as
``--sample-by`` samples it: :mod:`jaxfeed.recipes.text.corpus`)."""

from __future__ import annotations

from pathlib import Path

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.load.load import load_dataset
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.text.corpus import CONCAT, CORPUS_MODES


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
