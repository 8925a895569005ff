"""Low-rank adapters (LoRA) on frozen linear layers, optionally over int8 weights.

:class:`LoRA` is the setting (``rank``, ``alpha``, ``targets``, ``dropout``), validated when made
(:mod:`jaxfeed.models.lora_settings`, which needs no JAX).
:class:`LoRALinear` replaces an ``nnx.Linear``: it keeps the layer's ``kernel`` and ``bias`` (the
frozen weights, under the same names, so a checkpoint's rules still find them) and adds
``lora_a`` ``[in, rank]`` and ``lora_b`` ``[rank, out]`` (:class:`LoRAParam`, float32), so that
``y = x W + b + dropout(x) A B * alpha / rank``, as PEFT computes it. ``lora_a`` starts as PEFT's
``kaiming_uniform(a=sqrt(5))`` (uniform in ``±1/sqrt(in)``), ``lora_b`` at zero: the output is
unchanged until training. With ``quantize="int8"`` the kernel is held as int8 with one float scale
per output channel (:class:`Int8Kernel`, weight-only, absmax, made and multiplied by ``qwix``),
dequantized into the layer's compute dtype inside the matmul; the adapters stay float32.

:func:`merge` gives the plain ``nnx.Linear`` with ``W + A B * alpha / rank`` (PEFT's
``merge_and_unload``).

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> base = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
>>> layer = LoRALinear(base, LoRA(rank=2, alpha=4), key=jax.random.key(1))
>>> x = jnp.ones((2, 4))
>>> bool(jnp.allclose(layer(x), base(x)))  # B starts at zero
True
>>> layer.lora_a[...].shape, layer.lora_b[...].shape
((4, 2), (2, 3))
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxfeed._base.extras import require
from jaxfeed.models.dropout import Dropout
from jaxfeed.models.lora_settings import QUANTIZE, LoRA
from jaxfeed.models.nnx import axes


class LoRAParam(nnx.Param):
    """An adapter weight (``lora_a``, ``lora_b``): what ``Trainer(trainable="lora")`` trains."""


class Int8Kernel(nnx.Param):
    """A frozen int8 weight (or its per-channel scale) of a quantized :class:`LoRALinear`."""


def _kernel_axes(base: nnx.Linear) -> tuple[tuple[Any, ...], Any, Any]:
    """The logical names of the kernel's leading (layer stack) axes, its input and its output."""
    ndim = base.kernel.get_value().ndim
    names = tuple(base.kernel.get_metadata().get("out_sharding") or (None,) * ndim)
    return names[:-2], names[-2], names[-1]


