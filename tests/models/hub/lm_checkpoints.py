"""Tiny random causal-LM checkpoints of every family, saved with ``transformers`` (PyTorch) into a
folder, and the way to load them in jaxfeed (shared by the parity and generation tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

VOCAB = 97
COMMON = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
LLAMA = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
         "rms_norm_eps": 1e-6}  # fmt: skip

CONFIGS = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", {**LLAMA, "tie_word_embeddings": False}),
    "llama3-tied": ("LlamaConfig", "LlamaForCausalLM", {
        **LLAMA, "tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        "rope_theta": 500000.0}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**LLAMA, "sliding_window": 5,
                                                         "head_dim": 16}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**LLAMA, "tie_word_embeddings": False}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**LLAMA, "head_dim": 8}),
}  # fmt: skip

# One more tiny config per family for the settings the ones above leave at their defaults: a
# non-default rope_theta, linear or llama3 rotary scaling and a non-default norm epsilon (large
# enough to move the logits). The parity test saves them as transformers 4 wrote config.json:
# rope_theta at the top level, rope_scaling beside it (see legacy_config).
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}  # fmt: skip
LINEAR = {"type": "linear", "factor": 4.0}
VARIANTS = {
    "gpt2-eps": ("GPT2Config", "GPT2LMHeadModel",
                 {**CONFIGS["gpt2"][2], "layer_norm_epsilon": 1e-2}),
    "llama-linear": ("LlamaConfig", "LlamaForCausalLM",
                     {**LLAMA, "rope_theta": 500.0, "rope_scaling": LINEAR, "rms_norm_eps": 1e-2}),
    "mistral-llama3": ("MistralConfig", "MistralForCausalLM",
                       {**CONFIGS["mistral"][2], "rope_theta": 800.0, "rope_scaling": LLAMA3,
                        "rms_norm_eps": 2e-2}),
    "qwen2-linear": ("Qwen2Config", "Qwen2ForCausalLM",
                     {**LLAMA, "rope_theta": 300.0, "rope_scaling": {**LINEAR, "factor": 2.5},
                      "rms_norm_eps": 1e-2}),
    "qwen3-llama3": ("Qwen3Config", "Qwen3ForCausalLM",
                     {**CONFIGS["qwen3"][2], "rope_theta": 1000.0, "rope_scaling": LLAMA3,
                      "rms_norm_eps": 2e-2}),
}  # fmt: skip


def legacy_config(folder: Path) -> dict:
    """Rewrite ``folder``'s config.json as transformers 4 saved it: ``rope_theta`` at the top
    level and the scaling in ``rope_scaling`` (a linear one keyed ``type``), no
    ``rope_parameters``; the config written."""
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    params = dict(config.pop("rope_parameters", None) or {})
    if params:
        config["rope_theta"] = params.pop("rope_theta")
        kind = params.pop("rope_type", "default")
        params.pop("type", None)
        if kind != "default":
            config["rope_scaling"] = {"type" if kind == "linear" else "rope_type": kind, **params}
    path.write_text(json.dumps(config))
    return config


def save_checkpoint(kind: str, folder: Path, *, seed: int = 0):
    """Save a tiny random ``kind`` model (of :data:`CONFIGS` or :data:`VARIANTS`) with
    ``transformers`` into ``folder``; return it (eval)."""
    import torch
    import transformers

    config_name, model_name, extra = {**CONFIGS, **VARIANTS}[kind]
    torch.manual_seed(seed)
    config = getattr(transformers, config_name)(**COMMON, **extra)
    config._attn_implementation = "eager"
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # bigger than the 0.02 init: logits that differ from token to token
        tied = config.tie_word_embeddings  # logits = E . h: keep h from being the input's row
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.mul_(0.5 if tied and ("embed" in name or "wte" in name) else 3.0)
                if kind in VARIANTS and name.endswith(("q_proj.weight", "k_proj.weight")):
                    p.mul_(4.0)  # sharp attention: the logits follow the rotary angles
            elif p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    return model


def load(folder: Path):
    """The jaxfeed model of ``folder``, by ``from_pretrained``."""
    from jaxfeed.models import from_pretrained

    return from_pretrained(folder, task="causal-lm")


def left_padded(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` left-padded with 0 into ids and an attention mask."""
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        mask[i, width - len(r) :] = 1
    return ids, mask


def word_tokenizer():
    """Token ``tN`` is id N (0, 1, 2: pad, bos, eos): text and ids map one to one."""
    import tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    return tok


TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **COMMON,
              "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False}  # fmt: skip


def save_tiny(folder: Path, *, seed: int = 0) -> Path:
    """A tiny random Llama checkpoint written by jaxfeed and numpy alone (no torch, no JAX
    computation: the model is built abstractly, its weights drawn by numpy through the family's
    rules): for the tests whose subject is a folder's files (adapters, saving), not parity with
    ``transformers``. Returns ``folder``."""
    import jax.numpy as jnp
    from flax import nnx

    from jaxfeed.models.hub.files import write_safetensors
    from jaxfeed.models.hub.registry import family_of
    from jaxfeed.models.stacked import locate

    config, task = dict(TINY_LLAMA), "causal-lm"
    family = family_of(config)
    model = nnx.eval_shape(lambda: family.build(config, task=task, num_labels=None, dtype=None,
                                                param_dtype=jnp.float32, rngs=nnx.Rngs(0)))  # fmt: skip
    rng, tensors = np.random.default_rng(seed), {}
    for rule in family.rules(config, task):
        _, var, index = locate(model, rule.path)  # a stacked layer's slice of its stack
        shape = var.shape if index is None else var.shape[1:]
        value = rng.normal(1.0 if len(shape) == 1 else 0.0, 0.3, shape).astype(np.float32)
        tensors[rule.hf] = np.ascontiguousarray(rule.transform.to_hf(value))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
