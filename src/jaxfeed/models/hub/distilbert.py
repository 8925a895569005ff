"""DistilBERT in Flax NNX: BERT's encoder without token types (its own tensor names, LayerNorm
epsilon 1e-12), and DistilBERT's heads (``pre_classifier`` + ReLU before the classifier, the
``vocab_*`` masked-LM head), numerically equal to ``transformers``' PyTorch model."""

from __future__ import annotations

from typing import Any

from flax import nnx

from jaxfeed.models.hub.bert import (
    ACTIVATIONS,
    TASKS,
    EncoderModel,
    Settings,
    encoder_rules,
    linear_rules,
    norm_rules,
)
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.weights import TRANSPOSE, Rule

NAMES = {
    "word": "embeddings.word_embeddings", "position": "embeddings.position_embeddings",
    "emb_norm": "embeddings.LayerNorm", "layer": "transformer.layer.{i}",
    "query": "attention.q_lin", "key": "attention.k_lin", "value": "attention.v_lin",
    "out": "attention.out_lin", "attention_norm": "sa_layer_norm", "mlp_in": "ffn.lin1",
    "mlp_out": "ffn.lin2", "mlp_norm": "output_layer_norm",
}  # fmt: skip


def settings(config: dict) -> Settings:
    return Settings(
        vocab_size=int(config["vocab_size"]),
        dim=int(config.get("dim", 768)),
        depth=int(config.get("n_layers", 6)),
        heads=int(config.get("n_heads", 12)),
        mlp_dim=int(config.get("hidden_dim", 3072)),
        max_positions=int(config.get("max_position_embeddings", 512)),
        type_vocab_size=0,
        act=str(config.get("activation", "gelu")),
        eps=1e-12,
        dropout=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.1)),
        pad_token_id=int(config.get("pad_token_id") or 0),
        tied=bool(config.get("tie_word_embeddings", True)),
    )


def build(config: dict, *, task: str, num_labels: int | None, dtype: Any, param_dtype: Any,
          rngs: nnx.Rngs) -> EncoderModel:  # fmt: skip
    """DistilBERT with the ``task``'s head, from a ``config.json`` dict."""
    dropout = config.get("seq_classif_dropout" if task == "sequence-classification" else "dropout")
    return EncoderModel(settings(config), task=task, num_labels=num_labels, head="distilbert",
                        classifier_dropout=float(0.1 if dropout is None else dropout),
                        dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list[Rule]:
    """DistilBERT's checkpoint tensors (``transformers``' names) to the model's parameters."""
    s = settings(config)
    out = encoder_rules(s, "distilbert", names=NAMES)
    if task == "sequence-classification":
        out += linear_rules("pre_classifier", "pooler")
        out += linear_rules("classifier", "classifier")
    elif task == "token-classification":
        out += linear_rules("classifier", "classifier")
    elif task == "masked-lm":
        out += linear_rules("vocab_transform", "transform")
        out += norm_rules("vocab_layer_norm", "transform_norm")
        out.append(Rule("vocab_projector.bias", "decoder_bias"))
        if not s.tied:
            out.append(Rule("vocab_projector.weight", "decoder.kernel", TRANSPOSE))
    return out


ARCHITECTURES = {
    "sequence-classification": "DistilBertForSequenceClassification",
    "token-classification": "DistilBertForTokenClassification",
    "masked-lm": "DistilBertForMaskedLM",
    "feature-extraction": "DistilBertModel",
}
# the config.json fields the family reads (jaxfeed.models.hub.config_check's kinds)
DISTILBERT_FIELDS: dict[str, Any] = {
    "vocab_size": "count!",
    "dim": "count",
    "n_layers": "count",
    "n_heads": "count",
    "hidden_dim": "count",
    "max_position_embeddings": "count",
    "activation": tuple(ACTIVATIONS),
    "dropout": "rate",
    "attention_dropout": "rate",
    "seq_classif_dropout": "rate",
    "qa_dropout": "rate",
    "initializer_range": "std",
    "tie_word_embeddings": "bool",
}  # fmt: skip
FAMILY = Family(
    model_types=("distilbert",),
    tasks=TASKS,
    default_task="feature-extraction",
    build=build,
    rules=rules,
    architecture=ARCHITECTURES.__getitem__,
    prefix="distilbert",
    tasks_by_architecture=tuple((v, k) for k, v in ARCHITECTURES.items()),
    lora_targets=("q_lin", "v_lin"),
    module_renames=(),
    config_fields=DISTILBERT_FIELDS,
    divides=("dim", "n_heads"),
)
