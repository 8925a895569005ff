"""Attention over short sequences (ViT's 197 patches, BERT's 128 tokens) in one Pallas TPU kernel
a direction: each grid step holds whole sequences in VMEM, so the ``(T, S)`` logits and weights
never reach HBM, and it reads queries, keys and values where the projections wrote them,
``(B, T, heads * D)``, so no layout copy runs either.

XLA's plain path at these lengths is bound by the softmax's passes over HBM, not by the matrix
unit (the attention's matrix products are ~4% of ViT-B/16's FLOPs): the TPU compiler's own cycle
estimates (``tools/tpu/aot.py``) put ~80 of ViT-B/16's 235 ms step estimate in attention fusions,
each layer's ``exp`` evaluated three times in the forward pass and the saved weights written in a
transposed layout. Splash attention pads 197 to 256 and takes one head a grid step. Here a grid
step is one row of the batch (or a few), all heads: 128 steps for ViT-B/16 at batch 128. On a TPU
v5e the ViT-B/16 step (batch 128, ``remat="attention"``) took 132.0 ms with it, 159.7 ms on XLA's
path and 225.0 ms with splash padded.

Heads narrower than the 128 lanes of a vector register are computed a 128-lane group at a time:
the queries of the other heads in the group masked to zero (so the logits are one head's), the
product with the values taken for the whole group and the head's lanes kept. The matrix unit is
128 deep, so a 64-wide head's products cost what a 128-wide's do either way.

The backward kernel recomputes the weights from the queries and keys (no residual but the inputs,
so ``remat`` policies need keep nothing of it) and uses ``rowsum(P * dP)`` for ``rowsum(dO * O)``
(the same number), so it needs no output either.

>>> import jax.numpy as jnp
>>> q = jnp.ones((2, 5, 4, 32))
>>> short_attention(q, q, q, interpret=True).shape
(2, 5, 4, 32)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128
#: The longest sequence it takes: the ``(T, S)`` float32 logits of one head, with a few more of
#: that size, stay in VMEM (4 MB each at 1024).
MAX_LENGTH = 512
#: VMEM a grid step's blocks may take (inputs and outputs, each double-buffered); more rows of
#: the batch a step until this is reached.
BLOCK_BUDGET = 8 * 2**20
VMEM_LIMIT = 32 * 2**20  # within every TPU generation's VMEM (the default scoped limit is 16 MiB)
TRANS_B = (((1,), (1,)), ((), ()))  # a @ b.T
TRANS_A = (((0,), (0,)), ((), ()))  # a.T @ b
MASKED = float(jnp.finfo(jnp.float32).min)  # a masked key's logit, as XLA's path


def refusal(q: Any, k: Any, v: Any) -> str | None:
    """Why :func:`short_attention` does not take these ``(B, T, H, D)`` / ``(B, S, Hkv, D)``
    inputs (None when it does).

    >>> import jax.numpy as jnp
    >>> refusal(jnp.ones((1, 8, 2, 48)), jnp.ones((1, 8, 2, 48)), None)
    'head width 48 neither divides nor is a multiple of 128'
    """
    _, t, h, d = q.shape
    s, kv = k.shape[1], k.shape[2]
    if kv != h:
        return f"{h} query heads over {kv} key-value heads (grouped)"
    if t != s:
        return f"{t} queries to {s} keys (not self-attention)"
    if LANES % d and d % LANES:
        return f"head width {d} neither divides nor is a multiple of {LANES}"
    if (h * d) % LANES:
        return f"{h} heads of {d} ({h * d} wide) is not a multiple of {LANES} lanes"
    if t > MAX_LENGTH:
        return f"{t} tokens: more than {MAX_LENGTH}"
    return None


def _groups(width: int, d: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """``(start, size, [(first lane, end lane) of each head])`` of each lane group."""
    size = max(d, LANES)
    return [(g, size, [(lo, lo + d) for lo in range(0, size, d)]) for g in range(0, width, size)]


def _rows(b: int, t: int, width: int, itemsize: int, buffers: int) -> int:
    """Rows of the batch a grid step: the most (a divisor of ``b``) within :data:`BLOCK_BUDGET`."""
    per_row = t * width * itemsize * buffers * 2  # double-buffered
    best = 1
    for rows in range(1, b + 1):
        if b % rows == 0 and rows * per_row <= BLOCK_BUDGET:
            best = rows
    return best


def _weights(q: jax.Array, k: jax.Array, keep: jax.Array | None, scale: float) -> tuple:
    """Unnormalized weights ``exp(s - max)`` (float32) and their row sums, ``s`` the scaled
    logits of ``q`` and ``k`` with masked keys at float32's minimum."""
    s = lax.dot_general(q, k, TRANS_B, preferred_element_type=jnp.float32) * scale
    if keep is not None:
        s = jnp.where(keep, s, MASKED)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return p, jnp.sum(p, axis=-1, keepdims=True)


