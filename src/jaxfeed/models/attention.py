"""One attention function for the Hub models, which picks the kernel: TPU's fused Pallas attention
where it applies, XLA's plain einsum-softmax-einsum everywhere else.

The choice is ``"auto"`` (the default: the fused kernel on a TPU for the shapes it takes, the
plain path otherwise), ``"xla"`` (always the plain path) or ``"flash"`` (the fused kernel, and a
clear error where it cannot run). Set it with the ``JAXFEED_ATTENTION`` environment variable or,
around the code that traces a model, with :func:`use_attention`; it is read when a step is
traced, so set it before the first compile (a second ``jax.jit`` of a function already traced
reuses that trace, whatever the setting is then).

The fused kernel is Pallas's splash attention (:data:`FUSED_KERNEL`; ``"flash"`` there selects
``jax.experimental.pallas.ops.tpu.flash_attention``). It takes padding masks as segment ids
(queries in segment 1, keys in 1 when real and 0 when padded), packed rows as their segment ids,
and causal masks. ``"auto"`` uses it on a single device only (on several, a step laid out by
XLA's partitioner cannot split the kernel), for heads of 128 or more, and for narrower heads
(64, as BERT-base's and Llama 1.1B's) at 512 tokens or more: on a TPU v5e, splash ran BERT-base
32x512 at MFU 0.505 (XLA's path 0.498) and Llama-shape 1.1B at 2048 tokens at 0.463 (XLA's path
0.348); at fewer tokens with narrow heads it was not measured faster. It refuses any other mask
(a sliding window), sequence lengths that are not multiples of 128 and head widths over 128 that
are not multiples of 128. Where ``"auto"`` does not take it on one TPU, self-attention with a
padding mask at most (no dropout, causality or segments) of up to 512 tokens runs jaxfeed's
short-sequence kernel (:data:`SHORT_KERNEL`, :mod:`jaxfeed.models.kernels.short_attention`):
ViT-B/16's step at 197 patches 132.0 ms against XLA's path's 159.7 on a TPU v5e. Every path
computes the softmax in float32; masked keys weigh nothing.

Dropout on the attention weights (``dropout=``: :func:`active_dropout`'s :class:`WeightDropout`
of jaxfeed's ``Dropout`` or a plain ``nnx.Dropout``) runs inside the fused kernel where the
kernel runs: jaxfeed's fork of splash (:mod:`jaxfeed.models.kernels.splash_dropout`) draws each
block's keep mask in the kernel from one seed per call (:meth:`WeightDropout.fused_draw`), the
same bits in the backward pass, with no mask in memory (its bits: :data:`DROPOUT_BITS`). It
refuses a dropout it cannot draw (a function, a module with its own call, ``broadcast_dims``),
and all attention dropout when :data:`FUSED_DROPOUT` is off or :data:`FUSED_KERNEL` is
``"flash"``: those run XLA's path, which saves a boolean keep mask (:data:`KEEP`).

>>> import jax.numpy as jnp
>>> q = k = v = jnp.ones((1, 4, 2, 8))
>>> attention(q, k, v, key_mask=jnp.array([[1, 1, 0, 0]])).shape
(1, 4, 2, 8)
>>> flash_refusal(q, k, v, implementation="auto")  # on a CPU
'the backend is cpu, not tpu'
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from jaxfeed.models.dropout import Dropout, dropout_key
from jaxfeed.runtime.prng import mask_bits

IMPLEMENTATIONS = ("auto", "xla", "flash")
#: The name of the attention weights (softmax output, in the values' dtype) that the backward pass
#: reuses; ``remat="attention"`` keeps them (see :data:`jaxfeed.models.stacked.REMAT_POLICIES`).
WEIGHTS = "attention_weights"
#: The name of the attention dropout's keep mask (booleans) that the backward pass reuses;
#: ``remat="attention"`` keeps it too (else the backward pass draws its random bits again).
KEEP = "attention_keep"
#: The name of the fused kernels' forward residuals (their output and log-sum-exp), which their
#: backward kernel reads; ``remat="attention"`` keeps them (else a checkpointed layer's backward
#: pass runs the forward kernel again).
RESIDUALS = "attention_fused_residuals"
ENV = "JAXFEED_ATTENTION"
BLOCK = 128  # the fused kernel's block of queries and keys: lengths must be multiples of it
#: The largest block the fused kernel is given (each length gets the longest of this and its
#: halves down to 128 that divides it). On a TPU v5e, BERT-base 32x512 with splash took 117.6
#: ms a step in blocks of 512; Pallas flash 161.3 ms in blocks of 512, 187.1 in 256.
FLASH_BLOCK = 512
#: The fused kernel ``"flash"`` and ``"auto"`` run: ``"splash"`` (Pallas's splash attention, see
#: :func:`splash_attention`; the default since the accelerator tier passed on it) or
#: ``"flash"`` (Pallas's flash attention).
FUSED_KERNEL = "splash"
#: Dropout on the attention weights inside the fused kernel (True: splash with dropout, see
#: :mod:`jaxfeed.models.kernels.splash_dropout`) or on XLA's path (False: the fused kernel is
#: refused whenever the attention weights are dropped, as before the fused dropout existed).
FUSED_DROPOUT = True
#: The fused dropout's random bits on a TPU: ``"hardware"`` (the chip's generator, seeded per
#: block) or ``"hash"`` (a keyed hash of each weight's position); Pallas's interpreter takes
#: ``"hash"`` (it has no hardware generator).
DROPOUT_BITS = "hardware"
#: With heads under :data:`BLOCK` wide, ``"auto"`` takes the fused kernel from this many tokens.
NARROW_HEADS_FROM = 512
#: Where the fused kernel is refused on a TPU, ``"auto"`` runs short self-attention (no dropout,
#: causality or segments; up to :data:`jaxfeed.models.kernels.short_attention.MAX_LENGTH` tokens)
#: in jaxfeed's one-block kernel (:mod:`jaxfeed.models.kernels.short_attention`) instead of XLA's
#: path (False: XLA's path, as before it existed).
SHORT_KERNEL = True
#: The plain path's logits (queries times keys) in float32 (True) or in the queries' dtype
#: (False, the default: bfloat16 on a chip, the matrix unit accumulating in float32): the softmax
#: reads them into float32 either way, but its passes over them move half the bytes.
LOGITS_IN_FLOAT32 = False
_override: list[str] = []


def current_implementation() -> str:
    """The attention kernel choice in force: :func:`use_attention`'s, else ``$JAXFEED_ATTENTION``,
    else ``"auto"``.

    >>> with use_attention("xla"):
    ...     current_implementation()
    'xla'
    """
    name = _override[-1] if _override else os.environ.get(ENV, "auto").strip().lower() or "auto"
    if name not in IMPLEMENTATIONS:
        raise ValueError(
            f"{ENV}={name!r}: the attention kernel is one of {', '.join(IMPLEMENTATIONS)}"
        )
    return name


@contextlib.contextmanager
def use_attention(name: str) -> Iterator[None]:
    """Trace the models' attention with ``name`` (``"auto"``, ``"xla"`` or ``"flash"``) inside
    the ``with`` block.

    >>> with use_attention("flash"):
    ...     current_implementation()
    'flash'
    """
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {', '.join(IMPLEMENTATIONS)}, got {name!r}")
    _override.append(name)
    try:
        yield
    finally:
        _override.pop()


def flash_refusal(q: jax.Array, k: jax.Array, v: jax.Array, *, mask: Any = None,
                  dropout: Any = None, causal: bool = False,
                  implementation: str = "auto") -> str | None:  # fmt: skip
    """Why the fused kernel does not run these inputs (None when it does): ``"xla"`` chosen, not
    a TPU, attention dropout the fused kernel cannot draw (see :func:`_fused_dropout_refusal`), an
    extra mask, or shapes the kernel refuses.

    >>> import jax.numpy as jnp
    >>> flash_refusal(jnp.ones((1, 4, 2, 8)), jnp.ones((1, 4, 2, 8)), None, implementation="xla")
    'attention="xla" was chosen'
    """
    t, s, d = q.shape[1], k.shape[1], q.shape[-1]
    if implementation == "xla":
        return 'attention="xla" was chosen'
    if jax.default_backend() != "tpu":
        return f"the backend is {jax.default_backend()}, not tpu"
    if implementation == "auto" and jax.device_count() > 1:
        return 'several devices (XLA\'s partitioner does not split the kernel; force "flash")'
    if dropout is not None and (why := _fused_dropout_refusal(dropout)) is not None:
        return why
    if mask is not None:
        return "a mask other than padding, segments and causality (a sliding window)"
    if (t % BLOCK or s % BLOCK) and (FUSED_KERNEL == "flash" or implementation == "auto"):
        return f"sequence lengths {t} and {s} must be multiples of {BLOCK}" + (
            ' (force "flash": splash pads them)' if FUSED_KERNEL != "flash" else ""
        )
    if d > BLOCK and d % BLOCK:
        return f"head width {d} must be at most {BLOCK} or a multiple of it"
    if implementation == "auto" and d < BLOCK and min(t, s) < NARROW_HEADS_FROM:
        return (
            f"head width {d} under {BLOCK} at {min(t, s)} tokens (under {NARROW_HEADS_FROM}): "
            'not measured faster than XLA\'s path on a TPU v5e; force "flash"'
        )
    if causal and t != s:
        return f"causal attention of {t} queries to {s} keys (a cache)"
    return None


def short_refusal(q: jax.Array, k: jax.Array, v: jax.Array, *, key_mask: Any = None,
                  segment_ids: Any = None, causal: bool = False, mask: Any = None,
                  dropout: Any = None, implementation: str = "auto") -> str | None:  # fmt: skip
    """Why ``"auto"`` does not run the short-sequence kernel here (None when it does; it is
    asked only where the fused kernel was refused): not a TPU, several devices, what it does not
    compute (dropout, causality, segments, another mask) or shapes it does not take.

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 4, 2, 64))
    >>> short_refusal(q, q, q)  # on a CPU
    'the backend is cpu, not tpu'
    """
    if implementation != "auto" or not SHORT_KERNEL:
        return f"attention={implementation!r}" if SHORT_KERNEL else "SHORT_KERNEL is off"
    if jax.default_backend() != "tpu":
        return f"the backend is {jax.default_backend()}, not tpu"
    if jax.device_count() > 1:
        return "several devices (XLA's partitioner does not split the kernel)"
    for what, given in (("dropout", dropout), ("segment ids", segment_ids), ("a mask", mask)):
        if given is not None:
            return f"{what} (the short kernel computes padding masks only)"
    if causal:
        return "causal attention (the short kernel computes padding masks only)"
    from jaxfeed.models.kernels import short_attention  # noqa: PLC0415 (import cost: Pallas, TPU only)

    return short_attention.refusal(q, k, v)


def active_dropout(dropout: Any, rngs: Any) -> WeightDropout | None:
    """An ``nnx.Dropout`` on the attention weights (:class:`WeightDropout`), or None when it
    drops nothing (``deterministic``, rate 0): then the fused kernel may run."""
    if dropout.deterministic or not dropout.rate:
        return None
    return WeightDropout(dropout, rngs)


class WeightDropout:
    """An ``nnx.Dropout`` (``module``) with its ``rngs``, as the plain path's ``dropout``: a
    function of the weights, and :meth:`keep` its boolean keep mask and scale, which
    :func:`attend` saves for the backward pass (one byte an element; the scaled multipliers
    took two).

    >>> from flax import nnx
    >>> drop = WeightDropout(nnx.Dropout(0.5, deterministic=False), nnx.Rngs(dropout=0))
    >>> keep, scale = drop.keep((2, 8))
    >>> keep.dtype, scale
    (dtype('bool'), 2.0)
    """

    def __init__(self, module: Any, rngs: Any) -> None:
        self.module, self.rngs = module, rngs

    def __call__(self, weights: jax.Array) -> jax.Array:
        return self.module(weights, rngs=self.rngs)

    def keep(self, shape: tuple[int, ...]) -> tuple[jax.Array, float]:
        """The mask of kept weights of ``shape`` and the factor kept weights are scaled by; for
        a module whose scaling is not known here (a subclass of ``nnx.Dropout`` with its own
        call), its multipliers of ``shape`` and 1."""
        own = getattr(self.module, "keep_mask", None)  # jaxfeed's Dropout: few random bits
        if own is not None:
            return own(shape, rngs=self.rngs)
        multipliers = self.module(jnp.ones(shape, jnp.float32), rngs=self.rngs)
        if type(self.module).__call__ is not nnx.Dropout.__call__:  # its own call: as it is
            return multipliers, 1.0
        rate = float(self.module.rate)  # nnx.Dropout keeps with 1 - rate, scaled by its inverse
        return multipliers != 0, (0.0 if rate >= 1.0 else 1.0 / (1.0 - rate))

    def fused_refusal(self) -> str | None:
        """Why the fused kernel cannot draw this dropout's mask itself (None when it can: a
        jaxfeed ``Dropout`` or a plain ``nnx.Dropout``, no ``broadcast_dims``, rate under 1)."""
        module, kind = self.module, type(self.module)
        if kind.__call__ is not Dropout.__call__ and kind.__call__ is not nnx.Dropout.__call__:
            return f"dropout on the attention weights by {kind.__name__} (its own call)"
        if getattr(module, "broadcast_dims", ()):
            return "dropout on the attention weights with broadcast_dims"
        if float(module.rate) >= 1.0:
            return "dropout on the attention weights at rate 1"
        return None

    def fused_draw(self) -> tuple[jax.Array, int, float]:
        """``(seed, threshold, scale)`` for the fused kernel: two int32 words from one draw of
        the module's key (two calls differ, the same key repeats), the unsigned 32-bit
        threshold under which a weight is kept, and the kept weights' factor: jaxfeed's
        ``Dropout`` at its rounded rate (:func:`jaxfeed.runtime.prng.mask_bits`, as its own
        masks), ``nnx.Dropout`` at its rate.

        >>> from flax import nnx
        >>> drop = WeightDropout(Dropout(0.1, deterministic=False), nnx.Rngs(dropout=0))
        >>> seed, threshold, scale = drop.fused_draw()
        >>> seed.shape, threshold == 230 << 24, round(scale, 4)
        ((2,), True, 1.113)
        """
        module, rate = self.module, float(self.module.rate)
        if isinstance(module, Dropout):
            key = module._key(self.rngs)
            bits, threshold, keep = mask_bits(rate)
            threshold <<= 32 - bits
        else:
            key = _nnx_key(module, self.rngs)
            keep = 1.0 - rate
            threshold = min(max(round(keep * 2**32), 1), 2**32 - 1)
        seed = jax.lax.bitcast_convert_type(jax.random.bits(key, (2,), jnp.uint32), jnp.int32)
        return seed, threshold, 1.0 / keep


def _nnx_key(module: Any, rngs: Any) -> jax.Array:
    """The key an ``nnx.Dropout`` call draws from ``rngs`` (else its own)."""
    key = dropout_key(module, rngs)
    if key is None:
        given = module.rngs if rngs is None else rngs
        raise TypeError(
            f"attention dropout is on but has no random key: got {type(given).__name__}"
        )
    return key


def _fused_dropout_refusal(dropout: Any) -> str | None:
    """Why the fused kernel does not run this attention dropout (None when it draws it)."""
    if not FUSED_DROPOUT:
        return "dropout on the attention weights (attention.FUSED_DROPOUT is off)"
    if FUSED_KERNEL == "flash":
        return 'dropout on the attention weights with FUSED_KERNEL="flash" (splash only)'
    if not isinstance(dropout, WeightDropout):
        return "dropout on the attention weights by a function (the fused kernel needs a module)"
    return dropout.fused_refusal()


def dense_mask(batch: int, t: int, s: int, *, key_mask: Any = None, segment_ids: Any = None,
               causal: bool = False, mask: Any = None) -> jax.Array | None:  # fmt: skip
    """The boolean ``(batch, t, s)`` mask these describe (None: every key visible)."""
    out = None

    def both(a: jax.Array) -> jax.Array:
        return a if out is None else out & a

    if key_mask is not None:
        out = both(jnp.broadcast_to(jnp.asarray(key_mask).astype(bool)[:, None, :], (batch, t, s)))
    if segment_ids is not None:
        seg = jnp.asarray(segment_ids)
        out = both(seg[:, :, None] == seg[:, None, :])
    if causal:
        slots_q, slots_k = jnp.arange(t) + (s - t), jnp.arange(s)
        out = both(jnp.broadcast_to((slots_q[:, None] >= slots_k[None, :])[None], (batch, t, s)))
    if mask is not None:
        out = both(jnp.broadcast_to(jnp.asarray(mask).astype(bool), (batch, t, s)))
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def attend(logits: jax.Array, mask: jax.Array, keep: jax.Array, v: jax.Array,
           scale: float = 1.0) -> jax.Array:  # fmt: skip
    """``softmax(logits) * keep`` applied to the values: ``logits`` ``(B, Hkv, G, T, S)`` (any
    float dtype, the softmax in float32; keys where the boolean ``mask`` ``(B, 1, 1, T, S)`` is
    False set to float32's minimum), ``keep`` the dropout's boolean keep mask (kept weights
    multiplied by ``scale``) or its multipliers (0 or ``1 / keep``, or 1), and ``v``
    ``(B, S, Hkv, D)``; the weights are cast to the values' dtype. Returns ``(B, T, Hkv, G, D)``.

    Its gradient is written out so that the backward pass keeps only the weights in the values'
    dtype (named :data:`WEIGHTS`, for remat policies), the mask, ``keep`` and the values: never
    the float32 logits or their softmax, nor the mask repeated over the heads (plain autodiff of
    the same code kept all of them, 0.9 GB a BERT-base layer at 32x512). It has no forward-mode
    rule (``jax.jvp``).

    >>> import jax.numpy as jnp
    >>> yes = jnp.ones((1, 1, 1, 1, 2), bool)
    >>> attend(jnp.zeros((1, 1, 1, 1, 2)), yes, jnp.ones(()), jnp.ones((1, 2, 1, 3))).shape
    (1, 1, 1, 1, 3)
    """
    return _attend_forward(logits, mask, keep, v, scale)[0]


def _multipliers(keep: jax.Array, scale: float, dtype: Any) -> jax.Array:
    """The dropout's multipliers in ``dtype``: ``scale`` where a boolean ``keep`` holds, else
    0; ``keep`` itself when it holds multipliers."""
    if keep.dtype == jnp.bool_:
        return jnp.where(keep, jnp.asarray(scale, dtype), jnp.zeros((), dtype))
    return keep.astype(dtype)


def _attend_forward(logits: jax.Array, mask: jax.Array, keep: jax.Array, v: jax.Array,
                    scale: float = 1.0) -> tuple[jax.Array, tuple]:  # fmt: skip
    logits_dtype = jnp.empty((0,), logits.dtype)  # the cotangent's dtype, for the backward pass
    logits = jnp.where(mask, logits.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    weights = checkpoint_name(weights, WEIGHTS)
    out = jnp.einsum("bkgts,bskd->btkgd", weights * _multipliers(keep, scale, v.dtype), v)
    return out, (weights, mask, keep, v, logits_dtype)


def _attend_backward(scale: float, saved: tuple,
                     grad: jax.Array) -> tuple[Any, None, None, jax.Array]:  # fmt: skip
    weights, mask, keep, v, logits_dtype = saved
    kept, grad = _multipliers(keep, scale, v.dtype), grad.astype(v.dtype)
    d_values = jnp.einsum("bkgts,btkgd->bskd", weights * kept, grad)
    d_weights = jnp.einsum("btkgd,bskd->bkgts", grad, v).astype(jnp.float32) * kept
    y = weights.astype(jnp.float32)
    d_logits = y * (d_weights - jnp.sum(d_weights * y, axis=-1, keepdims=True))
    d_logits = jnp.where(mask, d_logits, 0.0).astype(logits_dtype.dtype)  # masked: no gradient
    return d_logits, None, None, d_values


attend.defvjp(_attend_forward, _attend_backward)


def grouped_logits(q: jax.Array, k: jax.Array) -> jax.Array:
    """Scaled logits ``(B, Hkv, G, T, S)`` of grouped queries ``(B, T, Hkv, G, D)`` and keys
    ``(B, S, Hkv, D)``: in float32 when :data:`LOGITS_IN_FLOAT32`, else in the queries' dtype
    with the scale applied to the queries (the softmax reads them into float32 either way).

    >>> grouped_logits(jnp.ones((1, 2, 1, 1, 4)), jnp.ones((1, 3, 1, 4))).shape
    (1, 1, 1, 2, 3)
    """
    d = q.shape[-1]
    if LOGITS_IN_FLOAT32:  # written out in float32: twice the bytes of bfloat16
        return jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) / math.sqrt(d)
    return jnp.einsum("btkgd,bskd->bkgts", q * jnp.asarray(1 / math.sqrt(d), q.dtype), k)


def xla_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None,
                  dropout: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:  # fmt: skip
    """Plain attention of queries ``(B, T, H, D)`` to keys and values ``(B, S, Hkv, D)`` (``H`` a
    multiple of ``Hkv``) under a boolean ``mask`` ``(B, T, S)``; softmax in float32, masked
    logits at float32's minimum (never NaN), ``dropout`` on the weights (see :func:`attend`)."""
    b, t, h, d = q.shape
    kv = k.shape[2]
    logits = grouped_logits(q.reshape(b, t, kv, h // kv, d), k)
    visible = jnp.ones((1, 1, 1, 1, 1), bool) if mask is None else mask[:, None, None]
    keep, scale = jnp.ones((), bool), 1.0
    if isinstance(dropout, WeightDropout):  # a boolean mask (or multipliers), saved by name
        keep, scale = dropout.keep(logits.shape)
        keep = checkpoint_name(jax.lax.stop_gradient(keep), KEEP)
    elif dropout is not None:  # any other function of the weights: its multipliers
        keep = jax.lax.stop_gradient(dropout(jnp.ones(logits.shape, v.dtype)))
    return attend(logits, visible, keep, v, scale).reshape(b, t, h, d)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, key_mask: Any = None,
                    segment_ids: Any = None, causal: bool = False) -> jax.Array:  # fmt: skip
    """TPU's fused Pallas flash attention over ``(B, T, H, D)`` queries and ``(B, S, Hkv, D)``
    keys and values (grouped key/value heads repeated), padding as segment ids."""
    from jax.experimental.pallas.ops.tpu import (  # noqa: PLC0415 (import cost: Pallas, on TPU only)
        flash_attention as pallas,
    )

    b, t, h, d = q.shape
    group = h // k.shape[2]
    if group > 1:
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    segments = _segments(pallas.SegmentIds, b, t, key_mask, segment_ids)
    out = pallas.flash_attention(
        *(x.transpose(0, 2, 1, 3) for x in (q, k, v)), segment_ids=segments, causal=causal,
        sm_scale=1.0 / math.sqrt(d), block_sizes=flash_blocks(pallas.BlockSizes, t, k.shape[1]),
    )  # fmt: skip
    return out.transpose(0, 2, 1, 3).astype(q.dtype)


def _segments(make: Any, b: int, t: int, key_mask: Any, segment_ids: Any) -> Any:
    """The fused kernels' ``SegmentIds`` (``make``) for packed rows and padding: a query attends
    to the keys of its own segment; padding is segment 0 for keys (queries: 1, or their segment's
    id), or None when every key is visible."""
    if segment_ids is not None:
        seg = jnp.asarray(segment_ids).astype(jnp.int32)
        if key_mask is not None:
            seg = jnp.where(jnp.asarray(key_mask).astype(bool), seg, 0)
        return make(q=seg, kv=seg)
    if key_mask is not None:
        real = jnp.asarray(key_mask).astype(jnp.int32)
        return make(q=jnp.ones((b, t), jnp.int32), kv=real)
    return None


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, key_mask: Any = None,
                     segment_ids: Any = None, causal: bool = False, interpret: bool = False,
                     dropout: WeightDropout | None = None) -> jax.Array:  # fmt: skip
    """TPU's fused Pallas splash attention (the kernel MaxText runs) over ``(B, T, H, D)``
    queries and ``(B, S, Hkv, D)`` keys and values: grouped key/value heads read in place, padding
    as segment ids, one fused backward kernel, blocks of :func:`flash_block`. Lengths that are not
    multiples of :data:`BLOCK` are padded up to one (the padded keys masked, the padded queries'
    outputs dropped). With ``dropout`` (see :meth:`WeightDropout.fused_refusal`) jaxfeed's fork of
    it runs (:mod:`jaxfeed.models.kernels.splash_dropout`: dropout inside the kernel, bits of
    :data:`DROPOUT_BITS`, no mask in memory). Either kernel names its forward residuals (the
    output and the log-sum-exp) :data:`RESIDUALS`: ``remat="attention"``
    keeps them, so a checkpointed layer's backward pass runs no second forward kernel.
    ``interpret`` runs it with Pallas's interpreter (any backend, slowly).

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 100, 2, 8))
    >>> splash_attention(q, q, q, key_mask=jnp.arange(100)[None] < 60, interpret=True).shape
    (1, 100, 2, 8)
    """
    b, t, _, d = q.shape
    s = k.shape[1]
    padded_t, padded_s = -(-t // BLOCK) * BLOCK, -(-s // BLOCK) * BLOCK
    if (padded_t, padded_s) != (t, s):  # padded keys are masked, padded queries dropped
        if key_mask is None:
            key_mask = jnp.ones((b, s), bool)
        key_mask = jnp.pad(jnp.asarray(key_mask).astype(bool), ((0, 0), (0, padded_s - s)))
        if segment_ids is not None:
            segment_ids = jnp.pad(jnp.asarray(segment_ids), ((0, 0), (0, padded_t - t)))
        q = jnp.pad(q, ((0, 0), (0, padded_t - t), (0, 0), (0, 0)))
        k, v = (jnp.pad(x, ((0, 0), (0, padded_s - s), (0, 0), (0, 0))) for x in (k, v))
    q = q * jnp.asarray(1 / math.sqrt(d), q.dtype)  # the kernels do not scale the logits
    heads_first = [x.transpose(0, 2, 1, 3) for x in (q, k, v)]
    if dropout is not None:
        out = _dropout_splash(heads_first, dropout, key_mask=key_mask, segment_ids=segment_ids,
                              causal=causal, interpret=interpret)  # fmt: skip
    else:
        out = _jax_splash(heads_first, key_mask=key_mask, segment_ids=segment_ids, causal=causal,
                          interpret=interpret)  # fmt: skip
    return out.transpose(0, 2, 1, 3)[:, :t].astype(q.dtype)


def _jax_splash(heads_first: list[jax.Array], *, key_mask: Any, segment_ids: Any, causal: bool,
                interpret: bool) -> jax.Array:  # fmt: skip
    """JAX's splash kernel over heads-first ``q``, ``k``, ``v`` (lengths multiples of 128)."""
    from jax.experimental.pallas.ops.tpu import (  # noqa: PLC0415 (import cost: Pallas, on TPU only)
        splash_attention as splash,
    )

    q, k, _ = heads_first
    (b, h, t, _), s = q.shape, k.shape[2]
    bq, bk = flash_block(t), flash_block(s)
    head = splash.CausalMask((t, s)) if causal else splash.FullMask((t, s))
    sizes = splash.BlockSizes(block_q=bq, block_kv=bk, block_kv_compute=bk, block_q_dkv=bq,
                              block_kv_dkv=bk, block_kv_dkv_compute=bk, use_fused_bwd_kernel=True)  # fmt: skip
    kernel = splash.make_splash_mha(splash.MultiHeadMask([head] * h), block_sizes=sizes,
                                    head_shards=1, q_seq_shards=1, interpret=interpret,
                                    residual_checkpoint_name=RESIDUALS)  # fmt: skip
    segments = _segments(splash.SegmentIds, b, t, key_mask, segment_ids)
    if segments is None:
        return jax.vmap(kernel)(*heads_first)
    return jax.vmap(kernel)(*heads_first, segment_ids=segments)


def _dropout_splash(heads_first: list[jax.Array], dropout: WeightDropout, *, key_mask: Any,
                    segment_ids: Any, causal: bool, interpret: bool) -> jax.Array:  # fmt: skip
    """jaxfeed's splash fork over heads-first ``q``, ``k``, ``v``, with ``dropout`` drawn
    inside the kernel."""
    from jaxfeed.models.kernels import (  # noqa: PLC0415 (import cost: Pallas, on TPU only)
        splash_dropout as kernel,
    )

    q, k, _ = heads_first
    (b, _, t, _), s = q.shape, k.shape[2]
    segments = _segments(kernel.SegmentIds, b, t, key_mask, segment_ids)
    blocks = {"block_q": flash_block(t), "block_kv": flash_block(s)}
    seed, threshold, scale = dropout.fused_draw()
    return kernel.dropout_splash(
        *heads_first, seed, threshold=threshold, scale=scale, segment_ids=segments,
        causal=causal, prng="hash" if interpret else DROPOUT_BITS, interpret=interpret, **blocks,
        residual_checkpoint_name=RESIDUALS,
    )  # fmt: skip


def flash_block(n: int) -> int:
    """The fused kernels' block along a length of ``n``: the longest of :data:`FLASH_BLOCK` and
    its halves down to :data:`BLOCK` that divides ``n``.

    >>> flash_block(384), flash_block(1024)  # FLASH_BLOCK = 512
    (128, 512)
    """
    size = FLASH_BLOCK
    while size > BLOCK and n % size:
        size //= 2
    return min(size, n)


def flash_blocks(sizes: Any, t: int, s: int) -> Any:
    """The fused kernel's ``BlockSizes`` for ``t`` queries and ``s`` keys: each block the longest
    of :data:`FLASH_BLOCK`, its halves down to :data:`BLOCK` that divides its length.

    >>> import collections
    >>> Sizes = collections.namedtuple("Sizes", "block_q block_k_major block_k block_b "
    ...     "block_q_major_dkv block_k_major_dkv block_k_dkv block_q_dkv "
    ...     "block_k_major_dq block_k_dq block_q_dq")
    >>> flash_blocks(Sizes, 512, 384).block_q, flash_blocks(Sizes, 512, 384).block_k
    (512, 128)
    """

    bq, bk = flash_block(t), flash_block(s)
    return sizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1, block_q_major_dkv=bq,
                 block_k_major_dkv=bk, block_k_dkv=bk, block_q_dkv=bq, block_k_major_dq=bk,
                 block_k_dq=bk, block_q_dq=bq)  # fmt: skip


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, key_mask: Any = None,
              segment_ids: Any = None, causal: bool = False, mask: Any = None,
              dropout: Callable[[jax.Array], jax.Array] | None = None,
              implementation: str | None = None) -> jax.Array:  # fmt: skip
    """Attention of queries ``(B, T, H, D)`` to keys and values ``(B, S, Hkv, D)``: a query sees
    the keys that are real (``key_mask`` ``(B, S)``), of its own segment (``segment_ids``
    ``(B, T)``, self-attention), not later (``causal``) and allowed by ``mask`` ``(B, T, S)``;
    ``dropout`` applies to the weights. The kernel is ``implementation`` (default: the choice in
    force, see :func:`current_implementation`); ``"flash"`` raises where the fused kernel cannot run.

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 3, 2, 4))
    >>> attention(q, q, q, causal=True, implementation="xla").shape
    (1, 3, 2, 4)
    """
    chosen = implementation or current_implementation()
    if chosen not in IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {', '.join(IMPLEMENTATIONS)}, got {chosen!r}")
    why = flash_refusal(q, k, v, mask=mask, dropout=dropout, causal=causal, implementation=chosen)
    if why is None and dropout is not None:  # splash with the dropout inside (see flash_refusal)
        return splash_attention(q, k, v, key_mask=key_mask, segment_ids=segment_ids,
                                causal=causal, dropout=dropout)  # fmt: skip
    if why is None:
        fused = flash_attention if FUSED_KERNEL == "flash" else splash_attention
        return fused(q, k, v, key_mask=key_mask, segment_ids=segment_ids, causal=causal)
    if chosen == "flash":
        raise ValueError(f'attention="flash" cannot run here: {why}; use "auto" or "xla"')
    if short_refusal(q, k, v, key_mask=key_mask, segment_ids=segment_ids, causal=causal,
                     mask=mask, dropout=dropout, implementation=chosen) is None:  # fmt: skip
        from jaxfeed.models.kernels import short_attention  # noqa: PLC0415 (import cost: Pallas)

        return short_attention.short_attention(q, k, v, key_mask=key_mask,
                                               residual_checkpoint_name=RESIDUALS)  # fmt: skip
    dense = dense_mask(q.shape[0], q.shape[1], k.shape[1], key_mask=key_mask,
                       segment_ids=segment_ids, causal=causal, mask=mask)  # fmt: skip
    return xla_attention(q, k, v, dense, dropout)
