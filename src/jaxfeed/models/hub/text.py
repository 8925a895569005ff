"""A text checkpoint's tokenizer: ``tokenizer.json`` as a ``tokenizers.Tokenizer`` with the
checkpoint's truncation (``tokenizer_config.json``'s ``model_max_length``, else the model's
positions) and padding (its pad token, padding side) switched on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxfeed._base.extras import require
from jaxfeed.models.hub.files import CheckpointError, checkpoint_file, read_checkpoint_json

HUGE = 10**8  # transformers writes int(1e30) when a tokenizer has no limit


def _token(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def text_preprocessor(folder: Path, config: dict) -> Any:
    """The checkpoint's ``tokenizers.Tokenizer``, truncating and padding as it was trained to."""
    tokenizers = require("tokenizers", "text", "the checkpoint's tokenizer")
    path = folder / "tokenizer.json"
    if checkpoint_file(folder, path.name) is None:
        raise CheckpointError(
            f"{folder} has no tokenizer.json (a fast tokenizer file); save one with "
            "transformers' AutoTokenizer.from_pretrained(...).save_pretrained(folder)"
        )
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on bad files
        raise CheckpointError(f"{path} is not a tokenizers tokenizer.json: {err}") from None
    vocab = config.get("vocab_size")
    if isinstance(vocab, int) and tokenizer.get_vocab_size() > vocab:
        raise CheckpointError(
            f"{path} has {tokenizer.get_vocab_size():,} tokens, more than {folder / 'config.json'}'s "
            f"vocab_size {vocab:,}: the model has no embedding for the others; use the "
            "tokenizer the checkpoint was trained with"
        )
    settings_path = folder / "tokenizer_config.json"
    settings = read_checkpoint_json(folder, settings_path.name, "tokenizer config") or {}
    sides = {}
    for key in ("truncation_side", "padding_side"):
        sides[key] = settings.get(key, "right")
        if sides[key] not in ("left", "right"):
            raise CheckpointError(
                f"{settings_path}: {key} must be 'left' or 'right', got {sides[key]!r}"
            )
    limit = settings.get("model_max_length")
    if not isinstance(limit, int) or limit <= 0 or limit >= HUGE:
        positions = config.get("max_position_embeddings")
        offset = 2 if config.get("model_type") in ("roberta", "xlm-roberta") else 0
        limit = positions - offset if isinstance(positions, int) else None
    if limit and limit > 0:
        tokenizer.enable_truncation(max_length=int(limit), direction=sides["truncation_side"])
    pad = _token(settings.get("pad_token"))
    pad_id = tokenizer.token_to_id(pad) if pad is not None else None
    if pad_id is None and isinstance(config.get("pad_token_id"), int):
        pad_id = config["pad_token_id"]
        pad = tokenizer.id_to_token(pad_id)
    if pad_id is not None:
        if not 0 <= pad_id < (vocab if isinstance(vocab, int) else tokenizer.get_vocab_size()):
            raise CheckpointError(
                f"{folder / 'config.json'}: pad_token_id {pad_id} is outside the vocabulary "
                f"(vocab_size {vocab}); set it to the id of the tokenizer's padding token"
            )
        tokenizer.enable_padding(pad_id=int(pad_id), pad_token=pad or "[PAD]",
                                 direction=sides["padding_side"])  # fmt: skip
    return tokenizer