def _lanes(width: int, lo: int, hi: int, heads: int) -> jax.Array | None:
    """The ``(1, width)`` selector of one head's lanes (None: the group is one head)."""
    if heads == 1:
        return None
    lane = lax.broadcasted_iota(jnp.int32, (1, width), 1)
    return (lane >= lo) & (lane < hi)


def _merge(sel: jax.Array | None, new: jax.Array, old: jax.Array | None) -> jax.Array:
    return new if old is None or sel is None else jnp.where(sel, new, old)


def _short_attention_forward(
    *refs: Any, rows: int, groups: list, scale: float, masked: bool
) -> None:
    q_ref, k_ref, v_ref = refs[:3]
    m_ref = refs[3] if masked else None
    o_ref = refs[-1]
    for r in range(rows):
        keep = m_ref[r] != 0 if masked else None  # (1, S)
        for start, width, heads in groups:
            cols = slice(start, start + width)
            q, k, v = q_ref[r, :, cols], k_ref[r, :, cols], v_ref[r, :, cols]
            out = None
            for lo, hi in heads:
                sel = _lanes(width, lo, hi, len(heads))
                p, total = _weights(q if sel is None else jnp.where(sel, q, 0), k, keep, scale)
                o = lax.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32) / total
                out = _merge(sel, o, out)
            o_ref[r, :, cols] = out.astype(o_ref.dtype)


def _short_attention_backward(
    *refs: Any, rows: int, groups: list, scale: float, masked: bool
) -> None:
    q_ref, k_ref, v_ref, do_ref = refs[:4]
    m_ref = refs[4] if masked else None
    dq_ref, dk_ref, dv_ref = refs[-3:]
    for r in range(rows):
        keep = m_ref[r] != 0 if masked else None
        for start, width, heads in groups:
            cols = slice(start, start + width)
            q, k, v, do = (ref[r, :, cols] for ref in (q_ref, k_ref, v_ref, do_ref))
            dq = dk = dv = None
            for lo, hi in heads:
                sel = _lanes(width, lo, hi, len(heads))
                p, total = _weights(q if sel is None else jnp.where(sel, q, 0), k, keep, scale)
                p = p / total
                do_h = do if sel is None else jnp.where(sel, do, 0)
                dp = lax.dot_general(do_h, v, TRANS_B, preferred_element_type=jnp.float32)
                ds = p * (dp - jnp.sum(p * dp, axis=-1, keepdims=True))
                if keep is not None:  # masked keys get no gradient (a row of them all: none)
                    ds = jnp.where(keep, ds, 0.0)
                ds = ds.astype(q.dtype)
                f32 = jnp.float32
                dq = _merge(sel, lax.dot(ds, k, preferred_element_type=f32) * scale, dq)
                dk = _merge(sel, lax.dot_general(ds, q, TRANS_A, preferred_element_type=f32)
                            * scale, dk)  # fmt: skip
                dv = _merge(sel, lax.dot_general(p.astype(do.dtype), do, TRANS_A,
                                                 preferred_element_type=f32), dv)  # fmt: skip
            dq_ref[r, :, cols] = dq.astype(dq_ref.dtype)
            dk_ref[r, :, cols] = dk.astype(dk_ref.dtype)
            dv_ref[r, :, cols] = dv.astype(dv_ref.dtype)


