"""Text for the command's kinds: which column is text (:mod:`~jaxfeed.recipes.text.text_columns`),
tokenizers trained or loaded and attached to a run (:mod:`~jaxfeed.recipes.text.tokenizer`), and
corpora read as a language model's texts (:mod:`~jaxfeed.recipes.text.corpus`,
:mod:`~jaxfeed.recipes.text.corpus_reader`)."""
