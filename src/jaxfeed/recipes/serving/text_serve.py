"""A text run served: ``eval``, ``predict`` and ``generate`` of the command on text.

A classifier (or regressor) of text serves ``model/``, its export, whose inputs are token ids:
the run's ``tokenizer.json`` (data for the ``tokenizers`` library, never code) turns texts into
``input_ids`` and ``attention_mask`` padded to the run's longest length (longer texts are cut to
it, as in training: :class:`jaxfeed.recipes.kinds.text.TextKind`); predict reads its texts here
(:func:`text_batches`). A language model is evaluated (perplexity) and generates from ``checkpoints/`` with
jaxfeed's own ``TransformerLM`` rebuilt by name: nothing is imported from the run folder (a model
file of the user's only with ``--trust-code``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxfeed import DataLoader, load_dataset
from jaxfeed.data.formats.files import file_format
from jaxfeed.data.load.folder import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.data import no_such_path
from jaxfeed.recipes.text.corpus import CORPUS_SUFFIXES
from jaxfeed.recipes.text.text_columns import check_text_column
from jaxfeed.recipes.text.tokenizer import attach_tokenizer, token_lengths

if TYPE_CHECKING:  # the saved run is handed in (its reader sits above this module)
    from jaxfeed.recipes.serving.saved import SavedRun

NAME_CHARS = 50  # predict's plain output names a text given on the command line by its start


# ---------------------------------------------------------------------------------- inputs
def text_batches(
    inputs: list[str], column: str, size: int
) -> Iterator[tuple[list[str], list[str]]]:
    """``(names, texts)`` batches of what ``predict`` was given: a ``.txt`` file (one text per
    non-blank line, named ``FILE:LINE``), a table with the run's text column (``FILE:ROW``), or
    the text itself (named by its first characters).

    >>> list(text_batches(["a fine film", "dull"], "review", 1))
    [(['a fine film'], ['a fine film']), (['dull'], ['dull'])]
    """
    names: list[str] = []
    texts: list[str] = []
    for name, value in _texts(inputs, column):
        names.append(name)
        texts.append(value)
        if len(texts) == size:
            yield names, texts
            names, texts = [], []
    if texts:
        yield names, texts


def _texts(inputs: list[str], column: str) -> Iterator[tuple[str, str]]:
    for given in inputs:
        path = Path(given)
        try:
            folder, file = path.is_dir(), path.is_file()
        except (OSError, ValueError):  # a name too long for a path, a NUL: a text
            folder = file = False
        if folder:
            raise ConfigError(
                f"{given} is a folder; this run reads texts: give a text, .txt files (one text a "
                f"line) or tables with a {column!r} column"
            )
        if file and path.suffix.lower() in CORPUS_SUFFIXES:
            data = path.read_bytes()
            try:
                lines = data.decode("utf-8").split("\n")
            except UnicodeDecodeError as err:
                line = data.count(b"\n", 0, err.start) + 1
                raise ConfigError(f"{given}: not UTF-8 text (line {line})") from None
            for number, line in enumerate(lines, 1):
                if line.strip():
                    yield f"{given}:{number}", line.rstrip("\r")
        elif file and file_format(path) is not None:
            yield from _table_texts(path, column)
        elif file:  # an existing file is never taken for a text
            suffix = path.suffix.lower()
            kind = (
                "an image" if suffix in IMAGE_EXTENSIONS
                else "an audio file" if suffix in AUDIO_EXTENSIONS
                else f"a {suffix} file" if suffix
                else "a file that is neither .txt nor a table"
            )  # fmt: skip
            raise ConfigError(
                f"{given} is {kind}; this run reads texts: give a text, .txt files (one text a "
                f"line) or tables with a {column!r} column"
            )
        elif path.suffix.lower() in (
            *CORPUS_SUFFIXES,
            ".csv",
            ".jsonl",
            ".json",
            ".parquet",
        ):
            raise ConfigError(no_such_path(given))
        elif not given.strip():
            raise ConfigError("an empty text: give a text, .txt files or tables")
        else:
            yield given, given  # the whole text is its key (--json, --output): never two alike


def shown_input(name: str) -> str:
    """How predict's plain output names an input: a text given on the command line by its first
    characters (``--json`` and ``--output`` keep it whole); a path, or a file's line or row, as
    it is.

    >>> shown_input("a short text"), shown_input("x" * 60)[-5:], len(shown_input("x" * 60))
    ('a short text', 'xx...', 50)
    """
    if len(name) <= NAME_CHARS or os.path.exists(name.rsplit(":", 1)[0]) or os.path.exists(name):
        return name
    return name[: NAME_CHARS - 3] + "..."


def _table_texts(path: Path, column: str) -> Iterator[tuple[str, str]]:
    try:
        ds = load_dataset(str(path), split="train")
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read {path}: {str(err).splitlines()[0]}") from err
    if column not in ds.features:
        raise ConfigError(
            f"{path} has no column {column!r} (the run's text column); its columns are "
            f"{list(ds.features)[:12]}"
        )
    for i, value in enumerate(ds.select_columns([column]).data.column(column).to_pylist()):
        if value is None or not str(value).strip():
            raise ConfigError(f"{path}, row {i}: the text column {column!r} is empty")
        yield f"{path}:{i}", value


# ---------------------------------------------------------------------------------- language models
def lm_trainer(saved: SavedRun, checkpoint: str) -> tuple[Any, dict]:
    """The run's language model rebuilt (jaxfeed's own by name) with ``checkpoint`` restored."""
    trainer = saved.trainer()
    meta = saved.restore(trainer, checkpoint)
    return trainer, {"step": int(meta["step"]), "epoch": int(meta["epoch"]), "which": checkpoint,
                     "source": "checkpoints/"}  # fmt: skip


def evaluate_lm(saved: SavedRun, ds: Any, split: str, checkpoint: str) -> dict[str, Any]:
    """Loss (mean over real tokens), perplexity and token accuracy of ``ds`` (raw texts), packed
    as in training."""
    run, record, prep, kind = saved.out, saved.record, saved.prep, saved.kind
    attach_tokenizer(prep, run)
    ds, _ = check_text_column(ds, prep.text["column"], f"split {split!r}")
    texts = int(ds.num_rows)
    tokens = kind.prepare(prep, ds)  # concatenated: windows of --seq-len tokens
    trainer, which = lm_trainer(saved, checkpoint)
    size = min(record.options.batch_size, max(tokens.num_rows, 1))
    loader = DataLoader(tokens, size, transform=prep, **kind.loader_options(prep, train=True))
    figures = trainer.evaluate(loader)
    lengths = token_lengths(tokens)
    return {
        "run": str(run),
        "checkpoint": which,
        "split": split,
        "task": "lm",
        "rows": texts,
        "windows": int(tokens.num_rows),
        "tokens": int(lengths.sum()),
        **{k: round(float(v), 6) for k, v in figures.items()},
    }


def format_lm(result: dict[str, Any]) -> str:
    ck = result["checkpoint"]
    head = (
        f"checkpoint step {ck['step']} (epoch {ck['epoch']}, {ck['which']}, from {ck['source']}), "
        f"split {result['split']!r}, {result['rows']:,} texts, {result['tokens']:,} tokens"
        + (f" in {result['windows']:,} windows" if result.get("windows") else "")
    )
    figures = "  ".join(
        f"{k.replace('_', ' ')} {result[k]:.4f}"
        for k in ("loss", "perplexity", "token_accuracy")
        if k in result
    )
    return f"{head}\n{figures}"
