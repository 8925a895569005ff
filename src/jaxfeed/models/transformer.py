"""Transformers for token sequences: an encoder classifier and a decoder-only language model.

Both are pre-norm (LayerNorm before attention and before the MLP, residual around each), with
multi-head self-attention written as two einsums so that every mask is explicit:

* :class:`TransformerClassifier` attends only to real tokens (``attention_mask``), numbers them
  from 0 whatever the side of the padding, and pools the real tokens (``"mean"``) or takes the
  first real one (``"first"``): its outputs for a row do not depend on how much it is padded.
* :class:`TransformerLM` is causal and never attends across ``segment_ids`` (packed rows, as
  :class:`jaxfeed.Packing` writes them), with ``positions`` restarting in each segment; with only
  an ``attention_mask`` (left or right padding) the real tokens form one segment.

Positions are ``"learned"`` (a table of ``max_length`` rows) or ``"rotary"`` (RoPE on queries and
keys, no table). Parameters carry logical axis names for ``Trainer(sharding={...})``: ``"embed"``
(model width), ``"heads"`` (attention projections), ``"mlp"``, ``"vocab"`` and ``"classes"``.
Masked attention logits are set to the dtype's most negative value, so a fully masked query
(a padding position) gives finite values and never NaN.

Dropout (``dropout_rate``) takes its key at call time (``rngs=``, which the Trainer passes);
call ``model.eval()`` for inference, as for :class:`~jaxfeed.models.CNN`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.dropout import Dropout
from jaxfeed.models.nnx import axes

POSITIONS = ("learned", "rotary")
POOLINGS = ("mean", "first")


# ---------------------------------------------------------------------------------- masks
@jax.jit
def run_positions(segments: jax.Array) -> jax.Array:
    """Positions counted from 0 in each run of equal consecutive ``segments`` values, per row.

    >>> import jax.numpy as jnp
    >>> run_positions(jnp.array([[1, 1, 1, 2, 2, 0], [0, 0, 1, 1, 1, 1]])).tolist()
    [[0, 1, 2, 0, 1, 0], [0, 1, 0, 1, 2, 3]]
    """
    t = jnp.arange(segments.shape[1], dtype=jnp.int32)[None, :]
    new = jnp.concatenate(
        [jnp.ones_like(segments[:, :1], bool), segments[:, 1:] != segments[:, :-1]], axis=1
    )
    start = jax.lax.cummax(jnp.where(new, t, 0), axis=1)
    return (t - start).astype(jnp.int32)


@jax.jit
def real_positions(attention_mask: jax.Array) -> jax.Array:
    """Positions of the real tokens counted from 0 (padding on either side takes none).

    >>> import jax.numpy as jnp
    >>> real_positions(jnp.array([[0, 0, 1, 1, 1], [1, 1, 0, 0, 0]])).tolist()
    [[0, 0, 0, 1, 2], [0, 1, 1, 1, 1]]
    """
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)


@jax.jit
def causal_segment_mask(segments: jax.Array) -> jax.Array:
    """``(batch, 1, T, T)`` booleans: query ``q`` may attend key ``k`` when ``k <= q`` and both
    are in the same segment.

    >>> import jax.numpy as jnp
    >>> causal_segment_mask(jnp.array([[1, 1, 2]]))[0, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    """
    t = segments.shape[1]
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
    same = segments[:, :, None] == segments[:, None, :]
    return (causal[None] & same)[:, None]


@jax.jit
def rotary(x: jax.Array, positions: jax.Array, base: float = 10_000.0) -> jax.Array:
    """Rotary position embedding (RoPE, rotate-half form) of ``x`` ``(B, T, heads, head_dim)``
    at integer ``positions`` ``(B, T)``.

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 2, 1, 4))
    >>> bool(jnp.allclose(rotary(q, jnp.array([[0, 0]]))[0, 0], q[0, 0]))  # position 0: unchanged
    True
    """
    half = x.shape[-1] // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions.astype(jnp.float32)[..., None] * freq  # (B, T, half)
    sin, cos = jnp.sin(angle)[:, :, None, :], jnp.cos(angle)[:, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def _as_ids(input_ids: jax.Array, vocab_size: int) -> jax.Array:
    if input_ids.ndim != 2:
        raise ValueError(
            f"input_ids must be (batch, length) token ids, got shape {input_ids.shape}"
        )
    if not isinstance(input_ids, jax.core.Tracer) and input_ids.size:  # an eager call: check
        low, high = int(jnp.min(input_ids)), int(jnp.max(input_ids))  # (jitted: the Trainer does)
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"input_ids holds token id {low if low < 0 else high}, outside the model's "
                f"vocabulary of {vocab_size} ids (0..{vocab_size - 1})"
            )
    return input_ids.astype(jnp.int32)


def _ones(input_ids: jax.Array) -> jax.Array:
    return jnp.ones(input_ids.shape, jnp.int32)


@jax.jit
def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Scaled dot-product attention of ``(B, T, heads, head_dim)`` queries, keys and values under
    a boolean ``mask`` broadcastable to ``(B, heads, T, T)``; softmax in float32, masked logits
    at float32's minimum (a fully masked query gets finite values, never NaN).

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 2, 1, 2))
    >>> v = jnp.array([[[[1.0, 1.0]], [[3.0, 3.0]]]])
    >>> attend(q, q, v, jnp.array([[[[True, False], [True, True]]]]))[0, :, 0, 0].tolist()
    [1.0, 2.0]
    """
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    logits = logits / math.sqrt(q.shape[-1])
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


