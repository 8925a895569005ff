"""BERT in Flax NNX, numerically equal to ``transformers``' PyTorch BERT: the post-norm encoder
shared by the BERT family (RoBERTa and DistilBERT reuse it), and its heads.

:class:`Encoder` is embeddings (words, learned positions, token types) + LayerNorm, then layers
of self-attention and a GELU MLP, each followed by a residual LayerNorm. :class:`EncoderModel`
puts a task head on it: ``"sequence-classification"`` (BERT's tanh pooler on the first token,
then a linear layer), ``"token-classification"``, ``"masked-lm"`` (transform + LayerNorm + the
word embeddings as output layer, plus a bias) or ``"feature-extraction"`` (the last hidden
states). Parameters carry logical axis names (``"vocab"``, ``"embed"``, ``"heads"``, ``"mlp"``,
``"classes"``). Layers support gradient checkpointing (``remat``, set by
``Trainer(remat=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.activations import ACTIVATIONS as ACT2FN
from jaxfeed.models.attention import active_dropout, attention
from jaxfeed.models.dropout import Dropout
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.weights import TRANSPOSE, Rule
from jaxfeed.models.nnx import axes
from jaxfeed.models.stacked import run_layers, stacked_layers

TASKS = ("sequence-classification", "token-classification", "masked-lm", "feature-extraction")

#: The activations a BERT-like ``hidden_act`` may name (see :mod:`jaxfeed.models.activations`).
ACTIVATIONS = {name: ACT2FN[name] for name in (
    "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish", "tanh")}  # fmt: skip


# the config.json fields a BERT-like encoder reads (jaxfeed.models.hub.config_check's kinds)
ENCODER_FIELDS: dict[str, Any] = {
    "vocab_size": "count!", "hidden_size": "count!", "num_hidden_layers": "count!",
    "num_attention_heads": "count!", "intermediate_size": "count!",
    "max_position_embeddings": "count", "type_vocab_size": "count",
    "hidden_act": tuple(ACTIVATIONS), "layer_norm_eps": "positive",
    "hidden_dropout_prob": "rate", "attention_probs_dropout_prob": "rate",
    "classifier_dropout": "rate?", "initializer_range": "std", "tie_word_embeddings": "bool",
}  # fmt: skip
ENCODER_DIVIDES = ("hidden_size", "num_attention_heads")
QUERY_VALUE = ("query", "value")  # PEFT's default target_modules of BERT-like encoders


def activation(name: Any) -> Any:
    """The activation ``config.json`` names (``hidden_act``), or a clear error."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not supported; known: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


@dataclass(frozen=True)
class Settings:
    """What the shared encoder reads from a family's config (hashable: part of the graph)."""

    vocab_size: int
    dim: int
    depth: int
    heads: int
    mlp_dim: int
    max_positions: int
    type_vocab_size: int  # 0: no token-type embeddings (DistilBERT)
    act: str
    eps: float
    dropout: float
    attention_dropout: float
    pad_token_id: int
    roberta_positions: bool = False  # positions counted from pad + 1 over non-pad tokens
    tied: bool = True  # masked-LM output layer is the word embeddings


def bert_settings(config: dict) -> Settings:
    return Settings(
        vocab_size=int(config["vocab_size"]),
        dim=int(config["hidden_size"]),
        depth=int(config["num_hidden_layers"]),
        heads=int(config["num_attention_heads"]),
        mlp_dim=int(config["intermediate_size"]),
        max_positions=int(config.get("max_position_embeddings", 512)),
        type_vocab_size=int(config.get("type_vocab_size", 2)),
        act=str(config.get("hidden_act", "gelu")),
        eps=float(config.get("layer_norm_eps", 1e-12)),
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(config.get("attention_probs_dropout_prob", 0.1)),
        pad_token_id=int(config.get("pad_token_id") or 0),
        tied=bool(config.get("tie_word_embeddings", True)),
    )


def _linear(n_in: int, n_out: int, names: tuple, dt: dict, rngs: nnx.Rngs, bias: bool = True):
    return nnx.Linear(n_in, n_out, use_bias=bias, rngs=rngs, kernel_metadata=axes(*names),
                      bias_metadata=axes(names[-1]), **dt)  # fmt: skip


