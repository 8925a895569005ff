# Copyright 2023 The JAX Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Modified by the jaxfeed authors: forked from JAX 0.10.2's
# jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py, cut to the paths
# jaxfeed runs and given dropout on the attention weights (see the module docstring).
"""Splash attention with dropout on the attention weights inside the fused TPU kernel.

Forked from JAX 0.10.2's ``jax/experimental/pallas/ops/tpu/splash_attention/
splash_attention_kernel.py`` (Apache-2.0, licence header above): its forward kernel (online
softmax over blocks of keys) and its fused backward kernel (``use_fused_bwd_kernel=True``: dk, dv
and per-block dq in one pass), with the block skipping of JAX's own mask processing
(``splash_attention_mask_info``, imported, not copied). Cut: multi-query attention, the separate
dq kernel, sinks, logit soft caps, transposed layouts, partial mask blocks (only the full and
causal masks remain) and compute blocks smaller than memory blocks. Kept as JAX has them: block
shapes, grids, index maps, dimension semantics, the float32 accumulators.

Dropout: forward ``p = exp(s - m)`` (the online softmax), the row sum ``l`` over ``p`` undropped,
the output accumulating ``(p * keep) @ v``, scaled by ``scale / l`` at the end. Backward, with
``c = scale``: ``dv += (p * keep * c)^T do``; ``dp = do v^T``; ``ds = p * (dp * keep * c - di)``
with ``di = rowsum(do * o)`` (that identity holds with dropout); dq and dk from ``ds`` as before.
No keep mask is stored: each block's random bits are made in the kernel from the seed, the batch
row, the head and the block's query and key indices, the same in the forward and the backward
pass (:func:`keep_mask` writes the mask out, for tests).

Random bits, ``prng``: ``"hardware"`` seeds the TPU's generator per block (``pltpu.prng_seed`` of
the row's two seed words folded into one and the block's index among the row's heads, query and
key blocks: Mosaic takes two seed words at most) and draws the block's 32-bit words
(``pltpu.prng_random_bits``; the backward pass draws the same block and transposes it);
``"hash"`` computes each element's word as a keyed hash of its position (two rounds of Wellons'
``lowbias32``, as :mod:`jaxfeed.runtime.prng`), about 20 integer operations an element, and
needs no transpose. Pallas's interpreter has no hardware generator (its HLO interpreter cannot
lower it, its TPU interpreter returns zeros), so interpreted runs take ``"hash"``.

The threshold: an element is kept when its 32-bit word is below ``threshold`` (unsigned, in
``[1, 2**32)``; compared signed against ``threshold - 2**31``, one operation). One word per
element costs the same as one byte per element here (splitting a word into four bytes would cost
lane shuffles), so the comparison is 32-bit; the caller sets the threshold at the rate its
dropout module draws with (jaxfeed's ``Dropout``: the 8-bit rounded rate of
:func:`jaxfeed.runtime.prng.mask_bits`, shifted to 32 bits), so both attention paths drop with
the same probability and scale.

>>> import jax.numpy as jnp
>>> q = k = jnp.zeros((1, 1, 128, 8))  # equal weights: each output averages the kept values
>>> v = jnp.ones((1, 1, 128, 8))
>>> out = dropout_splash(q, k, v, jnp.array([1, 2], jnp.int32), threshold=2**31, scale=2.0,
...                      block_q=128, block_kv=128, prng="hash", interpret=True)
>>> 0.7 < float(out.mean()) < 1.3, float(out.std()) > 0.01  # about half kept, times 2
(True, True)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask_info as mask_info_lib,
)

DEFAULT_MASK_VALUE = -0.7 * float(np.finfo(np.dtype("float32")).max)
NUM_LANES = 128
NUM_SUBLANES = 8
NN_DIM_NUMBERS = (((1,), (0,)), ((), ()))  # standard matmul
NT_DIM_NUMBERS = (((1,), (1,)), ((), ()))  # RHS transposed
PRNGS = ("hardware", "hash")
_HASH_1, _HASH_2 = 0x7FEB352D, 0x846CA68B - 2**32  # lowbias32's multipliers, as int32


class SegmentIds(NamedTuple):
    """Segment ids of one row's queries ``q`` ``(T,)`` and keys ``kv`` ``(S,)``: a query sees the
    keys of its own segment (as JAX's splash ``SegmentIds``)."""

    q: jax.Array
    kv: jax.Array


@dataclasses.dataclass(frozen=True)
class _Config:
    """The static settings of one call (hashable: the custom VJP's non-differentiable input)."""

    block_q: int
    block_kv: int
    threshold: int  # keep where the unsigned 32-bit word < threshold
    scale: float
    prng: str
    causal: bool
    interpret: bool
    mask_value: float = DEFAULT_MASK_VALUE
    residual_checkpoint_name: str | None = None

    @property
    def signed_threshold(self) -> int:
        return self.threshold - 2**31


# The masks: JAX's mask processing gives each (query block, key block) pair a state (0: all
# masked, skipped; 1: partly; 2: all visible) and the next block to fetch.


@functools.lru_cache(maxsize=64)
def _mask_infos(t: int, s: int, causal: bool, bq: int, bkv: int) -> tuple[Any, Any]:
    """The forward and the fused backward kernels' ``MaskInfo`` (numpy), one head's."""
    head = mask_lib.CausalMask((t, s)) if causal else mask_lib.FullMask((t, s))
    heads = mask_lib.MultiHeadMask([head])
    fwd, _ = mask_info_lib.process_mask(heads, (bq, bkv), head_shards=1, q_seq_shards=1)
    dkv, _ = mask_info_lib.process_mask_dkv(
        heads, (bq, bkv), head_shards=1, q_seq_shards=1, shrink_grid=False
    )
    for info in (fwd, dkv):
        assert info.partial_mask_blocks is None and info.mask_next is None
    return fwd, dkv


def _next_nonzero(i, j, data_next_ref, block_mask_ref):
    """``(next block index, run)`` of query block ``i`` and key block ``j``: the block of keys
    (forward; of queries in the backward pass's mask information) to fetch and whether the pair
    has any visible key (the mask is one head's, shared by all)."""
    next_data = data_next_ref[0, i, j].astype(jnp.int32)
    return next_data, block_mask_ref[0, i, j].astype(jnp.int32) > 0


def _apply_mask(qk, q_sequence_ref, q_segment_ids_ref, kv_segment_ids_ref, *, cfg: _Config,
                k_offset, k_in_lanes: bool = True):  # fmt: skip
    """``qk`` with the logits of invisible keys (other segment, later position) at the mask
    value; keys along lanes (forward, ``(bq, bkv)``) or along sublanes (backward)."""
    bq, bkv = cfg.block_q, cfg.block_kv
    masks = []
    if cfg.causal:  # the causal mask computed from the query positions and the key offset
        if k_in_lanes:
            k_sequence = k_offset + lax.broadcasted_iota(jnp.int32, (bq, bkv), 1)
            q_sequence = jnp.tile(q_sequence_ref[...], (1, bkv // NUM_LANES))
        else:
            k_sequence = k_offset + lax.broadcasted_iota(jnp.int32, (bkv, bq), 0)
            q_sequence = jnp.broadcast_to(q_sequence_ref[:1, :], (bkv, bq))
        masks.append(q_sequence >= k_sequence)
    if q_segment_ids_ref is not None:
        if k_in_lanes:
            kv_ids = kv_segment_ids_ref[:1, :]  # [1, bkv]
            q_ids = jnp.tile(q_segment_ids_ref[:], (1, bkv // NUM_LANES))  # [bq, bkv]
        else:
            kv_ids = jnp.tile(kv_segment_ids_ref[:, :], (1, bq // NUM_LANES))  # [bkv, bq]
            q_ids = q_segment_ids_ref[:1, :]  # [1, bq]
        masks.append(q_ids == kv_ids)
    if not masks:
        return qk
    return jnp.where(functools.reduce(jnp.logical_and, masks), qk, cfg.mask_value)


def _div(dividend, divisor: int):
    """``dividend // divisor`` of a non-negative grid index, as JAX's (``lax.div``: no sign)."""
    return dividend if divisor == 1 else lax.div(dividend, divisor)


# The random bits of a block.


def _lowbias32(x: jax.Array) -> jax.Array:
    """Wellons' ``lowbias32`` on int32 (logical shifts, wrapping products)."""
    x = x ^ lax.shift_right_logical(x, jnp.int32(16))
    x = x * jnp.int32(_HASH_1)
    x = x ^ lax.shift_right_logical(x, jnp.int32(15))
    x = x * jnp.int32(_HASH_2)
    return x ^ lax.shift_right_logical(x, jnp.int32(16))


def _keep(seed_ref, head, q_block, kv_block, *, cfg: _Config, t: int, s: int,
          transposed: bool = False) -> jax.Array:  # fmt: skip
    """The boolean keep mask of the block of queries ``q_block`` and keys ``kv_block`` of
    ``head``: ``(bq, bkv)``, or ``(bkv, bq)`` when ``transposed`` (the backward pass's layout);
    the same elements either way."""
    bq, bkv = cfg.block_q, cfg.block_kv
    seed0, seed1 = seed_ref[0, 0], seed_ref[0, 1]
    if cfg.prng == "hardware":
        # Mosaic seeds the generator with at most two words: the row's seed folded into one,
        # and the block's index among the (heads, query blocks, key blocks) of the row.
        blocks = (head * (t // bq) + q_block) * (s // bkv) + kv_block
        pltpu.prng_seed(_lowbias32(seed0 ^ _lowbias32(seed1)), blocks)
        bits = pltpu.prng_random_bits((bq, bkv))
        if transposed:
            bits = bits.T
    else:  # each element's counter: its position in the (heads, T, S) weights
        shape, q_axis = ((bkv, bq), 1) if transposed else ((bq, bkv), 0)
        base = (head * t + q_block * bq) * s + kv_block * bkv  # wraps past 2**31: fine
        rows = lax.broadcasted_iota(jnp.int32, shape, q_axis)
        cols = lax.broadcasted_iota(jnp.int32, shape, 1 - q_axis)
        bits = _lowbias32(_lowbias32(rows * jnp.int32(s) + cols + (base + seed0)) ^ seed1)
    return bits < jnp.int32(cfg.signed_threshold)


def _row_seeds(seed: jax.Array, batch: int) -> jax.Array:
    """``(batch, 1, 2)`` int32: each batch row's two seed words, the first hashed with the row."""
    seed = jnp.asarray(seed).astype(jnp.int32).reshape(2)
    rows = jnp.arange(batch, dtype=jnp.int32)
    first = _lowbias32(_lowbias32(rows + seed[0]) ^ jnp.int32(0x5BD1E995))
    return jnp.stack([first, jnp.broadcast_to(seed[1], (batch,))], axis=-1)[:, None, :]


# The forward pass: grid (heads, query blocks, key blocks), the key blocks innermost.


def _forward_kernel(data_next_ref, block_mask_ref, q_ref, k_ref, v_ref, q_segment_ids_ref,
                    kv_segment_ids_ref, q_sequence_ref, seed_ref, m_scratch_ref, l_scratch_ref,
                    o_scratch_ref, o_ref, logsumexp_ref, *, cfg: _Config, grid_width: int,
                    t: int, s: int):  # fmt: skip
    """One (head, query block, key block) step of the online softmax; the kept weights (before
    scaling) accumulate against the values, the row sums count every weight."""
    float32 = jnp.float32
    head_dim_v_repeats = pl.cdiv(o_scratch_ref.shape[-1], NUM_LANES)
    bkv = cfg.block_kv
    h, i, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)

    @pl.when(j == 0)
    def init():
        o_scratch_ref[...] = jnp.zeros_like(o_scratch_ref)
        m_scratch_ref[...] = jnp.full_like(m_scratch_ref, cfg.mask_value)
        l_scratch_ref[...] = jnp.zeros_like(l_scratch_ref)

    global_kv_index, should_run = _next_nonzero(i, j, data_next_ref, block_mask_ref)

    @pl.when(should_run)
    def run():
        m_prev, l_prev = m_scratch_ref[...], l_scratch_ref[...]
        qk = lax.dot_general(q_ref[...], k_ref[...], NT_DIM_NUMBERS, preferred_element_type=float32)
        qk = _apply_mask(qk, q_sequence_ref, q_segment_ids_ref, kv_segment_ids_ref, cfg=cfg,
                         k_offset=global_kv_index * bkv)  # fmt: skip
        m_curr = qk.max(axis=-1)[:, None]
        m_next = jnp.maximum(m_prev, m_curr)  # (bq, NUM_LANES)
        s_curr = jnp.exp(qk - jnp.tile(m_next, (1, bkv // NUM_LANES)))
        l_curr = jax.lax.broadcast_in_dim(s_curr.sum(axis=-1), l_prev.shape, (0,))
        alpha = jnp.exp(m_prev - m_next)
        m_scratch_ref[...], l_scratch_ref[...] = m_next, l_curr + alpha * l_prev
        keep = _keep(seed_ref, h, i, global_kv_index, cfg=cfg, t=t, s=s)
        s_kept = jnp.where(keep, s_curr, 0.0)  # dropout: the row sum above counts every weight
        o_curr = lax.dot_general(s_kept, v_ref[...].astype(float32), NN_DIM_NUMBERS)
        alpha_o = jnp.tile(alpha, (1, head_dim_v_repeats))[..., : o_scratch_ref.shape[-1]]
        o_scratch_ref[:] = alpha_o * o_scratch_ref[:] + o_curr

    @pl.when(j == grid_width - 1)
    def end():
        l = l_scratch_ref[...]  # noqa: E741 (JAX's name)
        l_inv = jnp.tile(cfg.scale / l, (1, head_dim_v_repeats))[..., : o_scratch_ref.shape[-1]]
        o_ref[...] = (o_scratch_ref[...] * l_inv).astype(o_ref.dtype)
        logsumexp_ref[...] = (jnp.log(l) + m_scratch_ref[...]).astype(logsumexp_ref.dtype)
        m_scratch_ref[...] = jnp.zeros_like(m_scratch_ref)
        l_scratch_ref[...] = jnp.zeros_like(l_scratch_ref)
        o_scratch_ref[...] = jnp.zeros_like(o_scratch_ref)


def _mask_inputs(cfg: _Config, segment_ids: SegmentIds | None, q_sequence: Any, t: int, s: int,
                 *, backward: bool, q_at: Any, kv_at: Any) -> tuple[list, list]:  # fmt: skip
    """The query and key segment ids and the query positions as the kernels read them (queries
    along sublanes and keys along lanes forward, the other way backward), with their block specs
    (``q_at``, ``kv_at``: the grid's index maps of a query block and a key block); ``None`` where
    absent."""
    bq, bkv = cfg.block_q, cfg.block_kv
    if backward:
        q_shape, q_block, q_dim = (NUM_SUBLANES, t), (NUM_SUBLANES, bq), (1,)
        kv_shape, kv_block, kv_dim = (s, NUM_LANES), (bkv, NUM_LANES), (0,)
    else:
        q_shape, q_block, q_dim = (t, NUM_LANES), (bq, NUM_LANES), (0,)
        kv_shape, kv_block, kv_dim = (NUM_SUBLANES, s), (NUM_SUBLANES, bkv), (1,)
    values: list = [None, None, None]
    specs: list = [None, None, None]
    if segment_ids is not None:
        values[0] = jax.lax.broadcast_in_dim(segment_ids.q, q_shape, q_dim)
        values[1] = jax.lax.broadcast_in_dim(segment_ids.kv, kv_shape, kv_dim)
        specs[0], specs[1] = pl.BlockSpec(q_block, q_at), pl.BlockSpec(kv_block, kv_at)
    if cfg.causal:
        values[2] = jax.lax.broadcast_in_dim(jnp.asarray(q_sequence), q_shape, q_dim)
        specs[2] = pl.BlockSpec(q_block, q_at)
    return values, specs


def _forward(cfg: _Config, q, k, v, segment_ids, seeds) -> tuple[jax.Array, jax.Array]:
    """One batch row: ``q`` ``(H, T, D)``, ``k``/``v`` ``(Hkv, S, D)``, ``seeds`` ``(1, 2)``;
    returns the output ``(H, T, Dv)`` and the log-sum-exp ``(H, T)`` (of the undropped
    weights)."""
    num_q_heads, t, head_dim_qk = q.shape
    s, head_dim_v = k.shape[1], v.shape[-1]
    bq, bkv = cfg.block_q, cfg.block_kv
    group = num_q_heads // k.shape[0]
    fwd_info, _ = _mask_infos(t, s, cfg.causal, bq, bkv)
    grid_width = fwd_info.data_next.shape[-1]

    def kv_index_map(h, i, j, data_next_ref, block_mask_ref):
        next_j, _ = _next_nonzero(i, j, data_next_ref, block_mask_ref)
        return _div(h, group), next_j, 0

    def kv_block_map(h, i, j, data_next_ref, block_mask_ref):  # the key segment ids' block
        return 0, _next_nonzero(i, j, data_next_ref, block_mask_ref)[0]

    values, specs = _mask_inputs(cfg, segment_ids, fwd_info.q_sequence, t, s, backward=False,
                                 q_at=lambda h, i, j, *_: (i, 0), kv_at=kv_block_map)  # fmt: skip
    in_specs = [
        pl.BlockSpec((None, bq, head_dim_qk), lambda h, i, j, *_: (h, i, 0)),
        pl.BlockSpec((None, bkv, head_dim_qk), kv_index_map),
        pl.BlockSpec((None, bkv, head_dim_v), kv_index_map),
        *specs,
        pl.BlockSpec(memory_space=pltpu.SMEM),
    ]
    out_shapes = [
        jax.ShapeDtypeStruct((bq, NUM_LANES), jnp.float32),  # m_scratch
        jax.ShapeDtypeStruct((bq, NUM_LANES), jnp.float32),  # l_scratch
        jax.ShapeDtypeStruct((bq, head_dim_v), jnp.float32),  # o_scratch
        jax.ShapeDtypeStruct((num_q_heads, t, head_dim_v), q.dtype),
        jax.ShapeDtypeStruct((num_q_heads, t, NUM_LANES), jnp.float32),  # logsumexp
    ]
    out_specs = [
        pl.BlockSpec((bq, NUM_LANES), lambda h, i, j, *_: (0, 0)),
        pl.BlockSpec((bq, NUM_LANES), lambda h, i, j, *_: (0, 0)),
        pl.BlockSpec((bq, head_dim_v), lambda h, i, j, *_: (0, 0)),
        pl.BlockSpec((None, bq, head_dim_v), lambda h, i, j, *_: (h, i, 0)),
        pl.BlockSpec((None, bq, NUM_LANES), lambda h, i, j, *_: (h, i, 0)),
    ]
    kernel = functools.partial(_forward_kernel, cfg=cfg, grid_width=grid_width, t=t, s=s)
    *_, out, logsumexp = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, in_specs=in_specs, out_specs=out_specs,
            grid=(num_q_heads, t // bq, grid_width),
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")
        ),
        out_shape=out_shapes,
        name="jaxfeed_splash_dropout_fwd",
        interpret=cfg.interpret,
    )(jnp.asarray(fwd_info.data_next), jnp.asarray(fwd_info.block_mask), q, k, v, *values, seeds)  # fmt: skip
    return out, logsumexp[..., 0]


# The fused backward pass: grid (key blocks, heads, query blocks), the query blocks innermost;
# dk and dv accumulate over the heads of a key/value head's group and the query blocks, each step
# writes its block's share of dq (summed over the key blocks afterwards).


def _backward_kernel(data_next_ref, block_mask_ref, q_ref, k_ref, v_ref, q_segment_ids_ref,
                     kv_segment_ids_ref, q_sequence_ref, seed_ref, logsumexp_ref, do_ref, di_ref,
                     dk_scratch_ref, dv_scratch_ref, dq_ref, dk_ref, dv_ref, *, cfg: _Config,
                     group: int, grid_width: int, t: int, s: int):  # fmt: skip
    """One (key block, head, query block) step, in the transposed layout ``(bkv, bq)``."""
    float32 = jnp.float32
    kv_index, q_head_index, q_index = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    should_initialize, should_write = q_index == 0, q_index == grid_width - 1
    if group > 1:  # a key/value head's gradients gather over its group of query heads
        head_in_group = lax.rem(q_head_index, group)
        should_initialize = jnp.logical_and(should_initialize, head_in_group == 0)
        should_write = jnp.logical_and(should_write, head_in_group == group - 1)

    @pl.when(should_initialize)
    def init():
        dk_scratch_ref[...] = jnp.zeros_like(dk_scratch_ref)
        dv_scratch_ref[...] = jnp.zeros_like(dv_scratch_ref)

    global_q_index, should_run = _next_nonzero(q_index, kv_index, data_next_ref, block_mask_ref)
    dq_ref[...] = jnp.zeros_like(dq_ref)

    @pl.when(should_run)
    def run():
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        qk = lax.dot_general(k, q, NT_DIM_NUMBERS, preferred_element_type=float32)
        qk = _apply_mask(qk, q_sequence_ref, q_segment_ids_ref, kv_segment_ids_ref, cfg=cfg,
                         k_offset=kv_index * cfg.block_kv, k_in_lanes=False)  # fmt: skip
        p = jnp.exp(qk - logsumexp_ref[:1, :])
        keep = _keep(seed_ref, q_head_index, global_q_index, kv_index, cfg=cfg, t=t, s=s,
                     transposed=True)  # fmt: skip
        p_kept = jnp.where(keep, p * cfg.scale, 0.0)  # p * keep * c
        dv = lax.dot(p_kept.astype(do.dtype), do, preferred_element_type=float32)
        dv_scratch_ref[...] = dv.astype(dv_scratch_ref.dtype) + dv_scratch_ref[...]
        dp = lax.dot_general(v, do, NT_DIM_NUMBERS, preferred_element_type=float32)
        ds = p_kept * dp - p * di_ref[:1, :]  # p * (dp * keep * c - di)
        dk = lax.dot_general(ds.astype(do.dtype), q, NN_DIM_NUMBERS, preferred_element_type=float32)
        dk_scratch_ref[...] = dk.astype(dk_scratch_ref.dtype) + dk_scratch_ref[...]
        dq = lax.dot_general(
            ds.T.astype(k.dtype), k, NN_DIM_NUMBERS, preferred_element_type=float32
        )
        dq_ref[...] = dq.astype(dq_ref.dtype)

    @pl.when(should_write)
    def end():
        dk_ref[...] = dk_scratch_ref[...].astype(dk_ref.dtype)
        dv_ref[...] = dv_scratch_ref[...].astype(dv_ref.dtype)
        dk_scratch_ref[...] = jnp.zeros_like(dk_scratch_ref)
        dv_scratch_ref[...] = jnp.zeros_like(dv_scratch_ref)


def _backward(cfg: _Config, q, k, v, segment_ids, seeds, logsumexp, do, di):
    """dq, dk, dv of one batch row (shapes as :func:`_forward`'s)."""
    num_q_heads, t, head_dim_qk = q.shape
    num_kv_heads, s, head_dim_v = v.shape
    bq, bkv = cfg.block_q, cfg.block_kv
    group = num_q_heads // num_kv_heads
    _, dkv_info = _mask_infos(t, s, cfg.causal, bq, bkv)
    grid_width = dkv_info.data_next.shape[-2]

    def next_q(kv_index, q_index, data_next_ref, block_mask_ref):
        return _next_nonzero(q_index, kv_index, data_next_ref, block_mask_ref)[0]

    def q_map(kv, h, i, dn, bm):  # queries, their outputs' gradients: the next visible block
        return h, next_q(kv, i, dn, bm), 0

    def kv_map(kv, h, *_):
        return _div(h, group), kv, 0

    def row_map(kv, h, i, dn, bm):  # the log-sum-exp and di, broadcast over sublanes
        return h, 0, next_q(kv, i, dn, bm)

    values, specs = _mask_inputs(
        cfg, segment_ids, dkv_info.q_sequence, t, s, backward=True,
        q_at=lambda kv, h, i, dn, bm: (0, next_q(kv, i, dn, bm)), kv_at=lambda kv, *_: (kv, 0),
    )  # fmt: skip
    rows = (num_q_heads, NUM_SUBLANES, t)
    in_specs = [
        pl.BlockSpec((None, bq, head_dim_qk), q_map),
        pl.BlockSpec((None, bkv, head_dim_qk), kv_map),
        pl.BlockSpec((None, bkv, head_dim_v), kv_map),
        *specs,
        pl.BlockSpec(memory_space=pltpu.SMEM),
        pl.BlockSpec((None, NUM_SUBLANES, bq), row_map),
        pl.BlockSpec((None, bq, head_dim_v), q_map),
        pl.BlockSpec((None, NUM_SUBLANES, bq), row_map),
    ]
    out_shapes = [
        jax.ShapeDtypeStruct((bkv, head_dim_qk), jnp.float32),  # dk_scratch
        jax.ShapeDtypeStruct((bkv, head_dim_v), jnp.float32),  # dv_scratch
        jax.ShapeDtypeStruct((s // bkv, *q.shape), q.dtype),  # dq, one share per key block
        jax.ShapeDtypeStruct.like(k),
        jax.ShapeDtypeStruct.like(v),
    ]
    out_specs = [
        pl.BlockSpec((bkv, head_dim_qk), lambda *_: (0, 0)),
        pl.BlockSpec((bkv, head_dim_v), lambda *_: (0, 0)),
        pl.BlockSpec((None, None, bq, head_dim_qk), lambda kv, h, i, *_: (kv, h, i, 0)),
        pl.BlockSpec((None, bkv, head_dim_qk), kv_map),
        pl.BlockSpec((None, bkv, head_dim_v), kv_map),
    ]
    kernel = functools.partial(_backward_kernel, cfg=cfg, group=group, grid_width=grid_width,
                               t=t, s=s)  # fmt: skip
    *_, dq_unreduced, dk, dv = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, in_specs=in_specs, out_specs=out_specs,
            grid=(s // bkv, num_q_heads, grid_width),
        ),
        out_shape=out_shapes,
        # all arbitrary (as JAX's): the heads and query blocks are reductions for dk and dv
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("arbitrary", "arbitrary", "arbitrary")
        ),
        name="jaxfeed_splash_dropout_dkv",
        interpret=cfg.interpret,
    )(
        jnp.asarray(dkv_info.data_next), jnp.asarray(dkv_info.block_mask), q, k, v, *values,
        seeds, jnp.broadcast_to(logsumexp[:, None, :], rows), do,
        jnp.broadcast_to(di[:, None, :], rows),
    )  # fmt: skip
    return dq_unreduced.sum(axis=0), dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(cfg: _Config, q, k, v, segment_ids, seeds) -> jax.Array:
    return _forward(cfg, q, k, v, segment_ids, seeds)[0]


def _attention_fwd(cfg: _Config, q, k, v, segment_ids, seeds):
    out, logsumexp = _forward(cfg, q, k, v, segment_ids, seeds)
    if cfg.residual_checkpoint_name is not None:  # as JAX's splash: a remat policy may keep them
        out = checkpoint_name(out, cfg.residual_checkpoint_name)
        logsumexp = checkpoint_name(logsumexp, cfg.residual_checkpoint_name)
    return out, (q, k, v, segment_ids, seeds, out, logsumexp)


def _attention_bwd(cfg: _Config, res, do):
    q, k, v, segment_ids, seeds, out, logsumexp = res
    di = jnp.einsum("hsd,hsd->hs", out.astype(jnp.float32), do.astype(jnp.float32))
    dq, dk, dv = _backward(cfg, q, k, v, segment_ids, seeds, logsumexp, do, di)
    return dq, dk, dv, None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def _config(t: int, s: int, *, threshold: int, scale: float, causal: bool, block_q: int,
            block_kv: int, prng: str, interpret: bool,
            residual_checkpoint_name: str | None = None) -> _Config:  # fmt: skip
    """The checked settings (a clear error for what the kernel cannot run)."""
    if prng not in PRNGS:
        raise ValueError(f"prng must be one of {', '.join(PRNGS)}, got {prng!r}")
    if prng == "hardware" and interpret:
        raise ValueError('prng="hardware": Pallas\'s interpreter has no TPU generator; use "hash"')
    if not 1 <= int(threshold) < 2**32:
        raise ValueError(f"threshold must be in [1, 2**32) (keep below it), got {threshold}")
    for name, block, length in (("block_q", block_q, t), ("block_kv", block_kv, s)):
        if block % NUM_LANES or length % block:
            raise ValueError(
                f"{name}={block} must be a multiple of {NUM_LANES} dividing the length {length}"
            )
    return _Config(block_q, block_kv, int(threshold), float(scale), prng, bool(causal), interpret,
                   residual_checkpoint_name=residual_checkpoint_name)  # fmt: skip


def dropout_splash(q: jax.Array, k: jax.Array, v: jax.Array, seed: jax.Array, *, threshold: int,
                   scale: float, segment_ids: SegmentIds | None = None, causal: bool = False,
                   block_q: int = 512, block_kv: int = 512, prng: str = "hardware",
                   interpret: bool = False,
                   residual_checkpoint_name: str | None = None) -> jax.Array:  # fmt: skip
    """Splash attention of queries ``(B, H, T, D)`` to keys and values ``(B, Hkv, S, D)`` (``H``
    a multiple of ``Hkv``; the logits not scaled) with dropout on the weights: an element is kept
    when its random 32-bit word is below ``threshold`` and then scaled by ``scale``. ``seed``:
    two int32 words (one call's draw); ``segment_ids``: ``(B, T)`` and ``(B, S)`` ids; blocks of
    ``block_q`` queries and ``block_kv`` keys (multiples of 128 dividing the lengths), the same
    in both passes. Differentiable in ``q``, ``k``, ``v`` (the fused backward kernel); its
    forward residuals (output, log-sum-exp) carry ``residual_checkpoint_name`` (as JAX's
    splash), for remat policies that keep them.

    >>> import jax.numpy as jnp
    >>> x = jnp.ones((1, 1, 128, 8))
    >>> dropout_splash(x, x, x, jnp.zeros(2, jnp.int32), threshold=2**32 - 1, scale=1.0,
    ...                block_q=128, block_kv=128, prng="hash", interpret=True).shape
    (1, 1, 128, 8)
    """
    b, h, t, _ = q.shape
    if k.ndim != 4 or k.shape[0] != b or h % k.shape[1] or k.shape != v.shape[:3] + k.shape[3:]:
        raise ValueError(f"queries {q.shape}: keys {k.shape} and values {v.shape} do not fit")
    cfg = _config(t, k.shape[2], threshold=threshold, scale=scale, causal=causal,
                  block_q=block_q, block_kv=block_kv, prng=prng, interpret=interpret,
                  residual_checkpoint_name=residual_checkpoint_name)  # fmt: skip
    seeds = _row_seeds(seed, b)
    if segment_ids is None:
        return jax.vmap(lambda q, k, v, sd: _attention(cfg, q, k, v, None, sd))(q, k, v, seeds)
    return jax.vmap(functools.partial(_attention, cfg))(q, k, v, segment_ids, seeds)


def keep_mask(seed: jax.Array, shape: tuple[int, int, int, int], *, threshold: int,
              block_q: int = 512, block_kv: int = 512, prng: str = "hardware",
              interpret: bool = False) -> jax.Array:  # fmt: skip
    """The boolean keep mask ``(B, H, T, S)`` that :func:`dropout_splash` draws with the same
    seed, threshold, blocks and ``prng``, written out by a kernel of the same seeding (for tests:
    the fused kernel itself never writes it).

    >>> import jax.numpy as jnp
    >>> keep = keep_mask(jnp.zeros(2, jnp.int32), (1, 1, 128, 128), threshold=3 * 2**30,
    ...                  block_q=128, block_kv=128, prng="hash", interpret=True)
    >>> keep.dtype, 0.7 < float(keep.mean()) < 0.8
    (dtype('bool'), True)
    """
    b, h, t, s = shape
    cfg = _config(t, s, threshold=threshold, scale=1.0, causal=False, block_q=block_q,
                  block_kv=block_kv, prng=prng, interpret=interpret)  # fmt: skip

    def kernel(seed_ref, out_ref):
        head, i, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
        out_ref[...] = _keep(seed_ref, head, i, j, cfg=cfg, t=t, s=s).astype(jnp.int32)

    one_row = pl.pallas_call(
        kernel,
        grid=(h, t // block_q, s // block_kv),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec((None, block_q, block_kv), lambda head, i, j: (head, i, j)),
        out_shape=jax.ShapeDtypeStruct((h, t, s), jnp.int32),
        name="jaxfeed_splash_dropout_keep",
        interpret=interpret,
    )
    return jax.vmap(one_row)(_row_seeds(seed, b)).astype(bool)


__all__ = ["PRNGS", "SegmentIds", "dropout_splash", "keep_mask"]
