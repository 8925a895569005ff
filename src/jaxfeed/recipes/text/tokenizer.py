"""A text run's tokenizer: ``--tokenizer FILE`` loaded, the run's ``tokenizer.json`` written and
attached (checked against the SHA-256 and vocabulary the run recorded), and texts turned into the
token batches the served model takes. A ``tokenizer.json`` is data read by the ``tokenizers``
library, never code.

>>> token_lengths(Dataset.from_dict({"input_ids": [[1, 2, 3], [4]]})).tolist()
[3, 1]
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
from jaxfeed.data.text.tokenizer import EOS_NAMES as EOS_NAMES
from jaxfeed.data.text.tokenizer import PAD_NAMES as PAD_NAMES
from jaxfeed.data.text.tokenizer import check_texts
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.serve.spec import SpecError
from jaxfeed.serve.spec import token_batch as spec_token_batch

TOKENIZER_FILE = "tokenizer.json"
# a tokenizer's end-of-sequence token, by name (as jaxfeed.train.generation.EOS_TOKENS)


def load_tokenizer_option(path: str) -> Any:
    """``--tokenizer FILE`` as a ``tokenizers.Tokenizer``, or one clear error naming it."""
    from jaxfeed.text import load_tokenizer  # import cost: JAX via jaxfeed.text; detection must not

    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--tokenizer {path}: {err}") from None
    except ImportError as err:
        raise ConfigError(f"--tokenizer: {err}") from None


def special_id(tokenizer: Any, names: tuple[str, ...]) -> int | None:
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


def tokenizer_bytes(source: Any, tokenizer: Any) -> bytes:
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
    data = tokenizer_bytes(source, prep.tokenizer)
    recorded = prep.text.get("sha256")
    if isinstance(recorded, str) and hashlib.sha256(data).hexdigest() != recorded:
        raise ConfigError(
            f"--tokenizer {source}: the file changed while the run was being prepared; train again"
        )
    atomic_write(target, data)


def token_batch(prep: Preprocessing, texts: list[str]) -> dict[str, np.ndarray]:
    """``texts`` tokenized as in training (cut to the run's ``--seq-len`` with the tokenizer's
    own truncation, special tokens kept) and padded with its pad id to the longest of them: the
    inputs the exported classifier takes (``input_ids`` and ``attention_mask``, int32), made by
    the function the export's own preprocessing uses
    (:func:`jaxfeed.serve.spec.token_batch`)."""
    try:
        batch = spec_token_batch(
            prep.tokenizer, texts, int(prep.text["max_length"]), int(prep.text["pad_id"]),
            side=prep.text.get("truncation_side", "right"),
        )  # fmt: skip
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
