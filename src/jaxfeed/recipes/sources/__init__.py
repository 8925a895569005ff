"""Where a run's model comes from, beside what its inputs are (:mod:`jaxfeed.recipes.kinds`):
one :class:`~jaxfeed.recipes.sources.base.ModelSource` per source, chosen in one place
(:mod:`~jaxfeed.recipes.sources.registry`), as :mod:`jaxfeed.models.hub` has one ``Family`` per
module and a registry.

The sources: jaxfeed's built-in models (:class:`~jaxfeed.recipes.sources.base.ModelSource`:
``--model cnn``, ``mlp``, ``transformer``..., or none: the input kind's default), a Hub
checkpoint (:class:`~jaxfeed.recipes.sources.hub.HubSource`: ``--model hf:ORG/NAME`` or a
folder, with the opened checkpoint in :mod:`~jaxfeed.recipes.sources.hub_checkpoint`) and your
own code (:class:`~jaxfeed.recipes.sources.user.UserSource`: ``FILE.py:Class`` or
``package.module.Class``). A run holds one as ``run.model_source``, chosen by ``open_run``; a
saved run's is rebuilt from its record (:func:`~jaxfeed.recipes.sources.registry.source_of`).

A new source: a module here with a ``ModelSource`` subclass and one line in
``registry.SOURCES``; tests in ``tests/recipes/test_model_sources.py``.
"""
