"""Recipes by input kind: one :class:`~jaxfeed.recipes.kinds.base.Kind` per kind of input a run
learns from, chosen in one place (:mod:`~jaxfeed.recipes.kinds.registry`), as
:mod:`jaxfeed.models.hub` has one ``Family`` per module and a registry.

The kinds: ``image`` (image files), ``array`` (arrays such as the digits' 8x8), ``table``
(numeric and categorical columns), ``audio`` (clips as log-mel spectrograms), ``text`` (a text
column classified or regressed) and ``lm`` (``--task lm``: a language model of the text);
:class:`~jaxfeed.recipes.kinds.hub.HubKind` wraps one of them for ``--model hf:ORG/NAME`` (the
opened checkpoint's tokenizer, size, front end and model). A run's kind is tested in the registry
only: :func:`~jaxfeed.recipes.kinds.registry.kind_for` for a new run (the columns' kind, the
task, ``--model``, the checkpoint), :func:`~jaxfeed.recipes.kinds.registry.kind_of` for a saved
run's :class:`~jaxfeed.recipes.spec.Preprocessing` (eval, predict, resume). The built-in models
are one table, :mod:`~jaxfeed.recipes.kinds.builtins` (the names ``recipes/config`` checks).

What a :class:`Kind` does for a run, in the order of a run (``registry.check_options(config)``
first: the options checked before any data is read):

* ``check(config)``: refuse the flags that do nothing for this kind (``--sample-rate`` on
  images, ``--image-size`` on audio); ``before_plan(config, resumed)``: options the kind sets
  itself (a Hub checkpoint: the data checked against it, its image size for a new run);
* ``plan(run_data, config) -> (Preprocessing, notes)``: the preprocessing, planned on the train
  split; ``reopen(prep, run_data, out)``: a resumed run's saved one made ready (its tokenizer
  attached, its clips scanned);
* ``augments(prep)`` (``--augment`` applies), ``describe(prep, run_data)`` (the inputs and
  target of the sizes line), ``unit`` (what an epoch counts: ``rows``, an LM's ``texts``),
  ``default_model``, ``resolved_options(config, prep, run_data)`` (what ``config.json`` keeps);
* ``prepare(prep, ds)`` (a split as the loader reads it), ``loader_options(prep, train)``
  (buckets, packing, audio's row transform), ``write_files(prep, out)`` (``tokenizer.json``,
  a checkpoint's ``preprocessor_config.json``);
* ``build_model(config, prep, outputs, seed, policy)``, ``trainer_options(config, prep,
  class_weights)`` (loss, metrics, targets, the on-device conversion), ``model_inputs(prep,
  model)`` (the Trainer's ``inputs=``);
* ``export(trainer, folder, prep, labels, extra)`` (``model/``), ``next_step(quoted_out)``
  (the summary's last line).

:class:`~jaxfeed.recipes.kinds.hub.HubKind` adds ``fine_tune_defaults(config,
steps_per_epoch)``, ``record()`` (``resolved["pretrained"]``), ``source_line()`` and
``before_fine_tuning(trainer, loader, split, record, say)`` (a language model's perplexity).

A new input kind: a module here with a :class:`Kind` subclass, one line in
``registry.KINDS``; the models it accepts in ``builtins.BUILTINS``; tests in
``tests/recipes/test_kinds.py``.
"""