def _norm(dim: int, eps: float, dt: dict, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(dim, epsilon=eps, rngs=rngs, scale_metadata=axes("embed"),
                         bias_metadata=axes("embed"), **dt)  # fmt: skip


class Attention(nnx.Module):
    """Multi-head self-attention over real keys (softmax in float32, masked keys at float32's
    minimum as ``transformers`` does), with dropout on the attention weights; the kernel is
    :func:`jaxfeed.models.attention.attention`'s choice."""

    def __init__(self, s: Settings, dt: dict, rngs: nnx.Rngs) -> None:
        if s.dim % s.heads:
            raise ValueError(f"hidden size {s.dim} is not a multiple of {s.heads} heads")
        self.heads, self.head_dim = s.heads, s.dim // s.heads
        self.query = _linear(s.dim, s.dim, ("embed", "heads"), dt, rngs)
        self.key = _linear(s.dim, s.dim, ("embed", "heads"), dt, rngs)
        self.value = _linear(s.dim, s.dim, ("embed", "heads"), dt, rngs)
        self.out = _linear(s.dim, s.dim, ("heads", "embed"), dt, rngs)
        self.dropout = Dropout(s.attention_dropout, deterministic=False)

    def __call__(self, x: jax.Array, keys: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        b, t, dim = x.shape
        shape = (b, t, self.heads, self.head_dim)
        q, k, v = (layer(x).reshape(shape) for layer in (self.query, self.key, self.value))
        out = attention(q, k, v, key_mask=keys, dropout=active_dropout(self.dropout, rngs))
        return self.out(out.reshape(b, t, dim))


class Layer(nnx.Module):
    """``norm(x + attention(x))`` then ``norm(x + mlp(x))`` (post-norm), dropout on each
    residual branch."""

    def __init__(self, s: Settings, dt: dict, rngs: nnx.Rngs) -> None:
        self.attention = Attention(s, dt, rngs)
        self.attention_norm = _norm(s.dim, s.eps, dt, rngs)
        self.mlp_in = _linear(s.dim, s.mlp_dim, ("embed", "mlp"), dt, rngs)
        self.mlp_out = _linear(s.mlp_dim, s.dim, ("mlp", "embed"), dt, rngs)
        self.mlp_norm = _norm(s.dim, s.eps, dt, rngs)
        self.dropout = Dropout(s.dropout, deterministic=False)
        self.act = s.act

    def __call__(self, x: jax.Array, keys: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        x = self.attention_norm(x + self.dropout(self.attention(x, keys, rngs), rngs=rngs))
        hidden = activation(self.act)(self.mlp_in(x))
        return self.mlp_norm(x + self.dropout(self.mlp_out(hidden), rngs=rngs))


class Embeddings(nnx.Module):
    def __init__(self, s: Settings, dt: dict, rngs: nnx.Rngs) -> None:
        emb = {"param_dtype": dt["param_dtype"], "dtype": dt["dtype"]}
        self.word = nnx.Embed(s.vocab_size, s.dim, rngs=rngs,
                              embedding_metadata=axes("vocab", "embed"), **emb)  # fmt: skip
        self.position = nnx.Embed(s.max_positions, s.dim, rngs=rngs,
                                  embedding_metadata=axes(None, "embed"), **emb)  # fmt: skip
        self.token_type = nnx.data(
            nnx.Embed(
                s.type_vocab_size, s.dim, rngs=rngs, embedding_metadata=axes(None, "embed"), **emb
            )
            if s.type_vocab_size
            else None
        )
        self.norm = _norm(s.dim, s.eps, dt, rngs)
        self.dropout = Dropout(s.dropout, deterministic=False)


class Encoder(nnx.Module):
    """The BERT-family encoder: ``(input_ids, attention_mask, token_type_ids, position_ids)`` to
    the last hidden states ``(batch, length, hidden)``."""

    supports_remat = True

    def __init__(self, s: Settings, dt: dict, rngs: nnx.Rngs) -> None:
        self.settings = s
        self.embeddings = Embeddings(s, dt, rngs)
        self.layers = stacked_layers(lambda r: Layer(s, dt, r), s.depth, rngs)
        self.remat = False
        self.scan = "auto"  # one lax.scan over the stacked layers (jaxfeed.models.stacked)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None,
                 token_type_ids: jax.Array | None, position_ids: jax.Array | None,
                 rngs: nnx.Rngs | None) -> jax.Array:  # fmt: skip
        s = self.settings
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be (batch, length) token ids, got {input_ids.shape}")
        ids = input_ids.astype(jnp.int32)
        t = ids.shape[1]
        if isinstance(t, int) and t > s.max_positions - (s.pad_token_id + 1) * s.roberta_positions:
            raise ValueError(
                f"sequences of {t} tokens are longer than the model's {s.max_positions} positions "
                "(max_position_embeddings): truncate them (the tokenizer's model_max_length)"
            )
        mask = jnp.ones_like(ids) if attention_mask is None else attention_mask.astype(jnp.int32)
        if position_ids is None:
            if s.roberta_positions:
                real = (ids != s.pad_token_id).astype(jnp.int32)
                position_ids = jnp.cumsum(real, axis=1) * real + s.pad_token_id
            else:
                position_ids = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), ids.shape)
        e = self.embeddings
        x = e.word(ids) + e.position(position_ids.astype(jnp.int32))
        if e.token_type is not None:
            types = jnp.zeros_like(ids) if token_type_ids is None else token_type_ids
            x = x + e.token_type(types.astype(jnp.int32))
        x = e.dropout(e.norm(x), rngs=rngs)
        keys = mask.astype(bool)
        return run_layers(self.layers, x, lambda layer, h, r: layer(h, keys, r), rngs=rngs,
                          remat=self.remat, scan=self.scan)  # fmt: skip


