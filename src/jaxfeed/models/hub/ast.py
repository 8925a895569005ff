"""Audio Spectrogram Transformer (``model_type`` ``"audio-spectrogram-transformer"``) from Hub
checkpoints: audio classification and the bare encoder.

The architecture is ``transformers``' ``ASTModel`` / ``ASTForAudioClassification``: the log-mel
features ``input_values`` ``(batch, max_length frames, num_mel_bins)`` (what
:class:`jaxfeed.models.hub.audio_features.ASTFeatureExtractor` computes from a waveform) are cut into
``patch_size`` x ``patch_size`` patches with strides ``frequency_stride`` and ``time_stride``,
embedded, preceded by a ``[CLS]`` and a distillation token, and run through ViT's encoder
(:class:`jaxfeed.models.hub.vit.Encoder`, the same tensor names). The pooled output is the mean of
the two special tokens; the classifier is LayerNorm then a linear layer. Task
``"feature-extraction"`` returns ``last_hidden_state`` (or the pooled output with
``output="pooler_output"``).

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> config = {"model_type": "audio-spectrogram-transformer", "hidden_size": 8,
...           "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
...           "patch_size": 4, "frequency_stride": 4, "time_stride": 4, "max_length": 12,
...           "num_mel_bins": 8}
>>> model = FAMILY.build(config, task="audio-classification", num_labels=5, dtype=None,
...                      param_dtype=jnp.float32, rngs=nnx.Rngs(0))
>>> model(input_values=jnp.zeros((2, 12, 8))).shape
(2, 5)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.dropout import Dropout
from jaxfeed.models.hub.audio_features import ASTFeatureExtractor, for_model
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.vit import (
    OUTPUTS,
    VIT_FIELDS,
    VIT_RENAMES,
    Encoder,
    PatchEmbed,
    Settings,
    _dense,
    _norm,
    config_num_labels,
    encoder_rules,
    hidden_states,
    positive,
    processor_for,
)
from jaxfeed.models.hub.weights import CONV2D, TRANSPOSE, Rule
from jaxfeed.models.nnx import axes

MODEL_TYPE = "audio-spectrogram-transformer"
TASKS = ("audio-classification", "feature-extraction")


class ASTEmbeddings(nnx.Module):
    """``[CLS]`` and distillation tokens, overlapping patch embeddings, learned positions."""

    def __init__(self, config: Mapping[str, Any], s: Settings, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        patch = positive(config, "patch_size", 16)
        stride = (positive(config, "frequency_stride", 10), positive(config, "time_stride", 10))
        self.frames = positive(config, "max_length", 1024)
        self.mel_bins = positive(config, "num_mel_bins", 128)
        if patch > self.frames or patch > self.mel_bins:
            raise ValueError(
                f"config.json: patch_size {patch} is larger than max_length {self.frames} or "
                f"num_mel_bins {self.mel_bins}"
            )
        n = ((self.mel_bins - patch) // stride[0] + 1) * ((self.frames - patch) // stride[1] + 1)
        zeros = nnx.initializers.zeros
        self.cls_token = nnx.Param(zeros(rngs.params(), (1, 1, s.hidden), param_dtype),
                                   **axes(None, None, "embed"))  # fmt: skip
        self.distillation_token = nnx.Param(zeros(rngs.params(), (1, 1, s.hidden), param_dtype),
                                            **axes(None, None, "embed"))  # fmt: skip
        self.position_embeddings = nnx.Param(
            zeros(rngs.params(), (1, n + 2, s.hidden), param_dtype), **axes(None, None, "embed")
        )
        self.patch_embeddings = PatchEmbed(1, s.hidden, (patch, patch), stride, s, dtype=dtype,
                                           param_dtype=param_dtype, rngs=rngs)  # fmt: skip
        self.dropout = Dropout(s.dropout, deterministic=False)

    def __call__(self, input_values: Any, rngs: nnx.Rngs | None) -> jax.Array:
        x = jnp.asarray(input_values)
        if x.ndim != 3 or tuple(x.shape[1:]) != (self.frames, self.mel_bins):
            raise ValueError(
                f"input_values must be (batch, {self.frames} frames, {self.mel_bins} mel bins) "
                f"(config.json max_length and num_mel_bins; the ASTFeatureExtractor pads or cuts "
                f"to max_length), got shape {tuple(x.shape)}"
            )
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.float32)
        x = jnp.transpose(x, (0, 2, 1))[..., None]  # (B, mel bins, frames, 1): frequency is "H"
        tokens = [self.cls_token[...], self.distillation_token[...]]
        return hidden_states(x, self.patch_embeddings, tokens, self.position_embeddings[...],
                             self.dropout, rngs)  # fmt: skip


class ASTModel(nnx.Module):
    """The bare AST encoder (task ``"feature-extraction"``): ``last_hidden_state`` ``(batch, 2 +
    patches, hidden)``, or the mean of the two special tokens with ``output="pooler_output"``."""

    @property
    def head_modules(self) -> tuple[str, ...]:
        """The bare encoder has no head: ``Trainer(trainable="head")`` is refused."""
        raise ValueError(
            "trainable='head': the bare AST encoder (task 'feature-extraction') has no head; load "
            "it with task='audio-classification' or pass a regular expression over parameter paths"
        )

    def __init__(self, config: Mapping[str, Any], *, dtype: Any = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> None:  # fmt: skip
        s = Settings(config)
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.embeddings = ASTEmbeddings(config, s, **kw)
        self.encoder = Encoder(s, **kw)

    def __call__(self, input_values: Any, *, output: str = "last_hidden_state",
                 rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        hidden = self.encoder(self.embeddings(input_values, rngs), rngs)
        return hidden if output == "last_hidden_state" else pooled(hidden)


def pooled(hidden: jax.Array) -> jax.Array:
    """AST's pooled output: the mean of the ``[CLS]`` and distillation tokens."""
    return (hidden[:, 0] + hidden[:, 1]) / 2


