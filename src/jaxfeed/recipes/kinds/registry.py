"""The input kinds by name, and the one place a run's kind is chosen: :func:`kind_for` (a new
run: the columns' kind and the task) and :func:`kind_of` (a saved run's
preprocessing).

>>> kind_for("image", "classification")
ImageKind('image')
>>> kind_of(Preprocessing("lm", ["text"], "", [8], "lm", text={}))
LMKind('lm')
"""

from __future__ import annotations

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.array import ArrayKind
from jaxfeed.recipes.kinds.audio import AudioKind
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.image import ImageKind
from jaxfeed.recipes.kinds.lm import LMKind
from jaxfeed.recipes.kinds.table import TableKind
from jaxfeed.recipes.kinds.text import TextKind
from jaxfeed.recipes.kinds.tokens import TokensKind
from jaxfeed.recipes.spec import Preprocessing

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        ImageKind(),
        ArrayKind(),
        TableKind(),
        AudioKind(),
        TextKind(),
        LMKind(),
        TokensKind(),
    )
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


def kind_for(columns_kind: str, task: str | None) -> Kind:
    """The kind of a new run: its input columns' kind (``lm`` for ``--task lm`` on text). Where
    the model comes from is the model source's (:mod:`jaxfeed.recipes.sources`), not the kind's."""
    return kind_named("lm" if task == "lm" and columns_kind == "text" else columns_kind)


def kind_of(prep: Preprocessing) -> Kind:
    """The kind of a saved run (eval, predict, resume): its preprocessing's ``kind``."""
    return kind_named(prep.kind)


__all__ = ["KINDS", "Kind", "check_options", "kind_for", "kind_named", "kind_of"]
