"""The model families ``from_pretrained`` knows, by ``config.json`` ``model_type``: one import
line per family module (each defines ``FAMILY``).

>>> {"bert", "vit", "audio-spectrogram-transformer"} <= set(FAMILIES)
True
"""

from __future__ import annotations

from jaxfeed.models.hub.ast import FAMILY as AST
from jaxfeed.models.hub.bert import FAMILY as BERT
from jaxfeed.models.hub.config_check import check_config
from jaxfeed.models.hub.distilbert import FAMILY as DISTILBERT
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.files import CheckpointError
from jaxfeed.models.hub.gpt2 import FAMILY as GPT2
from jaxfeed.models.hub.llama import FAMILY as LLAMA
from jaxfeed.models.hub.mistral import FAMILY as MISTRAL
from jaxfeed.models.hub.qwen2 import FAMILY as QWEN2
from jaxfeed.models.hub.qwen3 import FAMILY as QWEN3
from jaxfeed.models.hub.roberta import FAMILY as ROBERTA
from jaxfeed.models.hub.vit import FAMILY as VIT

_ALL: list[Family] = [
    BERT,
    ROBERTA,
    DISTILBERT,
    VIT,
    AST,
    GPT2,
    LLAMA,
    MISTRAL,
    QWEN2,
    QWEN3,
]
FAMILIES: dict[str, Family] = {t: family for family in _ALL for t in family.model_types}


def family_of(config: dict, where: object = None) -> Family:
    """The family of a config's ``model_type``, or an error listing the supported ones; the
    fields of a config read from the file ``where`` are checked for that family
    (:func:`~jaxfeed.models.hub.config_check.check_config`).

    >>> family_of({"model_type": "bert"}).default_task
    'feature-extraction'
    >>> family_of({"model_type": "t5"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    jaxfeed.models.hub.files.CheckpointError: config.json: model_type 't5' is not supported; jaxfeed loads audio-spectrogram-transformer, bert, ...
    """
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise CheckpointError(
            f"{where or 'config.json'}: model_type {model_type!r} is not supported; jaxfeed loads "
            f"{', '.join(sorted(FAMILIES))}"
        )
    if where is not None:
        check_config(config, family, where)
    return family


__all__ = ["FAMILIES", "Family", "family_of"]