class EncoderModel(nnx.Module):
    """A BERT-family encoder with a task head; called as ``transformers``' model is
    (``input_ids``, ``attention_mask``, ``token_type_ids``, ``position_ids``), it returns float32
    logits: ``(batch, num_labels)``, ``(batch, length, num_labels)``, ``(batch, length, vocab)``
    or the hidden states for ``"feature-extraction"``."""

    symbolic_length = True

    def __init__(self, s: Settings, *, task: str, num_labels: int | None, head: str,
                 classifier_dropout: float, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        dt = {"dtype": dtype, "param_dtype": param_dtype}
        self.task, self.head_kind, self.settings = task, head, s
        self.encoder = Encoder(s, dt, rngs)
        self.dropout = Dropout(classifier_dropout, deterministic=False)
        n = int(num_labels or 2)
        pooler = classifier = transform = transform_norm = decoder = decoder_bias = None
        if task == "sequence-classification":
            pooler = _linear(s.dim, s.dim, (None, "embed"), dt, rngs)  # dense before the classifier
            classifier = _linear(s.dim, n, ("embed", "classes"), dt, rngs)
        elif task == "token-classification":
            classifier = _linear(s.dim, n, ("embed", "classes"), dt, rngs)
        elif task == "masked-lm":
            transform = _linear(s.dim, s.dim, (None, "embed"), dt, rngs)
            transform_norm = _norm(s.dim, s.eps, dt, rngs)
            if not s.tied:
                decoder = _linear(s.dim, s.vocab_size, ("embed", "vocab"), dt, rngs, bias=False)
            decoder_bias = nnx.Param(jnp.zeros((s.vocab_size,), param_dtype), **axes("vocab"))
        elif task == "feature-extraction" and head == "bert":
            pooler = _linear(s.dim, s.dim, (None, "embed"), dt, rngs)  # kept for round trips
        self.pooler, self.classifier = nnx.data(pooler), nnx.data(classifier)
        self.transform, self.transform_norm = nnx.data(transform), nnx.data(transform_norm)
        self.decoder, self.decoder_bias = nnx.data(decoder), nnx.data(decoder_bias)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                 token_type_ids: jax.Array | None = None, position_ids: jax.Array | None = None,
                 *, rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        x = self.encoder(input_ids, attention_mask, token_type_ids, position_ids, rngs)
        if self.task == "feature-extraction":
            return x.astype(jnp.float32)
        if self.task == "sequence-classification":
            first = x[:, 0]
            if self.head_kind == "bert":
                pooled = self.dropout(jnp.tanh(self.pooler(first)), rngs=rngs)
            elif self.head_kind == "roberta":
                pooled = self.dropout(first, rngs=rngs)
                pooled = self.dropout(jnp.tanh(self.pooler(pooled)), rngs=rngs)
            else:  # distilbert
                pooled = self.dropout(jax.nn.relu(self.pooler(first)), rngs=rngs)
            return self.classifier(pooled).astype(jnp.float32)
        if self.task == "token-classification":
            return self.classifier(self.dropout(x, rngs=rngs)).astype(jnp.float32)
        act = "gelu" if self.head_kind == "roberta" else self.settings.act
        h = self.transform_norm(activation(act)(self.transform(x)))
        tied = self.decoder is None
        logits = self.encoder.embeddings.word.attend(h) if tied else self.decoder(h)
        return (logits + self.decoder_bias[...]).astype(jnp.float32)


# ---------------------------------------------------------------------------------- rules
def encoder_rules(s: Settings, hf: str, *, names: dict[str, str] | None = None) -> list[Rule]:
    """Rules for the encoder, its checkpoint tensors under ``hf`` (``"bert"``; names of the
    BERT layout, renamed by ``names`` for families that differ)."""
    n = {
        "word": "embeddings.word_embeddings", "position": "embeddings.position_embeddings",
        "token_type": "embeddings.token_type_embeddings", "emb_norm": "embeddings.LayerNorm",
        "layer": "encoder.layer.{i}", "query": "attention.self.query",
        "key": "attention.self.key", "value": "attention.self.value",
        "out": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
        "mlp_in": "intermediate.dense", "mlp_out": "output.dense", "mlp_norm": "output.LayerNorm",
    }  # fmt: skip
    n.update(names or {})
    p = f"{hf}." if hf else ""
    rules = [
        Rule(f"{p}{n['word']}.weight", "encoder.embeddings.word.embedding"),
        Rule(f"{p}{n['position']}.weight", "encoder.embeddings.position.embedding"),
        Rule(f"{p}{n['emb_norm']}.weight", "encoder.embeddings.norm.scale"),
        Rule(f"{p}{n['emb_norm']}.bias", "encoder.embeddings.norm.bias"),
    ]
    if s.type_vocab_size:
        rules.append(
            Rule(f"{p}{n['token_type']}.weight", "encoder.embeddings.token_type.embedding")
        )
    for i in range(s.depth):
        layer = p + n["layer"].format(i=i)
        for ours, kind in (("attention.query", "query"), ("attention.key", "key"),
                           ("attention.value", "value"), ("attention.out", "out"),
                           ("mlp_in", "mlp_in"), ("mlp_out", "mlp_out")):  # fmt: skip
            rules += linear_rules(f"{layer}.{n[kind]}", f"encoder.layers.{i}.{ours}")
        for ours in ("attention_norm", "mlp_norm"):
            rules += norm_rules(f"{layer}.{n[ours]}", f"encoder.layers.{i}.{ours}")
    return rules


def linear_rules(hf: str, path: str, bias: bool = True) -> list[Rule]:
    """A torch ``Linear`` (``weight`` [out, in], ``bias``) as an ``nnx.Linear``."""
    kernel = Rule(f"{hf}.weight", f"{path}.kernel", TRANSPOSE)
    return [kernel, Rule(f"{hf}.bias", f"{path}.bias")] if bias else [kernel]


def norm_rules(hf: str, path: str) -> list[Rule]:
    """A torch ``LayerNorm`` (``weight``, ``bias``) as an ``nnx.LayerNorm``."""
    return [Rule(f"{hf}.weight", f"{path}.scale"), Rule(f"{hf}.bias", f"{path}.bias")]


def _classifier_dropout(config: dict, key: str = "classifier_dropout") -> float:
    value = config.get(key)
    return float(config.get("hidden_dropout_prob", 0.1) if value is None else value)


def build(config: dict, *, task: str, num_labels: int | None, dtype: Any, param_dtype: Any,
          rngs: nnx.Rngs) -> EncoderModel:  # fmt: skip
    """BERT with the ``task``'s head, from a ``config.json`` dict."""
    return EncoderModel(bert_settings(config), task=task, num_labels=num_labels, head="bert",
                        classifier_dropout=_classifier_dropout(config), dtype=dtype,
                        param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list[Rule]:
    """BERT's checkpoint tensors (``transformers``' names) to the model's parameters."""
    s = bert_settings(config)
    out = encoder_rules(s, "bert")
    if task == "sequence-classification" or task == "feature-extraction":
        out += linear_rules("bert.pooler.dense", "pooler")
    if task in ("sequence-classification", "token-classification"):
        out += linear_rules("classifier", "classifier")
    if task == "masked-lm":
        out += linear_rules("cls.predictions.transform.dense", "transform")
        out += norm_rules("cls.predictions.transform.LayerNorm", "transform_norm")
        out.append(Rule("cls.predictions.bias", "decoder_bias"))
        if not s.tied:
            out.append(Rule("cls.predictions.decoder.weight", "decoder.kernel", TRANSPOSE))
    return out


ARCHITECTURES = {
    "sequence-classification": "BertForSequenceClassification",
    "token-classification": "BertForTokenClassification",
    "masked-lm": "BertForMaskedLM",
    "feature-extraction": "BertModel",
}

FAMILY = Family(
    model_types=("bert",),
    tasks=TASKS,
    default_task="feature-extraction",
    build=build,
    rules=rules,
    architecture=ARCHITECTURES.__getitem__,
    prefix="bert",
    tasks_by_architecture=(
        *((v, k) for k, v in ARCHITECTURES.items()),
        ("BertForPreTraining", "masked-lm"),
    ),
    lora_targets=QUERY_VALUE,
    module_renames=(),
    config_fields=ENCODER_FIELDS,
    divides=ENCODER_DIVIDES,
)