def _quantize_one(kernel: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One ``[in, out]`` kernel as int8 values and float32 scales ``[1, out]``, by ``qwix``."""
    qwix = require("qwix", "quant", "quantize='int8'")
    q = qwix.quantize(kernel, jnp.int8, channelwise_axes=[1], scale_dtype=jnp.float32)
    return q.qvalue, q.scale


@jax.jit
def _quantize_stack(stack: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A stack ``[layers, in, out]`` quantized one layer at a time, and each layer's count of
    NaN or infinite values: one program per shape and dtype, shared by every module and load (a
    jit made per call, as before, compiled anew for each of a model's modules)."""
    q, scale = jax.lax.map(_quantize_one, stack)
    return q, scale, jnp.sum(~jnp.isfinite(stack), axis=(-2, -1))


def quantize_int8(kernel: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``kernel`` ``[in, out]`` as int8 values and float32 scales ``[1, out]`` (absmax per output
    channel, symmetric), by ``qwix``; a layer stack ``[..., in, out]`` one layer at a time.

    A weight holding NaN or infinity is refused (``ValueError``): int8 has no such values, and
    absmax scaling turned a NaN into 0, making a broken model's outputs finite and plausible.
    Concrete kernels go through one compiled program per shape and dtype (:func:`_quantize_stack`).

    >>> q, s = quantize_int8(jnp.array([[1.0, -4.0], [-2.0, 2.0]]))
    >>> q.dtype.name, q.tolist(), s.shape
    ('int8', [[64, -127], [-127, 64]], (1, 2))
    >>> quantize_int8(jnp.array([[1.0, jnp.nan]]))
    Traceback (most recent call last):
    ...
    ValueError: its weight holds 1 NaN or infinite value: int8 cannot hold them (the float model's outputs are NaN too); repair the checkpoint, or load it without quantize
    """
    if isinstance(kernel, jax.core.Tracer):  # inside a trace (eval_shape, jit): no check
        if kernel.ndim > 2:
            return jax.lax.map(quantize_int8, kernel)
        return _quantize_one(kernel)
    shape = kernel.shape
    q, scale, per_layer = _quantize_stack(kernel.reshape((-1, *shape[-2:])))
    per_layer = np.asarray(per_layer)
    if per_layer.any():
        bad = int(per_layer.sum())
        err = ValueError(
            f"its weight holds {bad} NaN or infinite value{'s' if bad > 1 else ''}: int8 cannot "
            "hold them (the float model's outputs are NaN too); repair the checkpoint, or load "
            "it without quantize"
        )
        # a layer stack's first layer holding them (the caller names that layer)
        err.layer = int(np.flatnonzero(per_layer)[0]) if kernel.ndim > 2 else None
        raise err
    return q.reshape(shape), scale.reshape((*shape[:-2], 1, shape[-1]))


class LoRALinear(nnx.Module):
    """An ``nnx.Linear`` with frozen (maybe int8) weights and trainable low-rank adapters (see the
    module docstring; ``lora=None``: a frozen int8 layer without adapters). ``key`` draws ``lora_a``; ``fan_in_fan_out`` records that the checkpoint
    stores the weight as ``[in, out]`` (GPT-2's ``Conv1D``), for PEFT's adapter config."""

    def __init__(self, base: nnx.Linear, lora: LoRA | None, *, key: jax.Array,
                 quantize: str | None = None, fan_in_fan_out: bool = False) -> None:  # fmt: skip
        n_in, n_out = base.in_features, base.out_features
        if lora is not None and lora.rank > min(n_in, n_out):
            raise ValueError(
                f"LoRA rank {lora.rank} is larger than the layer it adapts ({n_in} -> {n_out})"
            )
        self.in_features, self.out_features = n_in, n_out
        self.dtype, self.precision = base.dtype, base.precision
        self.fan_in_fan_out, self.quantized = fan_in_fan_out, quantize
        lead, a_axis, b_axis = _kernel_axes(base)
        stack = tuple(base.kernel.get_value().shape[:-2])  # a layer stack's leading axes
        self.kernel, self.kernel_scale = base.kernel, nnx.data(None)
        if quantize == "int8":
            qvalue, scale = quantize_int8(base.kernel[...])
            self.kernel = Int8Kernel(qvalue, **axes(*lead, a_axis, b_axis))
            self.kernel_scale = Int8Kernel(scale, **axes(*lead, None, b_axis))
        elif quantize is not None:
            raise ValueError(
                f"quantize must be one of {', '.join(QUANTIZE)} or None, got {quantize!r}"
            )
        self.bias = base.bias
        self.lora_a = self.lora_b = self.dropout = nnx.data(None)
        self.rank, self.alpha, self.scaling = 0, 0.0, 0.0
        if lora is None:  # a frozen quantized layer without adapters
            return
        self.rank, self.alpha, self.scaling = lora.rank, float(lora.alpha), lora.scaling
        bound = 1.0 / math.sqrt(n_in)  # kaiming_uniform(a=sqrt(5)) on A [rank, in], as PEFT
        shape = (*stack, n_in, lora.rank)  # drawn flat: the same values, and a 3-D draw's
        # program compiled ten times slower (2.7 s against 0.3 s per shape on a 2-core CPU)
        a = jax.random.uniform(key, (math.prod(shape),), jnp.float32, -bound, bound).reshape(shape)
        self.lora_a = LoRAParam(a, **axes(*lead, a_axis, None))
        self.lora_b = LoRAParam(jax.device_put(np.zeros((*stack, lora.rank, n_out), np.float32)),
                                **axes(*lead, None, b_axis))  # fmt: skip
        if lora.dropout:
            key = jax.random.fold_in(key, 1)
            keys = jax.random.split(key, stack) if stack else key  # one stream per layer
            self.dropout = Dropout(float(lora.dropout), rngs=nnx.Rngs(dropout=keys))

    def base_kernel(self, dtype: Any = None) -> jax.Array:
        """The frozen kernel ``[in, out]`` as a float array (dequantized when int8)."""
        if self.kernel_scale is None:
            value = self.kernel[...]
            return value if dtype is None else value.astype(dtype)
        dtype = dtype or self.kernel_scale[...].dtype
        return self.kernel[...].astype(dtype) * self.kernel_scale[...].astype(dtype)

    def delta(self) -> jax.Array:
        """The adapters' update of the kernel, ``A B * alpha / rank`` ``[in, out]`` (float32;
        ``[layers, in, out]`` for a layer stack's)."""
        if self.lora_a is None:
            stack = self.kernel.get_value().shape[:-2]
            return jnp.zeros((*stack, self.in_features, self.out_features), jnp.float32)
        return (self.lora_a[...] @ self.lora_b[...]) * self.scaling

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.dtype or jnp.result_type(x.dtype, jnp.float32 if self.kernel_scale is not None
                                              else self.kernel[...].dtype)  # fmt: skip
        x = x.astype(dtype)
        dims = (((x.ndim - 1,), (0,)), ((), ()))
        if self.kernel_scale is None:
            y = jax.lax.dot_general(x, self.kernel[...].astype(dtype), dims,
                                    precision=self.precision)  # fmt: skip
        else:
            qwix = require("qwix", "quant", "an int8 LoRALinear")
            weights = qwix.QArray(self.kernel[...], self.kernel_scale[...].astype(dtype),
                                  qtype=jnp.int8)  # fmt: skip
            y = qwix.dot_general(x, weights, dims, precision=self.precision)
        if self.bias is not None:
            y = y + self.bias[...].astype(dtype)
        if self.lora_a is None:
            return y
        h = x if self.dropout is None else self.dropout(x)
        a, b = self.lora_a[...].astype(dtype), self.lora_b[...].astype(dtype)
        return y + (h @ a @ b) * jnp.asarray(self.scaling, dtype)


def merge(layer: LoRALinear, *, param_dtype: Any = None) -> nnx.Linear:
    """The ``nnx.Linear`` whose kernel is ``layer``'s frozen kernel plus its adapters' update
    (PEFT's ``merge_and_unload``), in ``param_dtype`` (default: the kernel's, float32 for int8).

    >>> layer = LoRALinear(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), LoRA(rank=2), key=jax.random.key(1))
    >>> merge(layer).kernel[...].shape
    (4, 3)
    """
    base = layer.base_kernel(jnp.float32)
    dtype = param_dtype or (
        jnp.float32 if layer.kernel_scale is not None else layer.kernel[...].dtype
    )
    kernel = (base + layer.delta()).astype(dtype)
    out = nnx.eval_shape(lambda: nnx.Linear(layer.in_features, layer.out_features,
                                            use_bias=layer.bias is not None, dtype=layer.dtype,
                                            param_dtype=dtype, precision=layer.precision,
                                            rngs=nnx.Rngs(0)))  # fmt: skip
    meta = layer.kernel.get_metadata().get("out_sharding")
    out.kernel = nnx.Param(kernel, **(axes(*meta) if meta else {}))
    out.bias = nnx.data(layer.bias)
    return out


__all__ = ["QUANTIZE", "Int8Kernel", "LoRA", "LoRALinear", "LoRAParam", "merge", "quantize_int8"]
