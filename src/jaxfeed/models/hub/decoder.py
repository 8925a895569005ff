"""The decoder-only transformer behind the Hub's causal language models (GPT-2, Llama, Mistral,
Qwen2, Qwen3), with a fixed-size key/value cache for generation.

One NNX module, :class:`CausalLM`, covers the families; a :class:`DecoderSpec` (read from the
checkpoint's ``config.json`` by each family module) says which variant: LayerNorm or RMSNorm,
learned or rotary positions (with ``llama3`` or ``linear`` frequency scaling), a fused or split
query/key/value projection, grouped-query attention (fewer key/value heads), attention biases,
a norm on queries and keys (Qwen3), a sliding window per layer (Mistral), a gated (SwiGLU) or
plain MLP, tied or untied output embeddings.

``model(input_ids=..., attention_mask=..., segment_ids=..., positions=...)`` returns
``(batch, length, vocab)`` float32 logits. A token attends to earlier tokens of its own segment
(``segment_ids`` as :class:`jaxfeed.Packing` writes them; without them the real tokens of
``attention_mask`` form one segment, padded on either side) and ``positions`` default to the
count of earlier tokens in its segment, as ``transformers.generate`` numbers a left-padded row.

For generation (:func:`jaxfeed.text.generate`), ``init_cache(batch, length)`` makes the
``(batch, length, kv_heads, head_dim)`` key and value buffers (for layers stored stacked, one
pair with a leading ``layers`` axis) and ``decode(input_ids, positions, key_mask, cache, index)``
writes the keys and values of the new tokens at slot ``index`` and returns the last token's
logits and the updated cache: the prompt goes through once (prefill), then one token per step,
and nothing changes shape. Stacked layers decode as one ``lax.scan`` (``model.scan``, as in
training), so the decode program holds one layer's code.

Every weight carries logical axis names: ``"vocab"``, ``"embed"``, ``"heads"`` (query and
attention output), ``"kv"`` (key and value projections), ``"mlp"``; norms of one head's width
have ``(None,)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxfeed.models.activations import ACTIVATIONS as ACT2FN
from jaxfeed.models.attention import attention, xla_attention
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.weights import IDENTITY, TRANSPOSE, Rule
from jaxfeed.models.nnx import axes
from jaxfeed.models.stacked import Stack, run_layers, scan_unroll, stacked_layers
from jaxfeed.models.transformer import run_positions

ROPE_TYPES = ("default", "linear", "llama3")
ACTIVATIONS = ("silu", "gelu_new", "gelu_pytorch_tanh", "gelu")

Cache = tuple[tuple[jax.Array, jax.Array], ...]


@dataclass(frozen=True)
class DecoderSpec:
    """The variant of decoder a checkpoint's ``config.json`` describes (hashable: the model's
    structure is a static argument of compiled programs)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_positions: int
    norm: str = "rms"  # "rms" or "layer"
    norm_eps: float = 1e-6
    activation: str = "silu"
    gated_mlp: bool = True
    positions: str = "rope"  # "rope" or "learned"
    inv_freq: tuple[float, ...] = ()
    fused_qkv: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    windows: tuple[int | None, ...] = ()  # sliding window per layer (None: full attention)
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "head_dim", "intermediate_size", "max_positions"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"config: {name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"config: num_attention_heads {self.num_heads} must be a multiple of "
                f"num_key_value_heads {self.num_kv_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"config: activation {self.activation!r} is not supported; supported: "
                f"{', '.join(ACTIVATIONS)}"
            )
        if self.positions == "rope" and (
            self.head_dim % 2 or len(self.inv_freq) * 2 != self.head_dim
        ):
            raise ValueError(f"config: rotary positions need an even head_dim, got {self.head_dim}")


def head_dim_of(config: dict, hidden: int, heads: int) -> int:
    """``head_dim`` from the config, or ``hidden / heads``, which must then divide exactly."""
    explicit = config.get("head_dim")
    if explicit:
        return int(explicit)
    if hidden % heads:
        raise ValueError(
            f"config.json: the hidden size {hidden} is not a multiple of the number of attention "
            f"heads {heads} (and no head_dim is given)"
        )
    return hidden // heads


