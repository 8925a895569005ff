"""The input kinds by name, and the one place a run's kind is chosen: :func:`kind_for` (a new
run: the columns' kind, the task, ``--model``, the checkpoint) and :func:`kind_of` (a saved run's
preprocessing).

>>> kind_for("image", "classification", None)
ImageKind('image')
>>> kind_of(Preprocessing("lm", ["text"], "", [8], "lm", text={}))
LMKind('lm')
"""

from __future__ import annotations

from typing import Any

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.config.model_spec import ModelSpec
from jaxfeed.recipes.kinds.array import ArrayKind
from jaxfeed.recipes.kinds.audio import AudioKind
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.hub import HubKind
from jaxfeed.recipes.kinds.image import ImageKind
from jaxfeed.recipes.kinds.lm import LMKind
from jaxfeed.recipes.kinds.table import TableKind
from jaxfeed.recipes.kinds.text import TextKind
from jaxfeed.recipes.spec import Preprocessing

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (ImageKind(), ArrayKind(), TableKind(), AudioKind(), TextKind(), LMKind())
}


def kind_named(name: str | None) -> Kind:
    """The kind a saved preprocessing names (``prep.kind``); one jaxfeed has not is refused when
    it plans (a run folder of another kind: nothing it reads fits).

    >>> kind_named("table").default_model, kind_named(None).name
    ('mlp', 'None')
    """
    return KINDS.get(name) or Kind(str(name))  # a kind jaxfeed cannot learn from: its plan says so


def check_options(config: RunConfig) -> None:
    """The kinds' options that can be checked before any data is read or anything written
    (``--task lm`` with a label column, a ``--tokenizer`` that does not load)."""
    TextKind.check_options(config)


def kind_for(columns_kind: str, task: str | None, model: ModelSpec | None,
             checkpoint: Any = None) -> Kind:  # fmt: skip
    """The kind of a new run: its input columns' kind (``lm`` for ``--task lm``), wrapped in a
    :class:`HubKind` when ``--model`` is a Hub checkpoint (``checkpoint``: it, opened)."""
    kind = kind_named("lm" if task == "lm" and columns_kind == "text" else columns_kind)
    if checkpoint is not None or (model is not None and model.source == "hub"):
        return HubKind(kind, checkpoint)
    return kind


def kind_of(prep: Preprocessing, checkpoint: Any = None, model: ModelSpec | None = None) -> Kind:
    """The kind of a saved run (eval, predict, resume): its preprocessing's ``kind``, wrapped in
    a :class:`HubKind` for a Hub model (``checkpoint`` opened, or ``model`` naming one)."""
    kind = kind_named(prep.kind)
    if checkpoint is not None or (model is not None and model.source == "hub"):
        return HubKind(kind, checkpoint)
    return kind


__all__ = ["KINDS", "HubKind", "Kind", "check_options", "kind_for", "kind_named", "kind_of"]
