"""``--model hf:ORG/NAME`` or ``--model ./folder``: fine-tune a Hub checkpoint from the command.

The checkpoint itself (opened, hashed, checked, its model built) is
:mod:`jaxfeed.recipes.hub_checkpoint`; what a run does with it by input kind is
:class:`jaxfeed.recipes.kinds.hub.HubKind`. This module keeps the names earlier code imported from
here (``recipes/train.py``, ``recipes/hub_export.py``); the planning ones go through the kinds.

>>> is_hub_model("hf:google/vit-base-patch16-224"), is_hub_model("cnn"), is_hub_model("m.py:Net")
(True, False, False)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from jaxfeed.recipes import hub_checkpoint
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.config.model_spec import HUB_PREFIX as HUB_PREFIX
from jaxfeed.recipes.config.model_spec import is_hub_model as is_hub_model
from jaxfeed.recipes.hub_checkpoint import FINE_TUNE as FINE_TUNE
from jaxfeed.recipes.hub_checkpoint import PREPROCESSOR_FILE as PREPROCESSOR_FILE
from jaxfeed.recipes.hub_checkpoint import AudioModel as AudioModel
from jaxfeed.recipes.hub_checkpoint import Checkpoint as Checkpoint
from jaxfeed.recipes.hub_checkpoint import ImageModel as ImageModel
from jaxfeed.recipes.hub_checkpoint import before_fine_tuning as before_fine_tuning
from jaxfeed.recipes.hub_checkpoint import check_unchanged as check_unchanged
from jaxfeed.recipes.hub_checkpoint import config_eos as config_eos
from jaxfeed.recipes.hub_checkpoint import context_of as context_of
from jaxfeed.recipes.hub_checkpoint import copy_preprocessor as copy_preprocessor
from jaxfeed.recipes.hub_checkpoint import fine_tune_defaults as fine_tune_defaults
from jaxfeed.recipes.hub_checkpoint import hub_model as hub_model
from jaxfeed.recipes.hub_checkpoint import image_options as image_options
from jaxfeed.recipes.hub_checkpoint import open_checkpoint as open_checkpoint
from jaxfeed.recipes.hub_checkpoint import perplexity_line as perplexity_line
from jaxfeed.recipes.spec import Preprocessing


def check_data(checkpoint: Checkpoint, kind: str) -> None:
    """The checkpoint takes the data's ``kind`` (its Hub task: the kind's)."""
    from jaxfeed.recipes.kinds.registry import kind_for  # import cost: the kinds, JAX

    task = kind_for(kind, None, None).hub_task
    hub_checkpoint.check_data(checkpoint, kind, task)


def plan_text(checkpoint: Checkpoint, train: Any, column: str, label: str | None, task: str,
              config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
    """The text kind's plan with the checkpoint's tokenizer (``task``: ``lm`` or a label's)."""
    from jaxfeed.recipes.kinds.registry import kind_for  # import cost: the kinds, JAX

    kind = kind_for("text", task, None)
    return kind.plan_pretrained(checkpoint, _RunData(train, column, label, task, None), config)


def plan_audio(checkpoint: Checkpoint, data: Any, column: str, label: str, task: str,
               config: RunConfig) -> tuple[Preprocessing, list[str]]:  # fmt: skip
    """The audio kind's plan with the checkpoint's front end."""
    from jaxfeed.recipes.kinds.registry import kind_for  # import cost: the kinds, JAX

    kind = kind_for("audio", task, None)
    return kind.plan_pretrained(checkpoint, _RunData(None, column, label, task, data), config)


class _RunData:
    """The parts of a :class:`jaxfeed.recipes.run.RunData` a kind's plan reads."""

    def __init__(self, train: Any, column: str, label: Any, task: str, data: Any) -> None:
        self.task = task
        self.splits = SimpleNamespace(train=train)
        self.columns = SimpleNamespace(inputs=[column], label=label, excluded=[])
        self.source = SimpleNamespace(data=data)