class ASTHead(nnx.Module):
    """``transformers``' ``ASTMLPHead``: LayerNorm then a linear layer."""

    def __init__(self, s: Settings, num_labels: int, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        self.layernorm = _norm(s, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dense = _dense(s.hidden, num_labels, ("embed", "classes"), s, dtype=dtype,
                            param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dense(self.layernorm(x))


class ASTForAudioClassification(nnx.Module):
    """AST with its classification head; returns logits ``(batch, labels)``."""

    head_modules = ("classifier",)  # what Trainer(trainable="head") trains

    def __init__(self, config: Mapping[str, Any], num_labels: int, *, dtype: Any = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> None:  # fmt: skip
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.audio_spectrogram_transformer = ASTModel(config, **kw)
        self.classifier = ASTHead(Settings(config), num_labels, **kw)

    def __call__(self, input_values: Any, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        hidden = self.audio_spectrogram_transformer(input_values, rngs=rngs)
        return self.classifier(pooled(hidden)).astype(jnp.float32)


# ---------------------------------------------------------------------------------- family
def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"model_type {MODEL_TYPE!r} supports the tasks {TASKS}, got {task!r}")


def build(config: dict, *, task: str, num_labels: int | None, dtype: Any, param_dtype: Any,
          rngs: nnx.Rngs) -> nnx.Module:  # fmt: skip
    """The NNX model of ``config`` for ``task`` (random weights until loaded)."""
    _check_task(task)
    param_dtype = param_dtype or jnp.float32
    if task == "feature-extraction":
        return ASTModel(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    return ASTForAudioClassification(config, config_num_labels(config, num_labels), dtype=dtype,
                                     param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list[Rule]:
    """Checkpoint tensor -> model parameter: ``ASTForAudioClassification`` checkpoints name the
    encoder ``audio_spectrogram_transformer.*``, ``ASTModel`` ones have no prefix."""
    _check_task(task)
    layers = positive(config, "num_hidden_layers", 12)
    if task == "feature-extraction":
        hf = path = ""
        head = []
    else:
        hf = path = "audio_spectrogram_transformer."
        head = [
            Rule("classifier.layernorm.weight", "classifier.layernorm.scale"),
            Rule("classifier.layernorm.bias", "classifier.layernorm.bias"),
            Rule("classifier.dense.weight", "classifier.dense.kernel", TRANSPOSE),
            Rule("classifier.dense.bias", "classifier.dense.bias"),
        ]
    embeddings = [
        Rule(f"{hf}embeddings.{name}", f"{path}embeddings.{name}")
        for name in ("cls_token", "distillation_token", "position_embeddings")
    ] + [
        Rule(f"{hf}embeddings.patch_embeddings.projection.weight",
             f"{path}embeddings.patch_embeddings.kernel", CONV2D),
        Rule(f"{hf}embeddings.patch_embeddings.projection.bias",
             f"{path}embeddings.patch_embeddings.bias"),
    ]  # fmt: skip
    return embeddings + encoder_rules(hf, f"{path}encoder.", layers) + head


def architecture(task: str) -> str:
    """The ``transformers`` class written to ``config.json``'s ``architectures``."""
    _check_task(task)
    return "ASTModel" if task == "feature-extraction" else "ASTForAudioClassification"


def preprocessor(folder: Path, config: dict) -> ASTFeatureExtractor:
    """The checkpoint's ``preprocessor_config.json`` as an :class:`ASTFeatureExtractor`, refused
    when its features do not fit the model (``max_length``, ``num_mel_bins``)."""
    return processor_for(folder, config, "audio", for_model)


# the config.json fields the family reads (jaxfeed.models.hub.config_check's kinds)
AST_FIELDS: dict[str, Any] = {
    **VIT_FIELDS,
    "patch_size": "count",
    "frequency_stride": "count",
    "time_stride": "count",
    "max_length": "count",
    "num_mel_bins": "count",
}  # fmt: skip
FAMILY = Family(
    model_types=(MODEL_TYPE,),
    tasks=TASKS,
    default_task="audio-classification",
    build=build,
    rules=rules,
    architecture=architecture,
    prefix="audio_spectrogram_transformer",
    preprocessor=preprocessor,
    tasks_by_architecture=(
        ("ASTForAudioClassification", "audio-classification"),
        ("ASTModel", "feature-extraction"),
    ),
    lora_targets=("query", "value"),
    module_renames=VIT_RENAMES,
    config_fields=AST_FIELDS,
    divides=None,
)

__all__ = ["FAMILY", "ASTForAudioClassification", "ASTModel"]
