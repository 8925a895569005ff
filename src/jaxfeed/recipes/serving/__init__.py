"""What the command does with a finished run: the saved-run reader
(:mod:`~jaxfeed.recipes.serving.saved`: a run folder's kind and model source rebuilt from its
record), ``eval`` and ``predict`` (:mod:`~jaxfeed.recipes.serving.evaluate`), a language model's
evaluation and ``generate`` (:mod:`~jaxfeed.recipes.serving.text_serve`, chat templates in
:mod:`~jaxfeed.recipes.serving.hub_generate` rendered in a bounded process by
:mod:`~jaxfeed.recipes.serving.chat_sandbox`), and ``export --format hf``
(:mod:`~jaxfeed.recipes.serving.hub_export`)."""
