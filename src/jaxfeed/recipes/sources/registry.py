"""The one place a run's model source is chosen, from ``--model`` decoded
(:class:`~jaxfeed.recipes.config.model_spec.ModelSpec`): :func:`source_for` for a new or resumed
run (opened by the run), :func:`source_of` for a saved run (eval, predict, export), which
reopens a Hub checkpoint at the commit it recorded. No other module looks at ``spec.source``.

>>> source_for(None), source_for(parse_model("mlp")).name, source_for(parse_model("net.py:Net")).name
(ModelSource(None), 'builtin', 'code')
>>> source_for(parse_model("hf:org/bert")).name
'hub'
"""

from __future__ import annotations

from typing import Any

from jaxfeed.recipes.config.model_spec import ModelSpec, parse_model
from jaxfeed.recipes.sources.base import ModelSource
from jaxfeed.recipes.sources.hub import HubSource
from jaxfeed.recipes.sources.user import UserSource

SOURCES: dict[str, type[ModelSource]] = {
    "builtin": ModelSource,
    "hub": HubSource,
    "file": UserSource,
    "module": UserSource,
}


def source_for(spec: ModelSpec | None) -> ModelSource:
    """The model source of ``--model`` (None: the input kind's built-in default), not yet
    opened."""
    return SOURCES["builtin" if spec is None else spec.source](spec)


def source_of(record: Any, *, verify: bool = False) -> ModelSource:
    """A saved run's model source (``record``: its ``config.json``), a Hub checkpoint reopened at
    its recorded commit (``verify``: its files checked against the hashes the run recorded)."""
    spec = record.options.model_spec
    source = SOURCES["builtin" if spec is None else spec.source]
    return source.from_record(spec, record.resolved, verify=verify)


def absolute_model(model: Any) -> Any:
    """``--model`` (a name or ``{class_path, init_args}``) with the local path it names (a model
    file, a checkpoint folder) made absolute, so that a run folder works from any directory.

    >>> absolute_model("cnn"), absolute_model(None)
    ('cnn', None)
    """
    text = model.get("class_path") if isinstance(model, dict) else model
    spec = parse_model(text) if isinstance(text, str) else None
    return model if spec is None else source_for(spec).absolute(model)


__all__ = ["SOURCES", "absolute_model", "source_for", "source_of"]
