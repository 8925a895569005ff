"""What a LoRA fine-tune asks for, checked without JAX: :class:`LoRA` (rank, alpha, targets,
dropout), the quantization modes of the frozen weights (:data:`QUANTIZE`) and
:func:`check_adapters` (``from_pretrained``'s ``lora=``, ``adapter=`` and ``quantize=`` together).
Each refusal is a :class:`SettingError` naming the argument, so the command can name its flag.
A module of its own (no JAX, no Flax) so that ``jaxfeed train`` checks its flags before it starts
JAX.

>>> LoRA(rank=4).alpha, LoRA(rank=4).scaling  # alpha defaults to twice the rank
(8, 2.0)
>>> LoRA(rank=0)
Traceback (most recent call last):
...
jaxfeed.models.lora_settings.SettingError: LoRA rank must be a positive int, got 0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

QUANTIZE = ("int8",)  # the modes of from_pretrained(quantize=) and jaxfeed train --quantize
ALPHA_PER_RANK = 2  # LoRA's alpha when none is given: 2 x rank, a scale of 2 whatever the rank
MAX_ALPHA = 1e6  # past it the update overflows float32 (1e300 gave NaN logits); --lora-alpha's bound


class SettingError(ValueError):
    """A LoRA or quantization setting refused; ``argument`` names it (``rank``, ``alpha``,
    ``targets``, ``dropout``, ``quantize``)."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class LoRA:
    """Low-rank adapters to add to a model's linear layers (PEFT's ``LoraConfig``).

    ``rank`` (PEFT's ``r``) and ``alpha`` (``lora_alpha``): the update is ``A B * alpha / rank``;
    ``alpha`` defaults to twice the rank (:data:`ALPHA_PER_RANK`: the update's scale stays 2 at
    any rank, so a learning rate carries over; ``jaxfeed train --lora`` uses the same default).
    ``targets``: module names of the checkpoint (``"q_proj"``, ``"value"``, ``"c_attn"``), each
    matching every module whose dotted name ends with it, as PEFT's ``target_modules``; None takes
    the family's query and value projections. ``dropout``: on the adapters' input, in training.

    >>> LoRA(targets=["q_proj", "v_proj"]).targets
    ('q_proj', 'v_proj')
    >>> LoRA(rank=4, alpha=16).scaling
    4.0
    """

    rank: int = 8
    alpha: float | None = None
    targets: Sequence[str] | None = None
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise SettingError("rank", f"LoRA rank must be a positive int, got {self.rank!r}")
        alpha = self.alpha
        if alpha is None:
            object.__setattr__(self, "alpha", ALPHA_PER_RANK * self.rank)
        elif not _number(alpha) or not math.isfinite(alpha) or not 0 < alpha <= MAX_ALPHA:
            raise SettingError(
                "alpha", f"LoRA alpha must be a finite number above 0, at most {MAX_ALPHA:g}, got "
                f"{alpha!r}"
            )
        dropout = self.dropout
        if not _number(dropout) or not (0.0 <= dropout < 1.0):
            raise SettingError("dropout", f"LoRA dropout must be in [0, 1), got {dropout!r}")
        targets = self.targets
        if targets is not None:
            items = [targets] if isinstance(targets, str) else list(targets)
            names = tuple(part.strip() for t in items for part in str(t).split(","))
            if not names or any(not n for n in names):
                raise SettingError(
                    "targets",
                    f"LoRA targets must be module names (q_proj, value, ...), got {self.targets!r}",
                )
            object.__setattr__(self, "targets", names)

    @property
    def scaling(self) -> float:
        """``alpha / rank``, the factor of the adapters' update."""
        return float(self.alpha) / self.rank  # type: ignore[arg-type]


def check_adapters(lora: Any, adapter: Any, quantize: Any) -> None:
    """``from_pretrained``'s ``lora=``, ``adapter=`` and ``quantize=`` together: a :class:`LoRA`
    or nothing, not both with an adapter, a known ``quantize`` mode that has adapters to train.

    >>> check_adapters(LoRA(), None, "int8")
    >>> check_adapters(None, None, "int8")
    Traceback (most recent call last):
    ...
    jaxfeed.models.lora_settings.SettingError: quantize='int8' freezes the weights: give lora= (or adapter=) so that something trains
    """
    if lora is not None and not isinstance(lora, LoRA):
        raise TypeError(f"lora= takes a jaxfeed.models.LoRA, got {type(lora).__name__}")
    if lora is not None and adapter is not None:
        raise SettingError(
            "adapter", "give lora= (new adapters) or adapter= (saved ones), not both"
        )
    if quantize is not None and quantize not in QUANTIZE:
        raise SettingError(
            "quantize", f"quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}"
        )
    if quantize is not None and lora is None and adapter is None:
        raise SettingError(
            "quantize",
            f"quantize={quantize!r} freezes the weights: give lora= (or adapter=) so that "
            "something trains",
        )


__all__ = ["ALPHA_PER_RANK", "MAX_ALPHA", "QUANTIZE", "LoRA", "SettingError", "check_adapters"]
