"""ViT (``model_type`` ``"vit"``) from Hub checkpoints: image classification and the bare encoder.

The architecture is ``transformers``' ``ViTModel`` / ``ViTForImageClassification``: patches of
``patch_size`` pixels embedded by a strided convolution, a ``[CLS]`` token and learned position
embeddings, ``num_hidden_layers`` pre-norm blocks (LayerNorm, self-attention, residual;
LayerNorm, MLP, residual) and a final LayerNorm. The classifier reads the ``[CLS]`` token; the bare
encoder (task ``"feature-extraction"``) returns ``last_hidden_state`` ``(batch, 1 + patches,
hidden)`` or, with ``output="pooler_output"``, the pooler's ``tanh(dense(CLS))``.

``pixel_values`` is ``(batch, channels, height, width)`` as in ``transformers``, or channels-last
``(batch, height, width, channels)``; the height and width must be the config's ``image_size``,
unless ``interpolate_pos_encoding=True`` resizes the position embeddings to the images' patch
grid (bicubic, as PyTorch's ``interpolate`` in ``transformers``).

The encoder blocks (:class:`Encoder`) are shared with AST (:mod:`jaxfeed.models.hub.ast`), whose
checkpoints use the same tensor names. Every weight carries logical axis names (``"embed"``,
``"heads"``, ``"mlp"``, ``"classes"``) as :mod:`jaxfeed.models.transformer` does.

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> config = {"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1,
...           "num_attention_heads": 2, "intermediate_size": 16, "image_size": 8, "patch_size": 4}
>>> model = FAMILY.build(config, task="image-classification", num_labels=3, dtype=None,
...                      param_dtype=jnp.float32, rngs=nnx.Rngs(0))
>>> model(pixel_values=jnp.zeros((2, 3, 8, 8))).shape
(2, 3)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxfeed.models.activations import ACTIVATIONS as ACT2FN
from jaxfeed.models.attention import active_dropout, attention
from jaxfeed.models.dropout import Dropout
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.files import CheckpointError, checkpoint_file, read_json
from jaxfeed.models.hub.image_processing import ImageProcessor, for_model
from jaxfeed.models.hub.weights import CONV2D, IDENTITY, TRANSPOSE, Rule
from jaxfeed.models.nnx import axes
from jaxfeed.models.stacked import run_layers, stacked_layers

TASKS = ("image-classification", "feature-extraction")
OUTPUTS = ("last_hidden_state", "pooler_output")

#: The activations a ViT ``hidden_act`` may name (see :mod:`jaxfeed.models.activations`).
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = dict(ACT2FN)


# ---------------------------------------------------------------------------------- config
def activation(config: Mapping[str, Any], key: str = "hidden_act") -> Callable:
    """The activation ``config[key]`` names, as ``transformers``' ``ACT2FN`` computes it.

    >>> float(activation({"hidden_act": "relu"})(jnp.array(-1.0)))
    0.0
    """
    name = config.get(key, "gelu")
    if name not in ACTIVATIONS:
        raise ValueError(
            f"config.json: {key}={name!r} is not supported; expected one of {sorted(ACTIVATIONS)}"
        )
    return ACTIVATIONS[name]


def pair(value: Any, key: str) -> tuple[int, int]:
    """``(height, width)`` of a config value given as one int or two.

    >>> pair(16, "patch_size"), pair([8, 4], "patch_size")
    ((16, 16), (8, 4))
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise ValueError(f"config.json: {key} must be a positive int or two, got {value!r}")
    return int(value[0]), int(value[1])


def positive(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """``config[key]`` checked to be a positive int (``default`` when absent)."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json: {key} must be a positive int, got {value!r}")
    return value


def config_num_labels(config: Mapping[str, Any], num_labels: int | None) -> int:
    """Classes of the head: ``num_labels`` when given, else the config's ``id2label`` (or its
    ``num_labels``, 2 as in ``transformers`` when neither is there).

    >>> config_num_labels({"id2label": {"0": "cat", "1": "dog", "2": "owl"}}, None)
    3
    >>> config_num_labels({}, 5)
    5
    """
    if num_labels is None:
        id2label = config.get("id2label")
        num_labels = len(id2label) if isinstance(id2label, Mapping) else config.get("num_labels", 2)
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"num_labels must be a positive int, got {num_labels!r}")
    return num_labels


class Settings:
    """What the encoder needs from a config: sizes, activation, epsilon, dropout and init."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.hidden = positive(config, "hidden_size", 768)
        self.layers = positive(config, "num_hidden_layers", 12)
        self.heads = positive(config, "num_attention_heads", 12)
        self.intermediate = positive(config, "intermediate_size", 3072)
        if self.hidden % self.heads:
            raise ValueError(
                f"config.json: hidden_size {self.hidden} must be a multiple of "
                f"num_attention_heads {self.heads}"
            )
        self.act = activation(config)
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.qkv_bias = bool(config.get("qkv_bias", True))
        self.dropout = float(config.get("hidden_dropout_prob", 0.0))
        self.attention_dropout = float(config.get("attention_probs_dropout_prob", 0.0))
        self.init_std = float(config.get("initializer_range", 0.02))