def _call(kernel: Any, arrays: list, mask: jax.Array | None, outputs: int, *, heads: int,
          interpret: bool) -> Any:  # fmt: skip
    """One pallas_call over ``(B, T, width)`` ``arrays`` and the ``(B, 1, T)`` key ``mask``
    (after them; None: every key real), ``outputs`` arrays shaped as the first input."""
    b, t, width = arrays[0].shape
    d = width // heads
    rows = _rows(b, t, width, arrays[0].dtype.itemsize, len(arrays) + outputs)
    spec = pl.BlockSpec((rows, t, width), lambda i: (i, 0, 0))
    in_specs = [spec] * len(arrays)
    if mask is not None:
        in_specs.append(pl.BlockSpec((rows, 1, t), lambda i: (i, 0, 0)))
    shape = jax.ShapeDtypeStruct(arrays[0].shape, arrays[0].dtype)
    body = functools.partial(kernel, rows=rows, groups=_groups(width, d), scale=d**-0.5,
                             masked=mask is not None)  # fmt: skip
    return pl.pallas_call(
        body, grid=(b // rows,), in_specs=in_specs,
        out_specs=spec if outputs == 1 else [spec] * outputs,
        out_shape=shape if outputs == 1 else [shape] * outputs,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=VMEM_LIMIT),
        interpret=interpret,
    )(*arrays, *([] if mask is None else [mask]))  # fmt: skip


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None, heads: int,
               interpret: bool) -> jax.Array:  # fmt: skip
    return _call(_short_attention_forward, [q, k, v], mask, 1, heads=heads, interpret=interpret)


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None, heads: int,
                   interpret: bool) -> tuple:  # fmt: skip
    return _attention(q, k, v, mask, heads, interpret), (q, k, v, mask)


def _attention_bwd(heads: int, interpret: bool, saved: tuple, grad: jax.Array) -> tuple:
    q, k, v, mask = saved
    dq, dk, dv = _call(_short_attention_backward, [q, k, v, grad.astype(q.dtype)], mask, 3, heads=heads,
                       interpret=interpret)  # fmt: skip
    return dq, dk, dv, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def short_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, key_mask: Any = None,
                    residual_checkpoint_name: str | None = None,
                    interpret: bool = False) -> jax.Array:  # fmt: skip
    """Self-attention of ``(B, T, H, D)`` queries, keys and values (see :func:`refusal` for the
    shapes it takes), keys where ``key_mask`` ``(B, T)`` is false masked (a row with none real
    averages them all, as XLA's path); softmax in float32, scale ``D ** -0.5``. The output
    carries ``residual_checkpoint_name`` (a remat policy that keeps it runs no second forward
    kernel in a checkpointed layer's backward pass: the next projection's gradient needs it).
    ``interpret`` runs Pallas's interpreter (any backend, slowly).

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 4, 4, 32))
    >>> short_attention(q, q, q, key_mask=jnp.array([[1, 1, 1, 0]]), interpret=True).shape
    (1, 4, 4, 32)
    """
    why = refusal(q, k, v)
    if why is not None:
        raise ValueError(f"short_attention cannot take these inputs: {why}")
    b, t, h, d = q.shape
    mask = None
    if key_mask is not None:
        mask = jnp.asarray(key_mask).astype(jnp.int32).reshape(b, 1, t)
    flat = [x.reshape(b, t, h * d) for x in (q, k, v)]  # the projections' layout: no copy
    out = _attention(*flat, mask, h, interpret)
    if residual_checkpoint_name is not None:
        out = checkpoint_name(out, residual_checkpoint_name)
    return out.reshape(b, t, h, d)
