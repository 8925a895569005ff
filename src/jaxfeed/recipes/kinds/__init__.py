"""Recipes by input kind: one :class:`~jaxfeed.recipes.kinds.base.Kind` per kind of input a run
learns from, chosen in one place (:mod:`~jaxfeed.recipes.kinds.registry`), as
:mod:`jaxfeed.models.hub` has one ``Family`` per module and a registry. Where the model comes
from (a built-in, a Hub checkpoint, your own code) is the other choice of a run, its model source
(:mod:`jaxfeed.recipes.sources`): a kind knows the inputs, a source the model.

The kinds: ``image`` (image files), ``array`` (arrays such as the digits' 8x8), ``table``
(numeric and categorical columns), ``audio`` (clips as log-mel spectrograms), ``text`` (a text
column classified or regressed), ``lm`` (``--task lm``: a language model of the text) and
``tokens`` (token ids made elsewhere, a column of lists of integers, read as they are). A
run's kind is chosen in the registry only: :func:`~jaxfeed.recipes.kinds.registry.kind_for`
for a new run (the columns' kind and the task, by the plan stage),
:func:`~jaxfeed.recipes.kinds.registry.kind_of` for a saved run's
:class:`~jaxfeed.recipes.spec.Preprocessing` (by the saved-run reader). The built-in models are
one table, :mod:`~jaxfeed.recipes.kinds.builtins` (the names ``recipes/config`` checks);
the losses and metrics by task are :mod:`~jaxfeed.recipes.kinds.objectives`.

What a :class:`Kind` does for a run, in the order of a run (``registry.check_options(config)``
first: the options checked before any data is read):

* ``check(config)``: refuse the flags that do nothing for this kind (``--sample-rate`` on
  images, ``--image-size`` on audio); ``before_plan(config, resumed, pretrained)``: options the
  kind sets itself (a new run's CNN arguments; a Hub checkpoint's image size);
* ``plan(run_data, config, pretrained) -> (Preprocessing, notes)``: the preprocessing, planned
  on the train split (``pretrained``: what a Hub checkpoint fixes of the inputs, its tokenizer or
  front end, handed in by the model source as data); ``reopen(prep, run_data, out)``: a resumed
  run's saved one made ready (its tokenizer attached, its clips scanned);
* ``augments(prep)`` (``--augment`` applies), ``describe(prep, run_data)`` (the inputs and
  target of the sizes line), ``unit`` (what an epoch counts: ``rows``, an LM's ``texts``),
  ``default_model`` (the built-in model when ``--model`` names none), ``hub_task`` (the Hub
  task that learns from it), ``resolved_options(config, prep, run_data)`` (what ``config.json``
  keeps);
* ``prepare(prep, ds)`` (a split as the loader reads it), ``loader_options(prep, train)``
  (buckets, packing, audio's row transform), ``write_files(prep, out)`` (``tokenizer.json``);
* ``trainer_options(config, prep, class_weights)`` (loss, metrics, targets, the on-device
  conversion), ``model_inputs(prep, model)`` (the Trainer's ``inputs=``), ``baseline(prep)``
  (the linear model fitted beside the run's and compared with it: ``linear`` on the inputs,
  ``ngram`` on a text's tokens; none for a language model);
* ``export(trainer, folder, prep, labels, extra)`` (``model/``), ``next_step(quoted_out)``
  (the summary's last line).

A new input kind: a module here with a :class:`Kind` subclass, one line in
``registry.KINDS``; the models it accepts in ``builtins.BUILTINS``; tests in
``tests/recipes/test_kinds.py``.
"""
