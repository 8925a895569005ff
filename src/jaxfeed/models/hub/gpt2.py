"""GPT-2 (``model_type: gpt2``): learned positions, LayerNorm, a fused query/key/value projection
stored as ``Conv1D`` (``[in, out]``, already the JAX layout), the tanh GELU, tied embeddings."""

from __future__ import annotations

from typing import Any

from jaxfeed.models.hub.decoder import ACTIVATIONS, TASKS, DecoderSpec, build_lm, head_dim_of
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.weights import IDENTITY, TRANSPOSE, Rule

PREFIX = "transformer"


def spec(config: dict) -> DecoderSpec:
    """The decoder variant of a GPT-2 ``config.json``."""
    for flag in (
        "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn",
        "add_cross_attention",
    ):
        if config.get(flag):
            raise ValueError(f"config.json: GPT-2 with {flag}=true is not supported")
    if config.get("scale_attn_weights") is False:
        raise ValueError("config.json: GPT-2 with scale_attn_weights=false is not supported")
    hidden, heads = int(config["n_embd"]), int(config["n_head"])
    head_dim = head_dim_of({}, hidden, heads)
    return DecoderSpec(
        vocab_size=int(config["vocab_size"]), hidden_size=hidden,
        num_layers=int(config["n_layer"]), num_heads=heads, num_kv_heads=heads,
        head_dim=head_dim, intermediate_size=int(config.get("n_inner") or 4 * hidden),
        max_positions=int(config["n_positions"]), norm="layer",
        norm_eps=float(config.get("layer_norm_epsilon", 1e-5)),
        activation=config.get("activation_function", "gelu_new"), gated_mlp=False,
        positions="learned", fused_qkv=True, qkv_bias=True, out_bias=True, mlp_bias=True,
        tie_embeddings=bool(config.get("tie_word_embeddings", True)),
    )  # fmt: skip


def build(config: dict, *, task: str, num_labels=None, dtype=None, param_dtype=None, rngs):
    return build_lm(spec(config), config, task=task, num_labels=num_labels, dtype=dtype,
                    param_dtype=param_dtype, rngs=rngs)  # fmt: skip


def rules(config: dict, task: str) -> list:
    s, p = spec(config), PREFIX
    out = [Rule(f"{p}.wte.weight", "embed.embedding", IDENTITY),
           Rule(f"{p}.wpe.weight", "position.embedding", IDENTITY),
           Rule(f"{p}.ln_f.weight", "norm.scale", IDENTITY),
           Rule(f"{p}.ln_f.bias", "norm.bias", IDENTITY)]  # fmt: skip
    if not s.tie_embeddings:
        out.append(Rule("lm_head.weight", "lm_head.kernel", TRANSPOSE))
    pairs = (("ln_1", "attn_norm"), ("ln_2", "mlp_norm"))
    linears = (("attn.c_attn", "attention.qkv"), ("attn.c_proj", "attention.out"),
               ("mlp.c_fc", "up"), ("mlp.c_proj", "down"))  # fmt: skip
    for i in range(s.num_layers):
        hf, me = f"{p}.h.{i}", f"layers.{i}"
        for a, b in pairs:
            out += [
                Rule(f"{hf}.{a}.weight", f"{me}.{b}.scale"),
                Rule(f"{hf}.{a}.bias", f"{me}.{b}.bias"),
            ]
        for a, b in linears:  # Conv1D weights are [in, out]: the JAX layout
            out += [
                Rule(f"{hf}.{a}.weight", f"{me}.{b}.kernel"),
                Rule(f"{hf}.{a}.bias", f"{me}.{b}.bias"),
            ]
    return out


# the config.json fields the family reads (jaxfeed.models.hub.config_check's kinds)
GPT2_FIELDS: dict[str, Any] = {
    "vocab_size": "count!",
    "n_embd": "count!",
    "n_layer": "count!",
    "n_head": "count!",
    "n_positions": "count!",
    "n_inner": "count?",
    "activation_function": ACTIVATIONS,
    "layer_norm_epsilon": "positive",
    "resid_pdrop": "rate",
    "embd_pdrop": "rate",
    "attn_pdrop": "rate",
    "initializer_range": "std",
    "tie_word_embeddings": "bool",
}  # fmt: skip
FAMILY = Family(
    model_types=("gpt2",),
    tasks=TASKS,
    default_task="causal-lm",
    build=build,
    rules=rules,
    prefix="transformer",
    architecture=lambda task: "GPT2LMHeadModel",
    lora_targets=("c_attn",),
    module_renames=(),
    config_fields=GPT2_FIELDS,
    divides=("n_embd", "n_head"),
)
