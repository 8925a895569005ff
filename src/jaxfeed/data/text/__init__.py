"""Tokenizers of datasets: train, save and load a tokenizer (``tokenizer``) and apply it to a
dataset's text columns (``tokenize``). The public face is :mod:`jaxfeed.text`."""
