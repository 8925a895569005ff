"""The `datasets` API over Apache Arrow: features, the ``Dataset`` facade and its operations,
streamed ``IterableDataset``, file formats and ``load_dataset``.

Inside, the floors go: ``features`` and the readers (``reader``, ``ragged``, ``formatting``) <
``core`` < ``formats`` (readers and writers that return tables) and ``ops``/``iterable`` <
``dataset``/``dataset_dict`` (the facade) < ``load`` (``load_dataset``, folders, the Hub layout,
built-ins) and ``text`` (tokenizers applied to datasets). Imports ``_base`` and ``runtime``.
"""
