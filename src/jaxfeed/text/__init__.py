"""Text: tokenizers in the Hub's ``tokenizer.json`` format, loaded, trained and applied to datasets.

Built on Hugging Face `tokenizers` (the Rust library behind `transformers`), the ``text`` extra
(``pip install 'jaxfeed[text]'``):

- :func:`load_tokenizer` reads any ``tokenizer.json`` (a local file or folder, or an fsspec URL);
- :func:`train_tokenizer` trains a BPE, WordPiece or Unigram tokenizer on a dataset's column, with
  no download;
- :func:`tokenize` adds ``input_ids`` and ``attention_mask`` columns, encoding batches with the
  tokenizer's own threads (``num_proc=`` splits the rows over processes too);
- :func:`generate` continues prompts with a causal language model (a key/value cache, one
  compiled loop; Hub models from ``jaxfeed.models.from_pretrained`` too); :func:`decode_layout`
  lays a model out for decoding on a TPU.

The ragged ``input_ids`` feed ``DataLoader(padding=...)``, ``bucket_by_length`` and ``packing``.
"""

from jaxfeed.data.text.tokenize import tokenize
from jaxfeed.data.text.tokenizer import load_tokenizer, special_tokens, train_tokenizer
from jaxfeed.train.generation import decode_layout, generate

__all__ = [
    "decode_layout",
    "generate",
    "load_tokenizer",
    "special_tokens",
    "tokenize",
    "train_tokenizer",
]
