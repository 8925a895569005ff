"""Task logic of the ``jaxfeed`` command, importable without it.

* :mod:`~jaxfeed.recipes.config`: :class:`RunConfig`, the typed options of a run; config files;
  reading a run folder's ``config.json`` (this and the first format).
* :mod:`~jaxfeed.recipes.data`: what ``--data`` is, splits (``--val-split``, split expressions),
  task inference, class labels; :mod:`~jaxfeed.recipes.columns`: which columns are learned from
  what (and the kind of each).
* :mod:`~jaxfeed.recipes.spec`: :class:`Preprocessing`, the one preprocessing of train, eval and
  predict, saved in the run; the run's kind (below) plans it and prepares datasets.
* :mod:`~jaxfeed.recipes.kinds`: one ``Kind`` per input kind (image, array, table, audio, text,
  language model; a Hub checkpoint wraps one) that plans, prepares, builds the model, serves and
  exports; its registry chooses a run's; the built-in models' table.
* :mod:`~jaxfeed.recipes.train.trainer`: the model (through the run's kind), optimizer and schedule,
  the trainer.
* :mod:`~jaxfeed.recipes.train`, :mod:`~jaxfeed.recipes.serving.evaluate`, :mod:`~jaxfeed.recipes.report`:
  the recipes and their reports; :mod:`~jaxfeed.recipes.interrupt`: reliable Ctrl-C.

Only :mod:`~jaxfeed.recipes.config` is imported here: it needs neither JAX nor pyarrow.
"""

from jaxfeed.recipes.config import ConfigError, RunConfig, read_run

__all__ = ["ConfigError", "RunConfig", "read_run"]
