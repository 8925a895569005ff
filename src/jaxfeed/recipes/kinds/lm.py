"""Language models (``--task lm``): the text itself is the target, its token rows packed into
windows of ``--seq-len``; an epoch counts texts; perplexity is the figure; ``jaxfeed generate``
uses the run."""

from __future__ import annotations

from typing import Any

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.text import TextKind
from jaxfeed.recipes.objectives import LM_LOSS, lm_metrics
from jaxfeed.recipes.spec import Preprocessing


class LMKind(TextKind):
    """A causal language model of a text column (see the module docstring).

    >>> kind = LMKind()
    >>> kind.unit, kind.describe(Preprocessing("lm", ["t"], "", [8], "lm", text={}), None)
    ('texts', 'inputs: packed rows of 8 token ids, target: the next token')
    >>> kind.next_step("runs/a")
    'generate:   jaxfeed generate runs/a PROMPT'
    """

    unit = "texts"  # an LM's epochs count packed rows of its texts
    scores_pretrained = True  # its perplexity before fine-tuning, in the summary

    def __init__(self) -> None:
        super().__init__("lm")

    def describe(self, prep: Preprocessing, run_data: Any) -> str:
        return f"inputs: packed rows of {prep.input_shape[0]} token ids, target: the next token"

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return {"preprocess": None, "targets": None, "loss": LM_LOSS,
                "metrics": lm_metrics(config)}  # fmt: skip

    def next_step(self, quoted_out: str) -> str:
        return f"generate:   jaxfeed generate {quoted_out} PROMPT"
