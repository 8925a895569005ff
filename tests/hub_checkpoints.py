"""Tiny random checkpoints in the Hub's layout, made and saved by ``transformers`` (PyTorch), for
the tests of ``jaxfeed.models.hub``; and the reference logits of the saved model.

>>> sorted(CONFIGS)
['bert', 'distilbert', 'roberta']
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(45)]
CONFIGS = {
    "bert": ("Bert", {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "intermediate_size": 32,
                      "max_position_embeddings": 24}),
    "roberta": ("Roberta", {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
                            "num_attention_heads": 2, "intermediate_size": 32,
                            "max_position_embeddings": 24, "type_vocab_size": 1}),
    "distilbert": ("DistilBert", {"vocab_size": 50, "dim": 16, "n_layers": 2, "n_heads": 2,
                                  "hidden_dim": 32, "max_position_embeddings": 24}),
}  # fmt: skip
HEADS = {
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "masked-lm": "ForMaskedLM",
    "feature-extraction": "Model",
}


def torch_model(family: str, task: str, seed: int = 0, **overrides):
    """A random ``transformers`` model of ``family`` with ``task``'s head, in eval mode (the test
    is skipped where torch is not installed: Python 3.12+ here, see pyproject's dev extra)."""
    torch = pytest.importorskip("torch")
    import transformers

    prefix, config = CONFIGS[family]
    torch.manual_seed(seed)
    cfg = getattr(transformers, f"{prefix}Config")(**{**config, "num_labels": 3, **overrides})
    return getattr(transformers, prefix + HEADS[task])(cfg).eval()


def save_checkpoint(folder: Path, family: str, task: str, seed: int = 0, *, tokenizer: bool = True,
                    **overrides):  # fmt: skip
    """Save a tiny random checkpoint (and a WordPiece tokenizer) to ``folder``; the torch model."""
    model = torch_model(family, task, seed, **overrides)
    model.save_pretrained(folder)
    if tokenizer:
        save_tokenizer(folder)
    return model


def save_tokenizer(folder: Path, model_max_length: int = 8) -> None:
    """A BERT-style WordPiece tokenizer over :data:`VOCAB`, saved as ``transformers`` does."""
    import transformers

    (Path(folder) / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    # transformers 5 takes the vocabulary itself (a vocab_file= gave a tokenizer of the five
    # special tokens only: every word was [UNK])
    vocab = {word: i for i, word in enumerate(VOCAB)}
    tok = transformers.BertTokenizerFast(vocab=vocab, model_max_length=model_max_length)
    assert tok.convert_tokens_to_ids("w10") == VOCAB.index("w10")
    tok.save_pretrained(folder)


def inputs(family: str, batch: int = 3, length: int = 7, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids with right padding (rows of decreasing length), their mask, and token types."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(length, 2, batch).astype(int)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int64)
    pad = 1 if family == "roberta" else 0
    ids = np.where(mask == 1, rng.integers(5, 50, (batch, length)), pad)
    ids[:, 0] = 0 if family == "roberta" else 2
    out = {"input_ids": ids, "attention_mask": mask}
    if family == "bert":
        out["token_type_ids"] = (np.arange(length)[None] >= lengths[:, None] // 2).astype(
            np.int64
        ) * mask
    return out


def reference(model, batch: dict[str, np.ndarray]) -> np.ndarray:
    """The torch model's logits (or last hidden states) on ``batch``."""
    import torch

    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in batch.items()})
    value = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return value.numpy()