# ---------------------------------------------------------------------------------- layers
def _dense(n_in: int, n_out: int, names: tuple[str | None, str | None], s: Settings, *,
           use_bias: bool = True, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> nnx.Linear:  # fmt: skip
    """A Linear initialised as ``transformers`` does (normal(initializer_range), zero bias)."""
    return nnx.Linear(
        n_in, n_out, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
        kernel_init=nnx.initializers.normal(s.init_std), kernel_metadata=axes(*names),
        bias_metadata=axes(names[1]),
    )  # fmt: skip


def _norm(s: Settings, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(s.hidden, epsilon=s.eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
                         scale_metadata=axes("embed"), bias_metadata=axes("embed"))  # fmt: skip


class PatchEmbed(nnx.Module):
    """A ``kernel`` x ``kernel`` convolution with ``stride`` over channels-last images: ``(B, H, W,
    C)`` -> ``(B, patches, hidden)``, patches in row-major order as ``transformers`` flattens them.
    Non-overlapping patches (ViT) are one reshape and one matrix product."""

    def __init__(self, channels: int, hidden: int, kernel: tuple[int, int],
                 stride: tuple[int, int], s: Settings, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        self.kernel_size, self.stride, self.dtype = kernel, stride, dtype
        init = nnx.initializers.normal(s.init_std)
        self.kernel = nnx.Param(
            init(rngs.params(), (*kernel, channels, hidden), param_dtype),
            **axes(None, None, None, "embed"),
        )
        self.bias = nnx.Param(jnp.zeros((hidden,), param_dtype), **axes("embed"))

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.dtype or x.dtype
        kernel, x = self.kernel[...].astype(dtype), x.astype(dtype)
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        b, h, w, c = x.shape
        if (kh, kw) == (sh, sw):
            gh, gw = h // kh, w // kw
            x = x[:, : gh * kh, : gw * kw].reshape(b, gh, kh, gw, kw, c)
            out = jnp.einsum("bhpwqc,pqcd->bhwd", x, kernel)
        else:
            out = jax.lax.conv_general_dilated(
                x, kernel, (sh, sw), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
        out = out + self.bias[...].astype(dtype)
        return out.reshape(b, -1, out.shape[-1])


class Attention(nnx.Module):
    """Multi-head self-attention without a mask (every patch sees every patch), through
    :func:`jaxfeed.models.attention.attention`."""

    def __init__(self, s: Settings, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> None:
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.heads, self.head_dim = s.heads, s.hidden // s.heads
        self.query = _dense(s.hidden, s.hidden, ("embed", "heads"), s, use_bias=s.qkv_bias, **kw)
        self.key = _dense(s.hidden, s.hidden, ("embed", "heads"), s, use_bias=s.qkv_bias, **kw)
        self.value = _dense(s.hidden, s.hidden, ("embed", "heads"), s, use_bias=s.qkv_bias, **kw)
        self.output = _dense(s.hidden, s.hidden, ("heads", "embed"), s, **kw)
        self.dropout = Dropout(s.attention_dropout, deterministic=False)

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        b, t, d = x.shape
        shape = (b, t, self.heads, self.head_dim)
        q, k, v = (layer(x).reshape(shape) for layer in (self.query, self.key, self.value))
        out = attention(q, k, v, dropout=active_dropout(self.dropout, rngs))
        return self.output(out.reshape(b, t, d))


class Layer(nnx.Module):
    """``x + attention(layernorm_before(x))`` then ``x + fc2(act(fc1(layernorm_after(x))))``."""

    def __init__(self, s: Settings, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> None:
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.layernorm_before = _norm(s, **kw)
        self.attention = Attention(s, **kw)
        self.layernorm_after = _norm(s, **kw)
        self.fc1 = _dense(s.hidden, s.intermediate, ("embed", "mlp"), s, **kw)
        self.fc2 = _dense(s.intermediate, s.hidden, ("mlp", "embed"), s, **kw)
        self.act = s.act
        self.dropout = Dropout(s.dropout, deterministic=False)

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        x = x + self.dropout(self.attention(self.layernorm_before(x), rngs), rngs=rngs)
        hidden = self.fc2(self.act(self.fc1(self.layernorm_after(x))))
        return x + self.dropout(hidden, rngs=rngs)


class Encoder(nnx.Module):
    """Token sequence -> ``num_hidden_layers`` :class:`Layer` blocks -> final LayerNorm. With
    ``remat`` set (``Trainer(remat=True)``) each block is recomputed in the backward pass
    (gradient checkpointing); the blocks are stored stacked and run as one ``jax.lax.scan``
    (``scan = False``: one after the other)."""

    supports_remat = True

    def __init__(self, s: Settings, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> None:
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.layers = stacked_layers(
            lambda r: Layer(s, dtype=dtype, param_dtype=param_dtype, rngs=r), s.layers, rngs
        )
        self.layernorm = _norm(s, **kw)
        self.remat = False
        self.scan = "auto"  # one lax.scan over the stacked blocks (jaxfeed.models.stacked)

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        x = run_layers(self.layers, x, lambda layer, h, r: layer(h, r), rngs=rngs,
                       remat=self.remat, scan=self.scan)  # fmt: skip
        return self.layernorm(x)


def encoder_rules(hf: str, path: str, layers: int) -> list[Rule]:
    """Rules of :class:`Encoder`'s weights: checkpoint prefix ``hf`` (``"vit."``), model prefix
    ``path`` (``"vit."``)."""
    rules = [
        Rule(f"{hf}layernorm.weight", f"{path}layernorm.scale"),
        Rule(f"{hf}layernorm.bias", f"{path}layernorm.bias"),
    ]
    names = {
        "attention.attention.query": ("attention.query", TRANSPOSE),
        "attention.attention.key": ("attention.key", TRANSPOSE),
        "attention.attention.value": ("attention.value", TRANSPOSE),
        "attention.output.dense": ("attention.output", TRANSPOSE),
        "intermediate.dense": ("fc1", TRANSPOSE),
        "output.dense": ("fc2", TRANSPOSE),
        "layernorm_before": ("layernorm_before", IDENTITY),
        "layernorm_after": ("layernorm_after", IDENTITY),
    }
    for i in range(layers):
        for theirs, (ours, transform) in names.items():
            weight = "kernel" if transform is TRANSPOSE else "scale"
            rules.append(Rule(f"{hf}encoder.layer.{i}.{theirs}.weight",
                              f"{path}layers.{i}.{ours}.{weight}", transform))  # fmt: skip
            rules.append(Rule(f"{hf}encoder.layer.{i}.{theirs}.bias",
                              f"{path}layers.{i}.{ours}.bias"))  # fmt: skip
    return rules


def hidden_states(x: jax.Array, patches: PatchEmbed, tokens: list[jax.Array],
                  position: jax.Array, dropout: Dropout,
                  rngs: nnx.Rngs | None) -> jax.Array:  # fmt: skip
    """Patch embeddings after the special ``tokens`` (each ``(1, 1, hidden)``), plus positions."""
    x = patches(x)
    b = x.shape[0]
    special = [jnp.broadcast_to(t.astype(x.dtype), (b, 1, x.shape[-1])) for t in tokens]
    x = jnp.concatenate([*special, x], axis=1) + position.astype(x.dtype)
    return dropout(x, rngs=rngs)


# ---------------------------------------------------------------------------------- ViT
def channels_last(pixel_values: Any, channels: int, size: tuple[int, int] | None) -> jax.Array:
    """``(B, C, H, W)`` or ``(B, H, W, C)`` images -> ``(B, H, W, C)``, checked against the
    model's ``channels`` and ``size`` (any size when None: interpolated positions).

    >>> channels_last(jnp.zeros((1, 3, 4, 4)), 3, (4, 4)).shape
    (1, 4, 4, 3)
    """
    x = jnp.asarray(pixel_values)
    if x.ndim != 4:
        raise ValueError(
            f"pixel_values must be (batch, {channels}, height, width) or (batch, height, width, "
            f"{channels}), got shape {tuple(x.shape)}"
        )
    first = x.shape[1] == channels and (size is None or tuple(x.shape[2:]) == size)
    last = x.shape[-1] == channels and (size is None or tuple(x.shape[1:3]) == size)
    if first:
        x = jnp.transpose(x, (0, 2, 3, 1))
    elif not last and size is None:
        raise ValueError(
            f"pixel_values of shape {tuple(x.shape)} do not have the model's {channels} channels "
            f"first or last"
        )
    elif not last:
        raise ValueError(
            f"pixel_values of shape {tuple(x.shape)} do not fit the model: it takes "
            f"{size[0]}x{size[1]} images (config.json image_size) with {channels} channels, as "
            f"(batch, {channels}, {size[0]}, {size[1]}) or (batch, {size[0]}, {size[1]}, "
            f"{channels}); resize them as the checkpoint's preprocessor does, or pass "
            "interpolate_pos_encoding=True"
        )
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


def bicubic_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` weights of PyTorch's bicubic resize (``align_corners=False``, cubic
    coefficient -0.75, edge samples repeated) along one axis.

    >>> bicubic_matrix(3, 3).round(6).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    a = -0.75

    def near(x: float) -> float:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: float) -> float:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    out = np.zeros((n_out, n_in))
    for d in range(n_out):
        src = (n_in / n_out) * (d + 0.5) - 0.5
        i = math.floor(src)
        t = src - i
        for k, w in zip(range(i - 1, i + 3), (far(t + 1), near(t), near(1 - t), far(2 - t)),
                        strict=True):  # fmt: skip
            out[d, min(max(k, 0), n_in - 1)] += w
    return out


def interpolate_positions(position: jax.Array, grid: tuple[int, int],
                          new_grid: tuple[int, int]) -> jax.Array:  # fmt: skip
    """``(1, 1 + gh * gw, D)`` position embeddings (``[CLS]`` first) resized to ``new_grid``
    patches by bicubic interpolation, as ``transformers``' ``interpolate_pos_encoding``."""
    if new_grid == grid:
        return position
    cls, patches = position[:, :1], position[0, 1:].reshape(*grid, -1)
    rows = jnp.asarray(bicubic_matrix(grid[0], new_grid[0]), position.dtype)
    cols = jnp.asarray(bicubic_matrix(grid[1], new_grid[1]), position.dtype)
    patches = jnp.einsum("hi,ijd,wj->hwd", rows, patches, cols)
    return jnp.concatenate([cls, patches.reshape(1, -1, patches.shape[-1])], axis=1)


class ViTEmbeddings(nnx.Module):
    """``[CLS]`` token, patch embeddings and learned position embeddings."""

    def __init__(self, config: Mapping[str, Any], s: Settings, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        self.image_size = pair(config.get("image_size", 224), "image_size")
        self.patch = patch = pair(config.get("patch_size", 16), "patch_size")
        self.channels = positive(config, "num_channels", 3)
        for side, image, p in zip(("height", "width"), self.image_size, patch, strict=True):
            if image % p:
                raise ValueError(
                    f"config.json: image_size {side} {image} is not a multiple of patch_size {p}"
                )
        n = (self.image_size[0] // patch[0]) * (self.image_size[1] // patch[1])
        trunc = nnx.initializers.truncated_normal(s.init_std)
        self.cls_token = nnx.Param(trunc(rngs.params(), (1, 1, s.hidden), param_dtype),
                                   **axes(None, None, "embed"))  # fmt: skip
        self.position_embeddings = nnx.Param(
            trunc(rngs.params(), (1, n + 1, s.hidden), param_dtype), **axes(None, None, "embed")
        )
        self.patch_embeddings = PatchEmbed(self.channels, s.hidden, patch, patch, s, dtype=dtype,
                                           param_dtype=param_dtype, rngs=rngs)  # fmt: skip
        self.dropout = Dropout(s.dropout, deterministic=False)

    def __call__(self, pixel_values: Any, rngs: nnx.Rngs | None) -> jax.Array:
        return self.embed(pixel_values, False, rngs)

    def embed(self, pixel_values: Any, interpolate: bool | None,
              rngs: nnx.Rngs | None) -> jax.Array:  # fmt: skip
        """The tokens of ``pixel_values``; with ``interpolate``, images of any size at least one
        patch, the position embeddings resized to their patch grid."""
        x = channels_last(pixel_values, self.channels, None if interpolate else self.image_size)
        position = self.position_embeddings[...]
        if interpolate:
            (h, w), (ph, pw) = x.shape[1:3], self.patch
            if h < ph or w < pw:
                raise ValueError(f"pixel_values of {h}x{w} are smaller than one {ph}x{pw} patch")
            grid = (self.image_size[0] // ph, self.image_size[1] // pw)
            position = interpolate_positions(position, grid, (h // ph, w // pw))
        return hidden_states(x, self.patch_embeddings, [self.cls_token[...]], position,
                             self.dropout, rngs)  # fmt: skip


class Pooler(nnx.Module):
    """``act(dense(hidden[:, 0]))``, ``transformers``' ``ViTPooler``."""

    def __init__(self, config: Mapping[str, Any], s: Settings, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        size = config.get("pooler_output_size") or s.hidden
        self.dense = _dense(s.hidden, size, (None, "embed"), s, dtype=dtype,
                            param_dtype=param_dtype, rngs=rngs)  # fmt: skip
        self.act = activation({"pooler_act": config.get("pooler_act", "tanh")}, "pooler_act")

    def __call__(self, hidden: jax.Array) -> jax.Array:
        return self.act(self.dense(hidden[:, 0]))


class ViTBody(nnx.Module):
    """``ViTModel`` without its pooler (the encoder of ``ViTForImageClassification``)."""

    def __init__(self, config: Mapping[str, Any], *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        s = Settings(config)
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.embeddings = ViTEmbeddings(config, s, **kw)
        self.encoder = Encoder(s, **kw)

    def __call__(self, pixel_values: Any, rngs: nnx.Rngs | None,
                 interpolate_pos_encoding: bool | None = None) -> jax.Array:  # fmt: skip
        tokens = self.embeddings.embed(pixel_values, interpolate_pos_encoding, rngs)
        return self.encoder(tokens, rngs)


class ViTForImageClassification(nnx.Module):
    """ViT with a linear classifier on the ``[CLS]`` token; returns logits ``(batch, labels)``."""

    head_modules = ("classifier",)  # what Trainer(trainable="head") trains

    def __init__(self, config: Mapping[str, Any], num_labels: int, *, dtype: Any = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> None:  # fmt: skip
        s = Settings(config)
        self.vit = ViTBody(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.classifier = _dense(s.hidden, num_labels, ("embed", "classes"), s, dtype=dtype,
                                 param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, pixel_values: Any, *, interpolate_pos_encoding: bool | None = None,
                 rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        hidden = self.vit(pixel_values, rngs, interpolate_pos_encoding)
        return self.classifier(hidden[:, 0]).astype(jnp.float32)


class ViTModel(nnx.Module):
    """The bare ViT encoder (task ``"feature-extraction"``): ``last_hidden_state`` ``(batch, 1 +
    patches, hidden)``, or the pooler's output ``(batch, pooler_output_size)`` with
    ``output="pooler_output"``."""

    head_modules = ("pooler",)

    def __init__(self, config: Mapping[str, Any], *, dtype: Any = None,
                 param_dtype: Any = jnp.float32, rngs: nnx.Rngs) -> None:  # fmt: skip
        s = Settings(config)
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.embeddings = ViTEmbeddings(config, s, **kw)
        self.encoder = Encoder(s, **kw)
        self.pooler = Pooler(config, s, **kw)

    def __call__(self, pixel_values: Any, *, output: str = "last_hidden_state",
                 interpolate_pos_encoding: bool | None = None,
                 rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        tokens = self.embeddings.embed(pixel_values, interpolate_pos_encoding, rngs)
        hidden = self.encoder(tokens, rngs)
        return hidden if output == "last_hidden_state" else self.pooler(hidden)


# ---------------------------------------------------------------------------------- family
def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"model_type 'vit' supports the tasks {TASKS}, got task {task!r}")


def build(config: dict, *, task: str, num_labels: int | None, dtype: Any, param_dtype: Any,
          rngs: nnx.Rngs) -> nnx.Module:  # fmt: skip
    """The NNX model of ``config`` for ``task`` (random weights: :func:`rules` maps a checkpoint's
    tensors onto it)."""
    _check_task(task)
    param_dtype = param_dtype or jnp.float32
    if task == "feature-extraction":
        return ViTModel(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    return ViTForImageClassification(config, config_num_labels(config, num_labels), dtype=dtype,
                                     param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list[Rule]:
    """Checkpoint tensor -> model parameter, for ``task``: ``ViTForImageClassification``
    checkpoints name the encoder ``vit.*``, ``ViTModel`` ones have no prefix (and a pooler)."""
    _check_task(task)
    layers = positive(config, "num_hidden_layers", 12)
    if task == "feature-extraction":
        hf, path = "", ""
        head = [Rule("pooler.dense.weight", "pooler.dense.kernel", TRANSPOSE),
                Rule("pooler.dense.bias", "pooler.dense.bias")]  # fmt: skip
    else:
        hf, path = "vit.", "vit."
        head = [Rule("classifier.weight", "classifier.kernel", TRANSPOSE),
                Rule("classifier.bias", "classifier.bias")]  # fmt: skip
    embeddings = [
        Rule(f"{hf}embeddings.cls_token", f"{path}embeddings.cls_token"),
        Rule(f"{hf}embeddings.position_embeddings", f"{path}embeddings.position_embeddings"),
        Rule(f"{hf}embeddings.patch_embeddings.projection.weight",
             f"{path}embeddings.patch_embeddings.kernel", CONV2D),
        Rule(f"{hf}embeddings.patch_embeddings.projection.bias",
             f"{path}embeddings.patch_embeddings.bias"),
    ]  # fmt: skip
    return embeddings + encoder_rules(hf, f"{path}encoder.", layers) + head


def architecture(task: str) -> str:
    """The ``transformers`` class written to ``config.json``'s ``architectures``."""
    _check_task(task)
    return "ViTModel" if task == "feature-extraction" else "ViTForImageClassification"


def preprocessor(folder: Path, config: dict) -> ImageProcessor:
    """The checkpoint's ``preprocessor_config.json`` as an :class:`ImageProcessor`, refused when
    the size it makes does not fit the model."""
    return processor_for(folder, config, "image", for_model)


def processor_for(folder: Path, config: dict, kind: str, make: Callable) -> Any:
    """``make(values, config, where)`` of ``folder``'s ``preprocessor_config.json``, or an error
    naming the folder when it has none."""
    path = Path(folder) / "preprocessor_config.json"
    if checkpoint_file(folder, path.name) is None:
        raise CheckpointError(
            f"{folder} has no preprocessor_config.json: the {kind} preprocessing of model_type "
            f"{config.get('model_type')!r} is read from it"
        )
    return make(read_json(path, "preprocessor config"), config, str(path))


# the config.json fields a ViT-like encoder reads (jaxfeed.models.hub.config_check's kinds)
VIT_FIELDS: dict[str, Any] = {
    "hidden_size": "count", "num_hidden_layers": "count", "num_attention_heads": "count",
    "intermediate_size": "count", "hidden_act": tuple(ACTIVATIONS),
    "layer_norm_eps": "positive", "hidden_dropout_prob": "rate",
    "attention_probs_dropout_prob": "rate", "initializer_range": "std", "qkv_bias": "bool",
    "num_channels": "count",
}  # fmt: skip
# transformers >= 5 renamed ViT's modules (the checkpoints keep the old names); PEFT names adapters
# by the live modules: (pattern, replacement) on a checkpoint module name, first match wins
VIT_RENAMES = (
    (r"(^|\.)encoder\.layer\.(\d+)\.attention\.attention\.query$", r"\1layers.\2.attention.q_proj"),
    (r"(^|\.)encoder\.layer\.(\d+)\.attention\.attention\.key$", r"\1layers.\2.attention.k_proj"),
    (r"(^|\.)encoder\.layer\.(\d+)\.attention\.attention\.value$", r"\1layers.\2.attention.v_proj"),
    (r"(^|\.)encoder\.layer\.(\d+)\.attention\.output\.dense$", r"\1layers.\2.attention.o_proj"),
    (r"(^|\.)encoder\.layer\.(\d+)\.intermediate\.dense$", r"\1layers.\2.mlp.fc1"),
    (r"(^|\.)encoder\.layer\.(\d+)\.output\.dense$", r"\1layers.\2.mlp.fc2"),
)  # fmt: skip
FAMILY = Family(
    model_types=("vit",),
    tasks=TASKS,
    default_task="image-classification",
    build=build,
    rules=rules,
    architecture=architecture,
    prefix="vit",
    preprocessor=preprocessor,
    tasks_by_architecture=(
        ("ViTForImageClassification", "image-classification"),
        ("ViTModel", "feature-extraction"),
    ),
    lora_targets=("query", "value"),
    module_renames=VIT_RENAMES,
    config_fields=VIT_FIELDS,
    divides=None,  # ViT's attention splits hidden_size by heads at build time (its own check)
)

__all__ = ["FAMILY", "Encoder", "ViTForImageClassification", "ViTModel", "channels_last"]
