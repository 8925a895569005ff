"""Helpers of the accelerator tier's tests (tests/accelerator/conftest.py holds its fixtures)."""

from __future__ import annotations

import io
import os

import jax
import numpy as np
import PIL.Image

ON_CPU = os.environ.get("JAXFEED_ACCELERATOR_TESTS_ON_CPU") == "1"


def on(platform: str, tree) -> None:
    """Every array of ``tree`` lies on ``platform``'s devices."""
    for leaf in jax.tree_util.tree_leaves(tree):
        if isinstance(leaf, jax.Array):
            assert {d.platform for d in leaf.devices()} == {platform}, leaf.devices()


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def random_checkpoint(folder, config: dict, task: str, *, scale: float = 1.0):
    """A Hub-format checkpoint of random weights (``config.json`` + ``model.safetensors``) built
    and saved by jaxfeed itself (no PyTorch on a TPU machine); kernels and embeddings times
    ``scale`` (an LM whose logits differ clearly from token to token)."""
    import jax.numpy as jnp
    from flax import nnx

    from jaxfeed.models import save_pretrained
    from jaxfeed.models.hub.registry import family_of

    model = family_of(config).build(config, task=task, num_labels=config.get("num_labels"),
                                    dtype=None, param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
    if scale != 1.0:  # the matrices (a layer stack's too), not the norms and biases
        for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
            if str(path[-1]) in ("kernel", "embedding"):
                var.set_value(var.get_value() * scale)
        nnx.update(model, nnx.state(model, nnx.Param))
    model.hub_config, model.hub_task = dict(config), task
    return save_pretrained(model, folder)


def word_tokenizer(vocab: int):
    """Token ``tN`` is id N (0, 1, 2: pad, bos, eos): texts and ids map one to one."""
    import tokenizers

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    return tok


def save_wordpiece(folder, vocab: list[str], model_max_length: int = 8) -> None:
    """A BERT-style WordPiece ``tokenizer.json`` and ``tokenizer_config.json`` over ``vocab``
    ([PAD], [UNK], [CLS], [SEP] first), written with ``tokenizers`` alone: the TPU machine's
    ``transformers`` may not import beside its ``huggingface_hub``."""
    import json
    from pathlib import Path

    import tokenizers
    from tokenizers import models, normalizers, pre_tokenizers, processors

    ids = {w: i for i, w in enumerate(vocab)}
    tok = tokenizers.Tokenizer(models.WordPiece(ids, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tok.save(str(Path(folder) / "tokenizer.json"))
    settings = {"model_max_length": model_max_length, "pad_token": "[PAD]", "unk_token": "[UNK]",
                "cls_token": "[CLS]", "sep_token": "[SEP]", "do_lower_case": True}  # fmt: skip
    (Path(folder) / "tokenizer_config.json").write_text(json.dumps(settings))
