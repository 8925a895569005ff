"""A text checkpoint's tokenizer: ``tokenizer.json`` as a ``tokenizers.Tokenizer`` with the
checkpoint's truncation (``tokenizer_config.json``'s ``model_max_length``, else the model's
positions) and padding (its pad token, padding side) switched on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxfeed._base.extras import require
from jaxfeed._base.files import check_inside
from jaxfeed.models.hub.files import CheckpointError, read_json

HUGE = 10**8  # transformers writes int(1e30) when a tokenizer has no limit


def _token(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def text_preprocessor(folder: Path, config: dict) -> Any:
    """The checkpoint's ``tokenizers.Tokenizer``, truncating and padding as it was trained to."""
    tokenizers = require("tokenizers", "text", "the checkpoint's tokenizer")
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(
            f"{folder} has no tokenizer.json (a fast tokenizer file); save one with "
            "transformers' AutoTokenizer.from_pretrained(...).save_pretrained(folder)"
        )
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(check_inside(folder, path, "tokenizer")))
    except Exception as err:  # tokenizers raises a bare Exception on bad files
        raise CheckpointError(f"{path} is not a tokenizers tokenizer.json: {err}") from None
    settings_path = folder / "tokenizer_config.json"
    settings = read_json(settings_path, "tokenizer config") if settings_path.is_file() else {}
    if not isinstance(settings, dict):
        raise CheckpointError(f"{settings_path} must hold a JSON object")
    limit = settings.get("model_max_length")
    if not isinstance(limit, int) or limit <= 0 or limit >= HUGE:
        positions = config.get("max_position_embeddings")
        offset = 2 if config.get("model_type") in ("roberta", "xlm-roberta") else 0
        limit = positions - offset if isinstance(positions, int) else None
    if limit:
        tokenizer.enable_truncation(max_length=int(limit),
                                    direction=settings.get("truncation_side", "right"))  # fmt: skip
    pad = _token(settings.get("pad_token"))
    pad_id = tokenizer.token_to_id(pad) if pad is not None else None
    if pad_id is None and isinstance(config.get("pad_token_id"), int):
        pad_id = config["pad_token_id"]
        pad = tokenizer.id_to_token(pad_id)
    if pad_id is not None:
        tokenizer.enable_padding(pad_id=int(pad_id), pad_token=pad or "[PAD]",
                                 direction=settings.get("padding_side", "right"))  # fmt: skip
    return tokenizer
