"""Text generation with a causal language model: one compiled loop for a batch of prompts.

:func:`generate` encodes the prompts, left-pads them into a fixed buffer of
``prompt length + max_new_tokens`` tokens and runs the whole decoding as one ``jax.lax.while_loop``
inside one ``jax.jit`` program: each step runs the model over the buffer (a causal model cannot
see the empty tail), picks the next token of every row and writes it in place. Nothing changes
shape from one token to the next, so nothing recompiles per token; the program is compiled once
per (model, batch size, buffer length), with the prompt length rounded up to a multiple of 8 and
``temperature``, ``top_k``, ``top_p`` and ``seed`` passed as values, not constants.

The model is called as ``model(input_ids, attention_mask=mask)`` in eval mode and returns
``(batch, length, vocab)`` logits; :class:`~jaxfeed.models.TransformerLM` numbers the real tokens
of a left-padded row from 0, so a prompt gives the same continuation alone or in a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

EOS_TOKENS = ("<eos>", "</s>", "<|endoftext|>", "<|eos|>", "[SEP]")
ROUND = 8  # the prompt part of the buffer is a multiple of this: fewer programs


def eos_id(tokenizer: Any) -> int | None:
    """The id of the tokenizer's end-of-sequence token (``<eos>``, ``</s>``, ``<|endoftext|>``,
    ``[SEP]``...), or None when it has none.

    >>> from jaxfeed import Dataset
    >>> from jaxfeed.text import train_tokenizer
    >>> tok = train_tokenizer(Dataset.from_dict({"text": ["ab ba"] * 4}), "text", vocab_size=270)
    >>> eos_id(tok) == tok.token_to_id("<eos>")
    True
    """
    for token in EOS_TOKENS:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return None


def _filter_logits(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Logits outside the ``top_k`` largest (0: no limit) and outside the smallest set whose
    probability reaches ``top_p`` (nucleus; 1: no limit) set to -inf; the best token always
    stays."""
    order = jnp.sort(logits, axis=-1)[..., ::-1]  # descending
    vocab = logits.shape[-1]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    kth = jnp.take_along_axis(order, jnp.broadcast_to(k - 1, logits.shape[:-1])[..., None], -1)
    keep = logits >= kth
    probs = jax.nn.softmax(order, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # probability of the better tokens
    inside = before < top_p
    inside = inside.at[..., 0].set(True)
    cutoff = jnp.min(jnp.where(inside, order, jnp.inf), axis=-1, keepdims=True)
    keep = keep & (logits >= cutoff)
    return jnp.where(keep, logits, -jnp.inf)


def _decode(graphdef: Any, state: Any, tokens: jax.Array, mask: jax.Array, start: int,
            steps: int, eos: jax.Array, temperature: jax.Array, top_k: jax.Array,
            top_p: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """The decoding loop: ``tokens`` ``(B, start + steps)`` with the prompts left-padded in
    ``[0, start)``; returns the filled buffer and the number of steps run."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax; jaxfeed.text stays light)

    model = nnx.merge(graphdef, state)
    model.eval()
    greedy = temperature <= 0

    def step(carry):
        tokens, done, i = carry
        logits = model(tokens, attention_mask=mask)
        logits = jax.lax.dynamic_index_in_dim(logits, start - 1 + i, axis=1, keepdims=False)
        logits = logits.astype(jnp.float32)
        scaled = _filter_logits(logits / jnp.where(greedy, 1.0, temperature), top_k, top_p)
        sampled = jax.random.categorical(jax.random.fold_in(key, i), scaled, axis=-1)
        chosen = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(tokens.dtype)
        chosen = jnp.where(done, 0, chosen)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, chosen, start + i, axis=1)
        return tokens, done | (chosen == eos), i + 1

    def running(carry):
        _, done, i = carry
        return (i < steps) & ~jnp.all(done)

    done = jnp.zeros(tokens.shape[:1], bool)
    tokens, _, ran = jax.lax.while_loop(running, step, (tokens, done, jnp.int32(0)))
    return tokens, ran


_decode_jit = jax.jit(_decode, static_argnums=(0, 4, 5))


def compilations() -> int:
    """How many decoding programs :func:`generate` has compiled in this process (one per model
    structure, batch size and buffer length)."""
    return _decode_jit._cache_size()


def generate(
    model: Any,
    tokenizer: Any,
    prompts: str | Sequence[str],
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    *,
    eos_token_id: int | None = None,
) -> str | list[str]:
    """Continue each prompt with up to ``max_new_tokens`` tokens from a causal language model.

    ``model`` is an NNX model called as ``model(input_ids, attention_mask=mask)`` returning
    ``(batch, length, vocab)`` logits, such as :class:`~jaxfeed.models.TransformerLM`;
    ``tokenizer`` a ``tokenizers.Tokenizer`` (:func:`~jaxfeed.text.load_tokenizer`,
    :func:`~jaxfeed.text.train_tokenizer`). Prompts are encoded without special tokens. Returns
    the continuation of each prompt (without the prompt, decoded without special tokens): a
    string for a string, a list for a list.

    ``temperature=0`` is greedy decoding (the most likely token: deterministic); otherwise tokens
    are sampled from ``softmax(logits / temperature)`` restricted to the ``top_k`` most likely
    and to the nucleus of probability ``top_p``, with keys from ``seed`` (the same seed gives the
    same text). A row stops at the end-of-sequence token (``eos_token_id``, by default the
    tokenizer's ``<eos>``, ``</s>``, ``<|endoftext|>`` or ``[SEP]``), and the loop ends when every
    row has. A prompt plus ``max_new_tokens`` longer than the model's context (``max_length``)
    is an error naming the prompt; nothing is cut silently.

    The decoding is one compiled program per model, batch size and buffer length
    (:func:`compilations` counts them): no recompilation per token, per seed or per setting.

    >>> import optax
    >>> from flax import nnx
    >>> from jaxfeed import Dataset
    >>> from jaxfeed.models import TransformerLM
    >>> from jaxfeed.text import train_tokenizer
    >>> tok = train_tokenizer(Dataset.from_dict({"text": ["abc abc"] * 8}), "text", vocab_size=270)
    >>> lm = TransformerLM(tok.get_vocab_size(), dim=16, depth=1, num_heads=2, max_length=32,
    ...                    rngs=nnx.Rngs(0))
    >>> out = generate(lm, tok, ["abc", "a"], max_new_tokens=5, temperature=0)
    >>> len(out), out == generate(lm, tok, ["abc", "a"], max_new_tokens=5, temperature=0)
    (2, True)
    """
    single = isinstance(prompts, str)
    texts = [prompts] if single else list(prompts)
    if not texts:
        raise ValueError("generate: no prompts given")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"generate: prompt {i} is a {type(text).__name__}, expected a str")
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 1
    ):
        raise ValueError(f"generate: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"generate: top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not 0 < float(top_p) <= 1:
        raise ValueError(f"generate: top_p must be in (0, 1] or None, got {top_p!r}")
    if float(temperature) < 0:
        raise ValueError(f"generate: temperature must be >= 0 (0: greedy), got {temperature!r}")
    encoded = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    context = getattr(model, "max_length", None)
    vocab = getattr(model, "vocab_size", None)
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"generate: prompt {i} ({texts[i][:40]!r}) encodes to no tokens")
        if context is not None and len(ids) + max_new_tokens > context:
            raise ValueError(
                f"generate: prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} "
                f"that is {len(ids) + max_new_tokens}, longer than the model's context of "
                f"{context} tokens (max_length): shorten the prompt or ask for at most "
                f"{max(context - len(ids), 0)} new tokens"
            )
        if vocab is not None and max(ids) >= vocab:
            raise ValueError(
                f"generate: prompt {i} has token id {max(ids)}, outside the model's vocabulary of "
                f"{vocab}: the tokenizer does not match the model"
            )
    eos = eos_token_id if eos_token_id is not None else eos_id(tokenizer)
    longest = max(len(ids) for ids in encoded)
    start = -(-longest // ROUND) * ROUND
    tokens = np.zeros((len(texts), start + max_new_tokens), np.int32)
    mask = np.ones_like(tokens)
    for i, ids in enumerate(encoded):
        tokens[i, start - len(ids) : start] = ids
        mask[i, : start - len(ids)] = 0
    from flax import nnx  # noqa: PLC0415 (import cost: flax; jaxfeed.text stays light)

    graphdef, state = nnx.split(model)
    out, _ = _decode_jit(
        graphdef, state, jnp.asarray(tokens), jnp.asarray(mask), start, max_new_tokens,
        jnp.int32(-1 if eos is None else eos), jnp.float32(temperature),
        jnp.int32(top_k or 0), jnp.float32(1.0 if top_p is None else top_p),
        jax.random.key(seed),
    )  # fmt: skip
    results = []
    for row in np.asarray(out)[:, start:]:
        ids = row.tolist()
        if eos is not None and eos in ids:
            ids = ids[: ids.index(eos)]
        results.append(tokenizer.decode(ids, skip_special_tokens=True))
    return results[0] if single else results
