"""The ``reference`` mode of the accelerator benchmark: plain JAX train steps of the same shapes as
jaxfeed's Hub models (BERT, ViT, Llama), written as a JAX user would with no library: parameters
in a dict (one array per weight, stacked ``[layers, ...]`` when the layers run as one
``lax.scan``, a list of per-layer dicts when they are unrolled), the same matmuls, the same
softmax attention (float32 softmax, XLA's einsums), the same LayerNorm/RMSNorm, GELU/SwiGLU,
dropout from ``jax.random.bernoulli`` when the case has dropout, the same recomputation
(``jax.checkpoint`` with the case's policy), bfloat16 compute over the case's parameter dtype, and
the same optimizer. jaxfeed's step is reported as a ratio of it (``vs_reference``: reference step
time over jaxfeed's, 1.0 as fast).

>>> import jax, jax.numpy as jnp
>>> config = {"vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 2,
...           "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16}
>>> init, loss = bert(config, scan=True, remat=False)
>>> params = init(jax.random.key(0))
>>> batch = {"input_ids": jnp.ones((2, 4), jnp.int32), "attention_mask": jnp.ones((2, 4), jnp.int32),
...          "label": jnp.zeros(2, jnp.int32)}
>>> float(loss(params, batch, jax.random.key(1))) > 0
True
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxfeed.models import attention
from jaxfeed.models.stacked import remat_policy, scan_unroll

Params = dict[str, Any]
COMPUTE = jnp.bfloat16


def _normal(key: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    return (0.02 * jax.random.normal(key, shape, jnp.float32)).astype(dtype)


def _layers(key: jax.Array, shapes: dict[str, tuple[int, ...]], depth: int, dtype: Any,
            stacked: bool) -> Any:  # fmt: skip
    """Per-layer weights of ``shapes``: normal for matrices, ones for ``*_scale``, zeros for the
    rest; stacked ``[depth, ...]`` or a list of ``depth`` dicts."""

    def one(name: str, shape: tuple[int, ...], k: jax.Array, lead: tuple[int, ...]) -> jax.Array:
        if name.endswith("_scale"):
            return jnp.ones((*lead, *shape), dtype)
        if len(shape) == 1:
            return jnp.zeros((*lead, *shape), dtype)
        return _normal(k, (*lead, *shape), dtype)

    keys = dict(zip(shapes, jax.random.split(key, len(shapes)), strict=True))
    if stacked:
        return {n: one(n, s, keys[n], (depth,)) for n, s in shapes.items()}
    return [
        {n: one(n, s, jax.random.fold_in(keys[n], i), ()) for n, s in shapes.items()}
        for i in range(depth)
    ]


def _run(layer: Callable, x: jax.Array, layers: Any, keys: Any, scan: Any,
         remat: Any) -> jax.Array:  # fmt: skip
    """``x = layer(x, weights_i, key_i)`` over the layers: one ``lax.scan`` over stacked
    weights, or a Python loop over a list, recomputed in the backward pass as ``remat`` says."""
    recompute, policy = remat_policy(remat)
    if recompute:
        layer = jax.checkpoint(layer, prevent_cse=False, policy=policy)
    if isinstance(layers, dict):
        depth = next(iter(layers.values())).shape[0]

        def body(h: jax.Array, xs: tuple) -> tuple[jax.Array, None]:
            return layer(h, *xs), None

        unroll = max(1, min(scan_unroll(scan) or 1, depth))
        return jax.lax.scan(body, x, (layers, keys), unroll=unroll)[0]
    for i, weights in enumerate(layers):
        x = layer(x, weights, None if keys is None else keys[i])
    return x


def _dropout(x: jax.Array, rate: float, key: Any) -> jax.Array:
    if not rate or key is None:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
    xf = x.astype(jnp.float32)
    mean = xf.mean(-1, keepdims=True)
    var = ((xf - mean) ** 2).mean(-1, keepdims=True)
    out = (xf - mean) * jax.lax.rsqrt(var + eps) * scale.astype(jnp.float32)
    return (out + bias.astype(jnp.float32)).astype(COMPUTE)


def _rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    xf = x.astype(jnp.float32)
    normed = (xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + eps)).astype(COMPUTE)
    return scale.astype(COMPUTE) * normed


def _attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Any, rate: float,
               key: Any) -> jax.Array:  # fmt: skip
    """``(B, T, H, D)`` queries, ``(B, S, Hkv, D)`` keys/values, boolean ``(B, 1, 1, T, S)``
    mask; logits in float32 or the queries' dtype as jaxfeed's attention writes them, float32
    softmax, dropout on the weights."""
    b, t, h, d = q.shape
    kv = k.shape[2]
    q = q.reshape(b, t, kv, h // kv, d)
    logits = attention.grouped_logits(q, k).astype(jnp.float32)  # as jaxfeed's attention
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    weights = _dropout(jax.nn.softmax(logits, axis=-1), rate, key)
    return jnp.einsum("bkgts,bskd->btkgd", weights.astype(COMPUTE), v).reshape(b, t, h, d)


def _cast(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: x.astype(COMPUTE) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree
    )


def _keys(key: jax.Array, depth: int, stacked: bool) -> Any:
    keys = jax.random.split(key, depth)
    return keys if stacked else list(keys)


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels
    ).mean()


# ---------------------------------------------------------------------------------- BERT
def bert(config: dict, *, scan: Any, remat: Any,
         param_dtype: Any = jnp.float32) -> tuple[Callable, Callable]:  # fmt: skip
    """``(init(key) -> params, loss(params, batch, key))`` of BERT-base's sequence
    classification with ``config``'s sizes and dropout rates."""
    v, d, depth = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
    heads, m = config["num_attention_heads"], config["intermediate_size"]
    hidden_rate = float(config.get("hidden_dropout_prob", 0.1))
    attention_rate = float(config.get("attention_probs_dropout_prob", 0.1))
    eps, stacked = 1e-12, bool(scan_unroll(scan))
    shapes = {"wq": (d, d), "bq": (d,), "wk": (d, d), "bk": (d,), "wv": (d, d), "bv": (d,),
              "wo": (d, d), "bo": (d,), "ln1_scale": (d,), "ln1_bias": (d,), "w1": (d, m),
              "b1": (m,), "w2": (m, d), "b2": (d,), "ln2_scale": (d,), "ln2_bias": (d,)}  # fmt: skip

    def init(key: jax.Array) -> Params:
        k = jax.random.split(key, 6)
        return {"word": _normal(k[0], (v, d), param_dtype),
                "position": _normal(k[1], (config["max_position_embeddings"], d), param_dtype),
                "token_type": _normal(k[2], (2, d), param_dtype),
                "ln_scale": jnp.ones((d,), param_dtype), "ln_bias": jnp.zeros((d,), param_dtype),
                "layers": _layers(k[3], shapes, depth, param_dtype, stacked),
                "pool_w": _normal(k[4], (d, d), param_dtype), "pool_b": jnp.zeros((d,), param_dtype),
                "cls_w": _normal(k[5], (d, 2), param_dtype), "cls_b": jnp.zeros((2,), param_dtype)}  # fmt: skip

    def layer(x: jax.Array, w: Params, key: Any, mask: jax.Array) -> jax.Array:
        b, t, _ = x.shape
        keys = [None] * 3 if key is None else list(jax.random.split(key, 3))
        q, k, vv = ((x @ w[f"w{n}"] + w[f"b{n}"]).reshape(b, t, heads, d // heads) for n in "qkv")
        out = _attention(q, k, vv, mask, attention_rate, keys[0]).reshape(b, t, d)
        x = _layer_norm(x + _dropout(out @ w["wo"] + w["bo"], hidden_rate, keys[1]),
                        w["ln1_scale"], w["ln1_bias"], eps)  # fmt: skip
        h = jax.nn.gelu(x @ w["w1"] + w["b1"], approximate=False)
        return _layer_norm(x + _dropout(h @ w["w2"] + w["b2"], hidden_rate, keys[2]),
                           w["ln2_scale"], w["ln2_bias"], eps)  # fmt: skip

    def loss(params: Params, batch: dict, key: jax.Array) -> jax.Array:
        p = _cast(params)
        ids, mask = batch["input_ids"], batch["attention_mask"].astype(bool)
        t = ids.shape[1]
        x = p["word"][ids] + p["position"][:t][None] + p["token_type"][0]
        x = _dropout(_layer_norm(x, p["ln_scale"], p["ln_bias"], eps), hidden_rate, key)
        rate = hidden_rate or attention_rate
        keys = _keys(jax.random.fold_in(key, 1), depth, stacked) if rate else None
        x = _run(partial(layer, mask=mask[:, None, None, None, :]), x, p["layers"], keys, scan,
                 remat)  # fmt: skip
        pooled = jnp.tanh(x[:, 0] @ p["pool_w"] + p["pool_b"])
        return _cross_entropy(_dropout(pooled, hidden_rate, key) @ p["cls_w"] + p["cls_b"],
                              batch["label"])  # fmt: skip

    return init, loss


# ---------------------------------------------------------------------------------- ViT
def vit(config: dict, *, scan: Any, remat: Any, classes: int = 1000,
        param_dtype: Any = jnp.float32) -> tuple[Callable, Callable]:  # fmt: skip
    """``(init, loss)`` of ViT image classification (pre-norm blocks, no dropout)."""
    d, depth, heads = (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
    )
    m, size, patch = config["intermediate_size"], config["image_size"], config["patch_size"]
    tokens, eps, stacked = (size // patch) ** 2 + 1, 1e-12, bool(scan_unroll(scan))
    shapes = {"ln1_scale": (d,), "ln1_bias": (d,), "wq": (d, d), "bq": (d,), "wk": (d, d),
              "bk": (d,), "wv": (d, d), "bv": (d,), "wo": (d, d), "bo": (d,), "ln2_scale": (d,),
              "ln2_bias": (d,), "w1": (d, m), "b1": (m,), "w2": (m, d), "b2": (d,)}  # fmt: skip

    def init(key: jax.Array) -> Params:
        k = jax.random.split(key, 5)
        return {"patch_w": _normal(k[0], (patch, patch, 3, d), param_dtype),
                "patch_b": jnp.zeros((d,), param_dtype), "cls": _normal(k[1], (1, 1, d), param_dtype),
                "position": _normal(k[2], (1, tokens, d), param_dtype),
                "layers": _layers(k[3], shapes, depth, param_dtype, stacked),
                "ln_scale": jnp.ones((d,), param_dtype), "ln_bias": jnp.zeros((d,), param_dtype),
                "head_w": _normal(k[4], (d, classes), param_dtype),
                "head_b": jnp.zeros((classes,), param_dtype)}  # fmt: skip

    def layer(x: jax.Array, w: Params, key: Any) -> jax.Array:
        b, t, _ = x.shape
        h = _layer_norm(x, w["ln1_scale"], w["ln1_bias"], eps)
        q, k, vv = ((h @ w[f"w{n}"] + w[f"b{n}"]).reshape(b, t, heads, d // heads) for n in "qkv")
        x = x + _attention(q, k, vv, None, 0.0, None).reshape(b, t, d) @ w["wo"] + w["bo"]
        h = _layer_norm(x, w["ln2_scale"], w["ln2_bias"], eps)
        return x + jax.nn.gelu(h @ w["w1"] + w["b1"], approximate=False) @ w["w2"] + w["b2"]

    def loss(params: Params, batch: dict, key: jax.Array) -> jax.Array:
        p = _cast(params)
        x = batch["image"].astype(COMPUTE)
        b, gh, gw = x.shape[0], size // patch, size // patch
        x = x.reshape(b, gh, patch, gw, patch, 3)
        x = jnp.einsum("bhpwqc,pqcd->bhwd", x, p["patch_w"]).reshape(b, -1, d) + p["patch_b"]
        x = jnp.concatenate([jnp.broadcast_to(p["cls"], (b, 1, d)), x], axis=1) + p["position"]
        x = _run(layer, x, p["layers"], None, scan, remat)
        x = _layer_norm(x, p["ln_scale"], p["ln_bias"], eps)
        return _cross_entropy(x[:, 0] @ p["head_w"] + p["head_b"], batch["label"])

    return init, loss


# ---------------------------------------------------------------------------------- Llama
def llama(config: dict, *, scan: Any, remat: Any,
          param_dtype: Any = jnp.bfloat16) -> tuple[Callable, Callable]:  # fmt: skip
    """``(init, loss)`` of a Llama-shaped causal LM's next-token loss (RoPE, grouped keys and
    values, SwiGLU, untied head)."""
    v, d, depth = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
    heads, kv, m = (
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["intermediate_size"],
    )
    hd, eps, stacked = d // heads, float(config.get("rms_norm_eps", 1e-6)), bool(scan_unroll(scan))
    shapes = {"attn_scale": (d,), "wq": (d, heads * hd), "wk": (d, kv * hd), "wv": (d, kv * hd),
              "wo": (heads * hd, d), "mlp_scale": (d,), "gate": (d, m), "up": (d, m),
              "down": (m, d)}  # fmt: skip
    inv = 1.0 / (10000.0 ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))

    def init(key: jax.Array) -> Params:
        k = jax.random.split(key, 3)
        return {"embed": _normal(k[0], (v, d), param_dtype), "norm_scale": jnp.ones((d,), param_dtype),
                "layers": _layers(k[1], shapes, depth, param_dtype, stacked),
                "head": _normal(k[2], (d, v), param_dtype)}  # fmt: skip

    def rope(x: jax.Array, angle: jax.Array) -> jax.Array:
        half, xf = x.shape[-1] // 2, x.astype(jnp.float32)
        rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
        return (xf * jnp.cos(angle) + rotated * jnp.sin(angle)).astype(x.dtype)

    def layer(x: jax.Array, w: Params, key: Any, angle: jax.Array, mask: jax.Array) -> jax.Array:
        b, t, _ = x.shape
        h = _rms_norm(x, w["attn_scale"], eps)
        q = rope((h @ w["wq"]).reshape(b, t, heads, hd), angle)
        k = rope((h @ w["wk"]).reshape(b, t, kv, hd), angle)
        out = _attention(q, k, (h @ w["wv"]).reshape(b, t, kv, hd), mask, 0.0, None)
        x = x + out.reshape(b, t, d) @ w["wo"]
        h = _rms_norm(x, w["mlp_scale"], eps)
        return x + (jax.nn.silu(h @ w["gate"]) * (h @ w["up"])) @ w["down"]

    def loss(params: Params, batch: dict, key: jax.Array) -> jax.Array:
        p = _cast(params)
        ids = batch["input_ids"]
        t = ids.shape[1]
        angle = jnp.arange(t, dtype=jnp.float32)[:, None] * inv
        angle = jnp.concatenate([angle, angle], axis=-1)[None, :, None, :]
        mask = jnp.tril(jnp.ones((t, t), bool))[None, None, None]
        x = _run(partial(layer, angle=angle, mask=mask), p["embed"][ids], p["layers"], None,
                 scan, remat)  # fmt: skip
        logits = _rms_norm(x, p["norm_scale"], eps) @ p["head"]
        return _cross_entropy(logits[:, :-1], ids[:, 1:])

    return init, loss


def step_of(loss: Callable, tx: optax.GradientTransformation, key: jax.Array) -> Callable:
    """A jitted train step ``(params, opt_state), batch -> ((params, opt_state), loss)`` over
    ``loss`` (state donated), dropout keys from ``key``."""

    def step(state: tuple, batch: dict) -> tuple[tuple, jax.Array]:
        params, opt_state = state
        value, grads = jax.value_and_grad(loss)(params, batch, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), value

    return jax.jit(step, donate_argnums=0)


__all__ = ["bert", "llama", "step_of", "vit"]