def rope_frequencies(config: dict, head_dim: int) -> tuple[float, ...]:
    """RoPE inverse frequencies as ``transformers`` computes them (float32), with the scaling of
    ``rope_parameters`` / ``rope_scaling`` (``default``, ``linear``, ``llama3``).

    >>> f = rope_frequencies({"rope_theta": 10000.0}, 4)
    >>> [round(x, 4) for x in f]
    [1.0, 0.01]
    """
    params = dict(config.get("rope_parameters") or {})
    legacy = config.get("rope_scaling") or {}
    if legacy and not params.get("rope_type"):
        params.update(legacy)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind not in ROPE_TYPES:
        raise ValueError(
            f"config.json: rope scaling of type {kind!r} is not supported; supported: "
            f"{', '.join(ROPE_TYPES)}"
        )
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("config.json: partial_rotary_factor other than 1.0 is not supported")
    base = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = (np.float32(1.0) / (np.float32(base) ** exponent)).astype(np.float32)
    if kind == "linear":
        inv = inv / np.float32(params["factor"])
    elif kind == "llama3":
        try:
            factor = float(params["factor"])
            low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
            old = float(params["original_max_position_embeddings"])
        except KeyError as err:
            raise ValueError(f"config.json: rope scaling 'llama3' needs {err.args[0]!r}") from None
        wavelen = np.float32(2 * math.pi) / inv
        scaled = np.where(wavelen > old / low, inv / np.float32(factor), inv)
        smooth = (np.float32(old) / wavelen - np.float32(low)) / np.float32(high - low)
        smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    return tuple(float(x) for x in inv)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: tuple[float, ...]) -> jax.Array:
    """Rotate-half RoPE of ``x`` ``(B, T, heads, head_dim)`` at ``positions`` ``(B, T)``."""
    freq = jnp.asarray(inv_freq, jnp.float32)
    angle = positions.astype(jnp.float32)[..., None] * freq  # (B, T, half)
    angle = jnp.concatenate([angle, angle], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    half = x.shape[-1] // 2
    xf = x.astype(jnp.float32)
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def _activation(name: str, x: jax.Array) -> jax.Array:
    return ACT2FN[name](x)


def grouped_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Attention of queries ``(B, T, H, D)`` to keys and values ``(B, S, Hkv, D)`` (``H`` a
    multiple of ``Hkv``: grouped-query attention) under a boolean ``mask`` ``(B, T, S)``;
    softmax in float32, masked logits at float32's minimum (never NaN): the plain XLA path."""
    return xla_attention(q, k, v, mask)


class Norm(nnx.Module):
    """RMSNorm (``transformers``' Llama form: normalise in float32, then scale) or LayerNorm."""

    def __init__(self, size: int, kind: str, eps: float, *, names: tuple, param_dtype: Any,
                 dtype: Any) -> None:  # fmt: skip
        self.kind, self.eps, self.dtype = kind, eps, dtype
        self.scale = nnx.Param(jnp.ones((size,), param_dtype), **axes(*names))
        self.bias = (
            nnx.Param(jnp.zeros((size,), param_dtype), **axes(*names)) if kind == "layer" else None
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        if self.kind == "layer":
            xf = xf - xf.mean(-1, keepdims=True)
        xf = xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + self.eps)
        if self.kind == "rms":  # transformers: weight * normed.to(input dtype)
            return (self.scale[...] * xf.astype(x.dtype)).astype(self.dtype or x.dtype)
        out = xf * self.scale[...] + self.bias[...]
        return out.astype(self.dtype or x.dtype)


def _linear(n_in: int, n_out: int, names: tuple, bias: bool, *, dtype: Any, param_dtype: Any,
            rngs: nnx.Rngs) -> nnx.Linear:  # fmt: skip
    init = nnx.initializers.normal(0.02)
    return nnx.Linear(n_in, n_out, use_bias=bias, kernel_init=init, dtype=dtype,
                      param_dtype=param_dtype, kernel_metadata=axes(*names),
                      bias_metadata=axes(names[1]), rngs=rngs)  # fmt: skip


class Attention(nnx.Module):
    """Causal self-attention with RoPE or none, grouped key/value heads, an optional QK-norm,
    and the key/value cache."""

    def __init__(self, spec: DecoderSpec, window: int | None, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        s, kw = spec, {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.spec, self.window = spec, window
        q_size, kv_size = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        if s.fused_qkv:
            self.qkv = _linear(
                s.hidden_size, q_size + 2 * kv_size, ("embed", "heads"), s.qkv_bias, **kw
            )
        else:
            self.query = _linear(s.hidden_size, q_size, ("embed", "heads"), s.qkv_bias, **kw)
            self.key = _linear(s.hidden_size, kv_size, ("embed", "kv"), s.qkv_bias, **kw)
            self.value = _linear(s.hidden_size, kv_size, ("embed", "kv"), s.qkv_bias, **kw)
        self.out = _linear(q_size, s.hidden_size, ("heads", "embed"), s.out_bias, **kw)
        if s.qk_norm:
            norm = {"names": (None,), "param_dtype": param_dtype, "dtype": dtype}
            self.query_norm = Norm(s.head_dim, "rms", s.norm_eps, **norm)
            self.key_norm = Norm(s.head_dim, "rms", s.norm_eps, **norm)

    def project(self, x: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        s = self.spec
        b, t, _ = x.shape
        q_size, kv_size = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        if s.fused_qkv:
            fused = self.qkv(x)
            q, k, v = (
                fused[..., :q_size],
                fused[..., q_size : q_size + kv_size],
                fused[..., q_size + kv_size :],
            )
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)
        q = q.reshape(b, t, s.num_heads, s.head_dim)
        k = k.reshape(b, t, s.num_kv_heads, s.head_dim)
        v = v.reshape(b, t, s.num_kv_heads, s.head_dim)
        if s.qk_norm:
            q, k = self.query_norm(q), self.key_norm(k)
        if s.positions == "rope":
            q, k = apply_rope(q, positions, s.inv_freq), apply_rope(k, positions, s.inv_freq)
        return q, k, v

    def __call__(self, x: jax.Array, segments: jax.Array, positions: jax.Array) -> jax.Array:
        """Causal attention within each segment (``segments`` ``(B, T)``, 0 for padding), in
        this layer's window, through :func:`jaxfeed.models.attention.attention`."""
        b, t, _ = x.shape
        q, k, v = self.project(x, positions)
        slots = jnp.arange(t)
        window = (
            None
            if self.window is None
            else _windowed(jnp.ones((1, t, t), bool), self.window, slots, slots)
        )
        out = attention(q, k, v, segment_ids=segments, causal=True, mask=window)
        return self.out(out.reshape(b, t, -1))

    def cached(self, x: jax.Array, mask: jax.Array, positions: jax.Array,
               cache: tuple[jax.Array, jax.Array], index: jax.Array,
               layer: jax.Array | int | None = None,
               ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:  # fmt: skip
        """Attend to the cache with the new tokens' keys and values written at slot ``index``.
        ``cache`` is this layer's ``(B, S, kv_heads, head_dim)`` pair, or with ``layer`` the
        whole stack's ``(layers, B, S, ...)`` pair: only the new tokens' slots are written."""
        b, t, _ = x.shape
        q, k, v = self.project(x, positions)
        keys, values = cache
        at = (0, index, 0, 0) if layer is None else (layer, 0, index, 0, 0)
        lead = () if layer is None else (None,)
        keys = jax.lax.dynamic_update_slice(keys, k[lead].astype(keys.dtype), at)
        values = jax.lax.dynamic_update_slice(values, v[lead].astype(values.dtype), at)
        seen_k, seen_v = (
            (keys, values)
            if layer is None
            else (jax.lax.dynamic_index_in_dim(keys, layer, 0, keepdims=False),
                  jax.lax.dynamic_index_in_dim(values, layer, 0, keepdims=False))
        )  # fmt: skip
        out = grouped_attention(q, seen_k.astype(q.dtype), seen_v.astype(q.dtype), mask)
        return self.out(out.reshape(b, t, -1)), (keys, values)


class DecoderLayer(nnx.Module):
    """Pre-norm block: ``x + attention(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, spec: DecoderSpec, window: int | None, *, dtype: Any, param_dtype: Any,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        s, kw = spec, {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        norm = {"names": ("embed",), "param_dtype": param_dtype, "dtype": dtype}
        self.spec, self.window = spec, window
        self.attn_norm = Norm(s.hidden_size, s.norm, s.norm_eps, **norm)
        self.attention = Attention(s, window, **kw)
        self.mlp_norm = Norm(s.hidden_size, s.norm, s.norm_eps, **norm)
        if s.gated_mlp:
            self.gate = _linear(
                s.hidden_size, s.intermediate_size, ("embed", "mlp"), s.mlp_bias, **kw
            )
        self.up = _linear(s.hidden_size, s.intermediate_size, ("embed", "mlp"), s.mlp_bias, **kw)
        self.down = _linear(s.intermediate_size, s.hidden_size, ("mlp", "embed"), s.mlp_bias, **kw)

    def mlp(self, x: jax.Array) -> jax.Array:
        h = self.mlp_norm(x)
        if self.spec.gated_mlp:
            return self.down(_activation(self.spec.activation, self.gate(h)) * self.up(h))
        return self.down(_activation(self.spec.activation, self.up(h)))

    def __call__(self, x: jax.Array, segments: jax.Array, positions: jax.Array) -> jax.Array:
        x = x + self.attention(self.attn_norm(x), segments, positions)
        return x + self.mlp(x)

    def cached(self, x, mask, positions, cache, index, layer=None):
        out, cache = self.attention.cached(self.attn_norm(x), mask, positions, cache, index, layer)
        x = x + out
        return x + self.mlp(x), cache


def _windowed(mask: jax.Array, window: int | None, query_slots: jax.Array,
              key_slots: jax.Array) -> jax.Array:  # fmt: skip
    """``mask`` ``(B, T, S)`` limited to keys within ``window`` slots of the query (Mistral)."""
    if window is None:
        return mask
    return mask & (key_slots[None, None, :] > query_slots[None, :, None] - window)


class CausalLM(nnx.Module):
    """A decoder-only language model of one of the Hub's families (see the module docstring):
    ``(batch, length)`` token ids to ``(batch, length, vocab)`` float32 logits.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> spec = DecoderSpec(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2,
    ...                    num_kv_heads=1, head_dim=8, intermediate_size=32, max_positions=64,
    ...                    inv_freq=rope_frequencies({}, 8))
    >>> lm = CausalLM(spec, rngs=nnx.Rngs(0))
    >>> ids = jnp.array([[3, 4, 5, 6, 7, 0]])
    >>> logits = lm(input_ids=ids, segment_ids=jnp.array([[1, 1, 1, 2, 2, 0]]))
    >>> logits.shape
    (1, 6, 50)
    >>> bool(jnp.allclose(lm(input_ids=ids[:, 3:5])[0], logits[0, 3:5], atol=1e-5))  # as if alone
    True
    """

    symbolic_length = True
    supports_remat = True  # Trainer(remat=True): each layer's activations recomputed

    def __init__(self, spec: DecoderSpec, *, dtype: Any = None, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        self.spec, self.remat = spec, False
        self.scan = "auto"  # training's forward: one lax.scan over the stacked layers
        self.vocab_size, self.max_length = spec.vocab_size, spec.max_positions
        self.dtype = dtype
        init = nnx.initializers.normal(0.02)
        self.embed = nnx.Embed(spec.vocab_size, spec.hidden_size, dtype=dtype, param_dtype=param_dtype,
                               embedding_init=init, embedding_metadata=axes("vocab", "embed"),
                               rngs=rngs)  # fmt: skip
        self.position = (
            nnx.Embed(spec.max_positions, spec.hidden_size, dtype=dtype, param_dtype=param_dtype,
                      embedding_init=init, embedding_metadata=axes(None, "embed"), rngs=rngs)
            if spec.positions == "learned"
            else None
        )  # fmt: skip
        windows = spec.windows or (None,) * spec.num_layers
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        if len(set(windows)) == 1:  # one graph: stored stacked, scanned
            dt = {"dtype": dtype, "param_dtype": param_dtype}
            self.layers = stacked_layers(
                lambda r: DecoderLayer(spec, windows[0], **dt, rngs=r), spec.num_layers, rngs
            )
        else:  # windows that differ per layer: graphs that differ, run one after the other
            self.layers = nnx.List(
                [DecoderLayer(spec, windows[i], **kw) for i in range(spec.num_layers)]
            )
        self.norm = Norm(spec.hidden_size, spec.norm, spec.norm_eps, names=("embed",),
                         param_dtype=param_dtype, dtype=dtype)  # fmt: skip
        self.lm_head = (
            None
            if spec.tie_embeddings
            else _linear(spec.hidden_size, spec.vocab_size, ("embed", "vocab"), False, **kw)
        )

    def _embed(self, ids: jax.Array, positions: jax.Array) -> jax.Array:
        x = self.embed(ids)
        if self.position is not None:
            x = x + self.position(jnp.clip(positions, 0, self.spec.max_positions - 1))
        return x

    def _logits(self, x: jax.Array) -> jax.Array:
        x = self.norm(x)
        if self.lm_head is None:
            return self.embed.attend(x).astype(jnp.float32)
        return self.lm_head(x).astype(jnp.float32)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                 segment_ids: jax.Array | None = None, positions: jax.Array | None = None, *,
                 rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        del rngs  # no dropout: the Hub's decoders fine-tune without it
        ids = jnp.asarray(input_ids)
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be (batch, length) token ids, got shape {ids.shape}")
        ids = ids.astype(jnp.int32)
        t = ids.shape[1]
        if self.position is not None and isinstance(t, int) and t > self.spec.max_positions:
            raise ValueError(
                f"sequences of {t} tokens are longer than the model's {self.spec.max_positions} "
                "learned positions (n_positions): truncate them"
            )
        if segment_ids is not None:
            segments = jnp.asarray(segment_ids).astype(jnp.int32)
            if attention_mask is not None:
                segments = jnp.where(jnp.asarray(attention_mask).astype(bool), segments, 0)
        elif attention_mask is not None:
            segments = jnp.asarray(attention_mask).astype(jnp.int32)
        else:
            segments = jnp.ones(ids.shape, jnp.int32)
        where = (
            run_positions(segments)
            if positions is None
            else jnp.asarray(positions).astype(jnp.int32)
        )
        x = self._embed(ids, where)
        x = run_layers(self.layers, x, lambda layer, h, _: layer(h, segments, where),
                       remat=self.remat, scan=self.scan)  # fmt: skip
        return self._logits(x)

    # ------------------------------------------------------------------ generation
    def init_cache(self, batch: int, length: int) -> Cache:
        """Zeroed key and value buffers ``(batch, length, kv_heads, head_dim)`` per layer; for
        layers stored stacked, one pair ``(layers, batch, length, kv_heads, head_dim)``."""
        s = self.spec
        shape = (batch, length, s.num_kv_heads, s.head_dim)
        dtype = self.dtype or self.embed.embedding[...].dtype
        if isinstance(self.layers, Stack):
            shape = (len(self.layers), *shape)
            return ((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)),)
        return tuple(
            (jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(len(self.layers))
        )

    def decode(self, input_ids: jax.Array, positions: jax.Array, key_mask: jax.Array,
               cache: Cache, index: jax.Array) -> tuple[jax.Array, Cache]:  # fmt: skip
        """Run ``input_ids`` ``(B, T)`` placed at cache slots ``[index, index + T)``: each attends
        to the earlier slots where ``key_mask`` ``(B, S)`` is set, and to itself. Returns the
        last token's ``(B, vocab)`` float32 logits and the updated cache."""
        t, size = input_ids.shape[1], key_mask.shape[1]
        query_slots = index + jnp.arange(t)
        key_slots = jnp.arange(size)
        mask = (key_slots[None, :] <= query_slots[:, None])[None] & key_mask.astype(bool)[
            :, None, :
        ]
        x = self._embed(input_ids.astype(jnp.int32), positions)
        if isinstance(self.layers, Stack):
            x, cache = self._decode_stack(x, mask, query_slots, key_slots, positions, cache, index)
            return self._logits(x[:, -1:])[:, 0], cache
        new = []
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            x, layer_cache = layer.cached(x, _windowed(mask, layer.window, query_slots, key_slots),
                                          positions, layer_cache, index)  # fmt: skip
            new.append(layer_cache)
        return self._logits(x[:, -1:])[:, 0], tuple(new)

    def _decode_stack(self, x: jax.Array, mask: jax.Array, query_slots: jax.Array,
                      key_slots: jax.Array, positions: jax.Array, cache: Cache,
                      index: jax.Array) -> tuple[jax.Array, Cache]:  # fmt: skip
        """The stacked layers over the stacked cache: one ``lax.scan`` (``self.scan``, as in
        training; False: a loop over the layers' slices). Each layer reads its weights out of
        the stack where it runs and writes only the new tokens' slots of the cache."""
        stack = self.layers
        mask = _windowed(mask, stack.layer.window, query_slots, key_slots)
        graphdef, state = nnx.split(stack.layer)
        (keys, values), unroll = cache[0], scan_unroll(self.scan)

        def body(carry: tuple, inputs: tuple) -> tuple:
            h, kv = carry
            layer_state, i = inputs
            h, kv = nnx.merge(graphdef, layer_state).cached(h, mask, positions, kv, index, i)
            return (h, kv), None

        if not unroll:
            carry = (x, (keys, values))
            for i in range(len(stack)):
                carry, _ = body(carry, (jax.tree.map(lambda a, i=i: a[i], state), i))
            x, kv = carry
            return x, (kv,)
        layers = jnp.arange(len(stack), dtype=jnp.int32)
        (x, kv), _ = jax.lax.scan(body, (x, (keys, values)), (state, layers),
                                  unroll=min(unroll, len(stack)))  # fmt: skip
        return x, (kv,)


# ---------------------------------------------------------------------------------- families
TASKS = ("causal-lm",)


def _int(config: dict, *names: str, default: int | None = None) -> int:
    for name in names:
        if config.get(name) is not None:
            return int(config[name])
    if default is not None:
        return default
    raise ValueError(f"config.json has no {' or '.join(names)}")


def llama_like_spec(config: dict, *, qkv_bias: bool = False, out_bias: bool = False,
                    qk_norm: bool = False, windows: tuple[int | None, ...] = ()) -> DecoderSpec:  # fmt: skip
    """The :class:`DecoderSpec` of a Llama-shaped ``config.json`` (Llama, Mistral, Qwen2/3)."""
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    head_dim = head_dim_of(config, hidden, heads)
    act = config.get("hidden_act", "silu")
    return DecoderSpec(
        vocab_size=_int(config, "vocab_size"), hidden_size=hidden,
        num_layers=_int(config, "num_hidden_layers"), num_heads=heads,
        num_kv_heads=_int(config, "num_key_value_heads", default=heads), head_dim=head_dim,
        intermediate_size=_int(config, "intermediate_size"),
        max_positions=_int(config, "max_position_embeddings"), norm="rms",
        norm_eps=float(config.get("rms_norm_eps", 1e-6)), activation=act, gated_mlp=True,
        positions="rope", inv_freq=rope_frequencies(config, head_dim), qkv_bias=qkv_bias,
        out_bias=out_bias,
        mlp_bias=bool(config.get("mlp_bias", False)), qk_norm=qk_norm, windows=windows,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )  # fmt: skip


def layer_windows(config: dict) -> tuple[int | None, ...]:
    """Per-layer sliding windows from ``layer_types`` (Qwen2/3: ``"sliding_attention"`` layers,
    only when ``use_sliding_window``)."""
    window = config.get("sliding_window")
    types = config.get("layer_types") or ()
    if not window or not config.get("use_sliding_window", False):
        return ()
    return tuple(int(window) if t == "sliding_attention" else None for t in types)


def llama_like_rules(spec: DecoderSpec, *, prefix: str = "model") -> list:
    """Weight rules of a Llama-shaped checkpoint (``model.layers.N.self_attn.q_proj``...)."""
    rules = [Rule(f"{prefix}.embed_tokens.weight", "embed.embedding", IDENTITY),
             Rule(f"{prefix}.norm.weight", "norm.scale", IDENTITY)]  # fmt: skip
    if not spec.tie_embeddings:
        rules.append(Rule("lm_head.weight", "lm_head.kernel", TRANSPOSE))
    for i in range(spec.num_layers):
        hf, me = f"{prefix}.layers.{i}", f"layers.{i}"
        rules += [
            Rule(f"{hf}.input_layernorm.weight", f"{me}.attn_norm.scale", IDENTITY),
            Rule(f"{hf}.post_attention_layernorm.weight", f"{me}.mlp_norm.scale", IDENTITY),
            Rule(f"{hf}.mlp.gate_proj.weight", f"{me}.gate.kernel", TRANSPOSE),
            Rule(f"{hf}.mlp.up_proj.weight", f"{me}.up.kernel", TRANSPOSE),
            Rule(f"{hf}.mlp.down_proj.weight", f"{me}.down.kernel", TRANSPOSE),
        ]
        if spec.mlp_bias:
            rules += [Rule(f"{hf}.mlp.{n}_proj.bias", f"{me}.{n}.bias", IDENTITY)
                      for n in ("gate", "up", "down")]  # fmt: skip
        for hf_name, name in (("q", "query"), ("k", "key"), ("v", "value"), ("o", "out")):
            rules.append(Rule(f"{hf}.self_attn.{hf_name}_proj.weight",
                              f"{me}.attention.{name}.kernel", TRANSPOSE))  # fmt: skip
            has_bias = spec.out_bias if hf_name == "o" else spec.qkv_bias
            if has_bias:
                rules.append(Rule(f"{hf}.self_attn.{hf_name}_proj.bias",
                                  f"{me}.attention.{name}.bias", IDENTITY))  # fmt: skip
        if spec.qk_norm:
            rules += [Rule(f"{hf}.self_attn.q_norm.weight", f"{me}.attention.query_norm.scale"),
                      Rule(f"{hf}.self_attn.k_norm.weight", f"{me}.attention.key_norm.scale")]  # fmt: skip
    return rules


def build_lm(spec: DecoderSpec, config: dict, *, task: str, num_labels: int | None, dtype: Any,
             param_dtype: Any, rngs: nnx.Rngs) -> CausalLM:  # fmt: skip
    """The :class:`CausalLM` of ``spec``, keeping ``config`` as ``hub_config``."""
    if task not in TASKS:
        raise ValueError(
            f"{config.get('model_type')} checkpoints support the tasks {', '.join(TASKS)}, "
            f"not {task!r}"
        )
    if num_labels is not None:
        raise ValueError("num_labels has no meaning for a causal language model")
    model = CausalLM(spec, dtype=dtype, param_dtype=param_dtype or jnp.float32, rngs=rngs)
    model.hub_config = dict(config)
    model.hub_task = task
    return model


# the config.json fields a Llama-like decoder reads (jaxfeed.models.hub.config_check's kinds)
DECODER_FIELDS: dict[str, Any] = {
    "vocab_size": "count!", "hidden_size": "count!", "num_hidden_layers": "count!",
    "num_attention_heads": "count!", "intermediate_size": "count!",
    "max_position_embeddings": "count!", "num_key_value_heads": "count?", "head_dim": "count?",
    "hidden_act": ACTIVATIONS, "rms_norm_eps": "positive", "rope_theta": "positive",
    "tie_word_embeddings": "bool", "attention_bias": "bool", "mlp_bias": "bool",
    "initializer_range": "std", "sliding_window": "count?",
}  # fmt: skip


def llama_like_family(model_type: str, spec: Any, architecture: str) -> Family:
    """The :class:`Family` of a Llama-shaped causal LM whose variant ``spec(config)`` reads from
    its ``config.json`` (weights under ``model.``, named as Llama's; ``architecture`` is the
    `transformers` class written to ``architectures``).

    >>> family = llama_like_family("llama", lambda config: None, "LlamaForCausalLM")
    >>> family.model_types, family.architecture("causal-lm")
    (('llama',), 'LlamaForCausalLM')
    """

    def build(config: dict, *, task: str, num_labels=None, dtype=None, param_dtype=None, rngs):
        return build_lm(spec(config), config, task=task, num_labels=num_labels, dtype=dtype,
                        param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def rules(config: dict, task: str) -> list:
        return llama_like_rules(spec(config))

    return Family(
        model_types=(model_type,),
        tasks=TASKS,
        default_task="causal-lm",
        build=build,
        rules=rules,
        prefix="model",
        architecture=lambda task: architecture,
        lora_targets=("q_proj", "v_proj"),
        module_renames=(),
        config_fields=DECODER_FIELDS,
        divides=None,  # head_dim may be given; the decoder checks its heads when it builds
    )