# ---------------------------------------------------------------------------------- layers
class SelfAttention(nnx.Module):
    """Multi-head self-attention under an explicit boolean mask, optionally with RoPE."""

    def __init__(self, dim: int, num_heads: int, *, rotary: bool, rngs: nnx.Rngs) -> None:
        if dim % num_heads:
            raise ValueError(f"dim {dim} must be a multiple of num_heads {num_heads}")
        self.num_heads, self.head_dim, self.rotary = num_heads, dim // num_heads, rotary
        if rotary and self.head_dim % 2:
            raise ValueError(f"rotary positions need an even head size, got {self.head_dim}")
        proj = {"kernel_metadata": axes("embed", "heads"), "bias_metadata": axes("heads")}
        self.query = nnx.Linear(dim, dim, rngs=rngs, **proj)
        self.key = nnx.Linear(dim, dim, rngs=rngs, **proj)
        self.value = nnx.Linear(dim, dim, rngs=rngs, **proj)
        self.out = nnx.Linear(dim, dim, rngs=rngs, kernel_metadata=axes("heads", "embed"),
                              bias_metadata=axes("embed"))  # fmt: skip

    def __call__(self, x: jax.Array, mask: jax.Array, positions: jax.Array) -> jax.Array:
        b, t, dim = x.shape
        shape = (b, t, self.num_heads, self.head_dim)
        q, k, v = (layer(x).reshape(shape) for layer in (self.query, self.key, self.value))
        if self.rotary:
            q, k = rotary(q, positions), rotary(k, positions)
        return self.out(attend(q, k, v, mask).reshape(b, t, dim))


class Block(nnx.Module):
    """Pre-norm transformer block: ``x + attention(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, dropout_rate: float, *,
                 rotary: bool, rngs: nnx.Rngs) -> None:  # fmt: skip
        norm = {"scale_metadata": axes("embed"), "bias_metadata": axes("embed")}
        self.norm1 = nnx.LayerNorm(dim, rngs=rngs, **norm)
        self.attention = SelfAttention(dim, num_heads, rotary=rotary, rngs=rngs)
        self.norm2 = nnx.LayerNorm(dim, rngs=rngs, **norm)
        self.mlp_in = nnx.Linear(dim, mlp_dim, rngs=rngs, kernel_metadata=axes("embed", "mlp"),
                                 bias_metadata=axes("mlp"))  # fmt: skip
        self.mlp_out = nnx.Linear(mlp_dim, dim, rngs=rngs, kernel_metadata=axes("mlp", "embed"),
                                  bias_metadata=axes("embed"))  # fmt: skip
        self.dropout = Dropout(dropout_rate, deterministic=False)

    def __call__(self, x: jax.Array, mask: jax.Array, positions: jax.Array,
                 rngs: nnx.Rngs | None) -> jax.Array:  # fmt: skip
        x = x + self.dropout(self.attention(self.norm1(x), mask, positions), rngs=rngs)
        hidden = nnx.gelu(self.mlp_in(self.norm2(x)))
        return x + self.dropout(self.mlp_out(hidden), rngs=rngs)


class Trunk(nnx.Module):
    """Token (and learned position) embeddings, ``depth`` blocks and a final LayerNorm."""

    def __init__(self, vocab_size: int, dim: int, depth: int, num_heads: int, mlp_dim: int,
                 max_length: int, positions: str, dropout_rate: float, *,
                 rngs: nnx.Rngs) -> None:  # fmt: skip
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        for name, value in (("vocab_size", vocab_size), ("dim", dim), ("depth", depth),
                            ("num_heads", num_heads), ("max_length", max_length)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.max_length = max_length
        self.learned = positions == "learned"
        self.embed = nnx.Embed(
            vocab_size, dim, rngs=rngs, embedding_metadata=axes("vocab", "embed")
        )
        self.position = (
            nnx.Embed(max_length, dim, rngs=rngs, embedding_metadata=axes(None, "embed"))
            if self.learned
            else None
        )
        self.blocks = nnx.List(
            [
                Block(dim, num_heads, mlp_dim, dropout_rate, rotary=not self.learned, rngs=rngs)
                for _ in range(depth)
            ]
        )
        self.norm = nnx.LayerNorm(dim, rngs=rngs, scale_metadata=axes("embed"),
                                  bias_metadata=axes("embed"))  # fmt: skip
        self.dropout = Dropout(dropout_rate, deterministic=False)

    def __call__(self, ids: jax.Array, mask: jax.Array, positions: jax.Array,
                 rngs: nnx.Rngs | None) -> jax.Array:  # fmt: skip
        length = ids.shape[1]
        if self.learned and isinstance(length, int) and length > self.max_length:
            raise ValueError(
                f"sequences of {length} tokens are longer than the model's max_length "
                f"{self.max_length} (learned positions): truncate them or build the model with a "
                "larger max_length"
            )
        x = self.embed(ids)
        if self.position is not None:
            x = x + self.position(jnp.minimum(positions, self.max_length - 1))
        x = self.dropout(x, rngs=rngs)
        for block in self.blocks:
            x = block(x, mask, positions, rngs)
        return self.norm(x)


# ---------------------------------------------------------------------------------- models
class TransformerClassifier(nnx.Module):
    """A pre-norm transformer encoder over token ids, pooled into class logits (or regression
    values).

    ``__call__(input_ids, attention_mask=None)`` takes ``(batch, length)`` ids and a 0/1 mask
    (None: every token is real) and returns ``(batch, num_classes)`` float32 outputs. Only real
    tokens are attended to and pooled, and positions count real tokens only, so a row gives the
    same outputs however it is padded (left or right). ``pooling="mean"`` averages the real tokens'
    final states, ``"first"`` takes the first real token (e.g. ``[CLS]``). For regression use
    ``num_classes=1`` (one value per row; ``num_classes=k`` for ``k`` targets) with
    ``loss="mse"``. ``positions="learned"`` needs sequences of at most ``max_length``;
    ``"rotary"`` has no limit.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> model = TransformerClassifier(100, 3, dim=32, depth=1, num_heads=2, rngs=nnx.Rngs(0))
    >>> model.eval()
    >>> ids = jnp.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]])
    >>> mask = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    >>> logits = model(ids, mask)
    >>> logits.shape
    (2, 3)
    >>> bool(jnp.allclose(model(ids[:1, :3])[0], logits[0], atol=1e-5))   # padding changes nothing
    True
    """

    symbolic_length = True  # jaxfeed.export keeps the sequence length symbolic too

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        dim: int = 128,
        depth: int = 2,
        num_heads: int = 4,
        mlp_dim: int | None = None,
        max_length: int = 512,
        positions: str = "learned",
        pooling: str = "mean",
        dropout_rate: float = 0.1,
        rngs: nnx.Rngs,
    ) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        mlp_dim = 4 * dim if mlp_dim is None else mlp_dim
        settings = {
            "vocab_size": vocab_size, "num_classes": num_classes, "dim": dim, "depth": depth,
            "num_heads": num_heads, "mlp_dim": mlp_dim, "max_length": max_length,
            "positions": positions, "pooling": pooling, "dropout_rate": dropout_rate,
        }  # fmt: skip
        self.settings = tuple(settings.items())  # hashable: the graph is a static jit argument
        self.num_classes, self.vocab_size, self.max_length = num_classes, vocab_size, max_length
        self.pooling = pooling
        self.trunk = Trunk(vocab_size, dim, depth, num_heads, mlp_dim, max_length, positions,
                           dropout_rate, rngs=rngs)  # fmt: skip
        self.head = nnx.Linear(dim, num_classes, rngs=rngs, kernel_metadata=axes("embed", "classes"),
                               bias_metadata=axes("classes"))  # fmt: skip

    def config(self) -> dict[str, Any]:
        """Constructor arguments (without ``rngs``), for export."""
        return dict(self.settings)

    @property
    def max_input_length(self) -> int | None:
        """The longest sequence it takes: ``max_length`` with learned positions (rotary: None);
        an export declares it."""
        return self.max_length if self.trunk.learned else None

    def example_input(self, length: int = 8) -> tuple[jax.Array, jax.Array]:
        """One batch of ``(input_ids, attention_mask)``, for export."""
        ids = jnp.zeros((1, min(length, self.max_length)), jnp.int32)
        return ids, jnp.ones_like(ids)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None, *,
                 rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        ids = _as_ids(input_ids, self.vocab_size)
        real = _ones(ids) if attention_mask is None else attention_mask.astype(jnp.int32)
        keys = real.astype(bool)[:, None, None, :]  # (B, 1, 1, T): every query sees real keys
        x = self.trunk(ids, keys, real_positions(real), rngs)
        weights = real.astype(x.dtype)[..., None]
        if self.pooling == "mean":
            pooled = (x * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1.0)
        else:
            first = jnp.argmax(real, axis=1)
            pooled = jnp.take_along_axis(x, first[:, None, None], axis=1)[:, 0]
        return self.head(pooled).astype(jnp.float32)


class TransformerLM(nnx.Module):
    """A decoder-only causal transformer language model: ``(batch, length)`` token ids to
    ``(batch, length, vocab_size)`` float32 next-token logits.

    ``__call__(input_ids, attention_mask=None, segment_ids=None, positions=None)``: a token
    attends to earlier tokens of its own segment only. ``segment_ids`` and ``positions`` are what
    :class:`jaxfeed.Packing` writes (0 on padding; positions from 0 in each segment), so packed
    rows never see each other and each gives the logits it would alone. Without ``segment_ids``,
    the real tokens of ``attention_mask`` form one segment (left or right padding); without
    ``positions``, they count from 0 in each segment. ``tie_embeddings`` reuses the token table
    as the output layer. Train it with ``Trainer(loss="next_token")``; generate with
    :func:`jaxfeed.text.generate`.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> lm = TransformerLM(50, dim=32, depth=1, num_heads=2, max_length=16, rngs=nnx.Rngs(0))
    >>> lm.eval()
    >>> packed = jnp.array([[3, 4, 5, 6, 7, 0]])       # two rows packed, then padding
    >>> logits = lm(packed, segment_ids=jnp.array([[1, 1, 1, 2, 2, 0]]),
    ...             positions=jnp.array([[0, 1, 2, 0, 1, 0]]))
    >>> logits.shape
    (1, 6, 50)
    >>> bool(jnp.allclose(lm(packed[:, 3:5])[0], logits[0, 3:5], atol=1e-5))  # as if alone
    True
    """

    symbolic_length = True  # jaxfeed.export keeps the sequence length symbolic too

    def __init__(
        self,
        vocab_size: int,
        *,
        dim: int = 128,
        depth: int = 2,
        num_heads: int = 4,
        mlp_dim: int | None = None,
        max_length: int = 512,
        positions: str = "rotary",
        dropout_rate: float = 0.0,
        tie_embeddings: bool = True,
        rngs: nnx.Rngs,
    ) -> None:
        mlp_dim = 4 * dim if mlp_dim is None else mlp_dim
        settings = {
            "vocab_size": vocab_size, "dim": dim, "depth": depth, "num_heads": num_heads,
            "mlp_dim": mlp_dim, "max_length": max_length, "positions": positions,
            "dropout_rate": dropout_rate, "tie_embeddings": tie_embeddings,
        }  # fmt: skip
        self.settings = tuple(settings.items())  # hashable: the graph is a static jit argument
        self.vocab_size, self.max_length = vocab_size, max_length
        self.trunk = Trunk(vocab_size, dim, depth, num_heads, mlp_dim, max_length, positions,
                           dropout_rate, rngs=rngs)  # fmt: skip
        vocab = axes("embed", "vocab")
        self.head = (
            None
            if tie_embeddings
            else nnx.Linear(dim, vocab_size, use_bias=False, rngs=rngs, kernel_metadata=vocab)
        )

    def config(self) -> dict[str, Any]:
        """Constructor arguments (without ``rngs``), for export."""
        return dict(self.settings)

    @property
    def max_input_length(self) -> int | None:
        """The longest sequence it takes: ``max_length`` with learned positions (rotary: None);
        an export declares it."""
        return self.max_length if self.trunk.learned else None

    def example_input(self, length: int = 8) -> tuple[jax.Array, jax.Array]:
        """One batch of ``(input_ids, attention_mask)``, for export."""
        ids = jnp.zeros((1, min(length, self.max_length)), jnp.int32)
        return ids, jnp.ones_like(ids)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                 segment_ids: jax.Array | None = None, positions: jax.Array | None = None, *,
                 rngs: nnx.Rngs | None = None) -> jax.Array:  # fmt: skip
        ids = _as_ids(input_ids, self.vocab_size)
        if segment_ids is not None:
            segments = segment_ids.astype(jnp.int32)
            if attention_mask is not None:
                segments = jnp.where(attention_mask.astype(bool), segments, 0)
        elif attention_mask is not None:
            segments = attention_mask.astype(jnp.int32)
        else:
            segments = _ones(ids)
        where = run_positions(segments) if positions is None else positions.astype(jnp.int32)
        x = self.trunk(ids, causal_segment_mask(segments), where, rngs)
        if self.head is None:
            return self.trunk.embed.attend(x).astype(jnp.float32)
        return self.head(x).astype(jnp.float32)

    # ------------------------------------------------- generation with a key/value cache
    def init_cache(self, batch: int, length: int) -> tuple[tuple[jax.Array, jax.Array], ...]:
        """Zeroed key and value buffers ``(batch, length, heads, head_dim)`` per block, for
        :meth:`decode` (:func:`jaxfeed.text.generate` keeps one per call)."""
        first = self.trunk.blocks[0].attention
        shape = (batch, length, first.num_heads, first.head_dim)
        dtype = self.trunk.embed.embedding[...].dtype
        return tuple((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in self.trunk.blocks)

    def decode(self, input_ids: jax.Array, positions: jax.Array, key_mask: jax.Array,
               cache: tuple[tuple[jax.Array, jax.Array], ...],
               index: jax.Array) -> tuple[jax.Array, tuple]:  # fmt: skip
        """Run ``input_ids`` ``(B, T)`` placed at cache slots ``[index, index + T)`` (eval mode:
        no dropout): each token attends to the earlier slots where ``key_mask`` ``(B, S)`` is
        set, and to itself. Returns the last token's ``(B, vocab)`` float32 logits and the
        updated cache (the prompt once, then one token per step)."""
        trunk, t = self.trunk, input_ids.shape[1]
        slots = index + jnp.arange(t)
        mask = (jnp.arange(key_mask.shape[1])[None, :] <= slots[:, None])[None]
        mask = (mask & key_mask.astype(bool)[:, None, :])[:, None]  # (B, 1, T, S)
        x = trunk.embed(_as_ids(input_ids, self.vocab_size))
        if trunk.position is not None:
            x = x + trunk.position(jnp.minimum(positions, trunk.max_length - 1))
        new = []
        for block, (keys, values) in zip(trunk.blocks, cache, strict=True):
            x, keys, values = _cached_block(block, x, mask, positions, keys, values, index)
            new.append((keys, values))
        x = trunk.norm(x[:, -1:])
        logits = trunk.embed.attend(x) if self.head is None else self.head(x)
        return logits[:, 0].astype(jnp.float32), tuple(new)


def _cached_block(block: Block, x: jax.Array, mask: jax.Array, positions: jax.Array,
                  keys: jax.Array, values: jax.Array,
                  index: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:  # fmt: skip
    """``block`` on new tokens ``x``, their keys and values written into the cache at ``index``."""
    att = block.attention
    b, t, dim = x.shape
    h = block.norm1(x)
    shape = (b, t, att.num_heads, att.head_dim)
    q, k, v = (layer(h).reshape(shape) for layer in (att.query, att.key, att.value))
    if att.rotary:
        q, k = rotary(q, positions), rotary(k, positions)
    keys = jax.lax.dynamic_update_slice(keys, k.astype(keys.dtype), (0, index, 0, 0))
    values = jax.lax.dynamic_update_slice(values, v.astype(values.dtype), (0, index, 0, 0))
    x = x + att.out(
        attend(q, keys.astype(q.dtype), values.astype(q.dtype), mask).reshape(b, t, dim)
    )
    x = x + block.mlp_out(nnx.gelu(block.mlp_in(block.norm2(x))))
    return x, keys, values
