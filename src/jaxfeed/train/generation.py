"""Text generation with a causal language model: one compiled loop for a batch of prompts.

:func:`generate` encodes the prompts and left-pads them to a length rounded up to a multiple of
8. A model with a key/value cache (``init_cache(batch, length)`` and
``decode(input_ids, positions, key_mask, cache, index)``: :class:`~jaxfeed.models.TransformerLM`
and the Hub's causal language models) runs the prompts once (prefill), then one token per step
inside a ``jax.lax.while_loop``, each step reading the fixed-size cache and writing one slot:
the cost of a token does not grow with the square of the length. The cache has
``prompt + max_new_tokens`` slots rounded up to a multiple of 8; the number of steps,
``temperature``, ``top_k``, ``top_p``, ``seed`` and the end-of-sequence ids are values, not
constants, so the program is compiled once per (model, batch size, prompt bucket, cache bucket)
(:func:`compilations` counts them). Positions count each row's real tokens from 0, as
``transformers.generate`` numbers a left-padded row, so greedy decoding gives its tokens.

A model without a cache (or ``use_cache=False``) runs the old loop: the whole buffer through
``model(input_ids, attention_mask=mask)`` at every token.

Stop strings are text, so they are checked on the host: with ``stop``, the compiled loop runs
:data:`STOP_CHUNK` steps per call (the same program, carrying the cache from call to call), the
rows' text is decoded and a row that holds a stop string is finished; decoding ends when every
row has ended or is finished.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfeed._base.files import file_inside

EOS_TOKENS = ("<eos>", "</s>", "<|endoftext|>", "<|eos|>", "[SEP]")
ROUND = 8  # the prompt part of the buffer and the cache are multiples of this: fewer programs
EOS_SLOTS = 8  # end-of-sequence ids are passed padded to this many (more: rounded up)


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


_TRACES = [0]  # decoding programs traced in this process (see compilations)


def _decode(graphdef: Any, state: Any, tokens: jax.Array, mask: jax.Array, start: int,
            until: jax.Array, eos: jax.Array, temperature: jax.Array, top_k: jax.Array,
            top_p: jax.Array, key: jax.Array, done: jax.Array,
            i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:  # fmt: skip
    """The decoding loop without a cache: ``tokens`` ``(B, start + max_new_tokens)`` with the
    prompts left-padded in ``[0, start)``, continued from step ``i`` (rows ``done`` already
    ended) up to step ``until``; returns the buffer, the ended rows and the step reached."""
    _TRACES[0] += 1  # runs only while jit traces: one program per new signature
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
        return tokens, done | (chosen[:, None] == eos[None, :]).any(axis=1), i + 1

    def running(carry):
        _, done, i = carry
        return (i < until) & ~jnp.all(done)

    return jax.lax.while_loop(running, step, (tokens, done, i))


_decode_jit = jax.jit(_decode, static_argnums=(0, 4))


def _pick(logits: jax.Array, i: jax.Array, temperature: jax.Array, top_k: jax.Array,
          top_p: jax.Array, key: jax.Array) -> jax.Array:  # fmt: skip
    """The next token of every row: argmax when ``temperature <= 0``, else a sample (only the
    branch taken runs: greedy decoding never sorts the vocabulary)."""

    def greedy(logits):
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def sample(logits):
        scaled = _filter_logits(logits / temperature, top_k, top_p)
        return jax.random.categorical(jax.random.fold_in(key, i), scaled, axis=-1).astype(jnp.int32)

    return jax.lax.cond(temperature <= 0, greedy, sample, logits)


class Carry(NamedTuple):
    """The state of a cached decoding between two calls of the compiled loop: the logits of
    each row's next token, the cache, the new tokens so far, the rows that ended and the step."""

    logits: jax.Array
    cache: Any
    out: jax.Array
    done: jax.Array
    i: jax.Array


def _decode_cached(graphdef: Any, state: Any, tokens: jax.Array, mask: jax.Array, length: int,
                   until: jax.Array, eos: jax.Array, temperature: jax.Array, top_k: jax.Array,
                   top_p: jax.Array, key: jax.Array, carry: Carry) -> Carry:  # fmt: skip
    """At step 0, prefill the left-padded prompts ``tokens`` ``(B, start)`` into the cache of
    ``length`` slots (``carry.cache``, zeroed); then decode one token per step from
    ``carry.i`` until step ``until`` or until every row produced one of ``eos`` (or was
    ``done`` before). The returned :class:`Carry` continues the decoding in another call: one
    program whatever the steps, so that stop strings can be checked between calls."""
    _TRACES[0] += 1  # runs only while jit traces: one program per new signature
    from flax import nnx  # noqa: PLC0415 (import cost: flax; jaxfeed.text stays light)

    model = nnx.merge(graphdef, state)
    model.eval()
    batch, start = tokens.shape
    key_mask = jnp.concatenate([mask, jnp.ones((batch, length - start), mask.dtype)], axis=1)
    following = mask.sum(axis=1).astype(jnp.int32)  # the position of each row's next token

    def prefill(_):
        positions = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0).astype(jnp.int32)
        logits, cache = model.decode(tokens, positions, key_mask, carry.cache, jnp.int32(0))
        return logits.astype(jnp.float32), cache

    def kept(_):
        return carry.logits, carry.cache

    logits, cache = jax.lax.cond(carry.i == 0, prefill, kept, None)

    def step(state):
        logits, cache, out, done, i = state
        chosen = _pick(logits, i, temperature, top_k, top_p, key)
        chosen = jnp.where(done, 0, chosen)
        out = jax.lax.dynamic_update_index_in_dim(out, chosen, i, axis=1)
        done = done | (chosen[:, None] == eos[None, :]).any(axis=1)
        logits, cache = model.decode(chosen[:, None], (following + i)[:, None], key_mask, cache,
                                     start + i)  # fmt: skip
        return Carry(logits.astype(jnp.float32), cache, out, done, i + 1)

    def running(state):
        return (state.i < until) & ~jnp.all(state.done)

    return jax.lax.while_loop(running, step, Carry(logits, cache, carry.out, carry.done, carry.i))


_cached_jit = jax.jit(_decode_cached, static_argnums=(0, 4))


def compilations() -> int:
    """How many decoding programs :func:`generate` has compiled in this process (one per model
    structure, batch size, prompt bucket and cache bucket): counted as the loops are traced,
    which ``jax.jit`` does once per new signature, so no private JAX API is read."""
    return _TRACES[0]


def has_cache(model: Any) -> bool:
    """Whether ``model`` decodes with a key/value cache (``init_cache`` and ``decode``)."""
    return callable(getattr(model, "init_cache", None)) and callable(getattr(model, "decode", None))


#: The backends where decoding reads each layer's weights from buffers of their own faster than
#: from slices of a stack: on a TPU v5e, XLA prefetched a list's per-layer buffers while the layer
#: before ran (greedy decoding of a 1.1B Llama at 0.95 of the HBM bound) and read a stack's
#: slices where they lay (0.85).
UNSTACK_ON = ("tpu",)


def decode_layout(model: Any, *, backend: str | None = None,
                  free_bytes: int | None = None) -> list[str]:  # fmt: skip
    """Lay ``model`` out for decoding, in place: its layers stored stacked become a list
    (:func:`~jaxfeed.models.stacked.unstack_layers`) on the backends of :data:`UNSTACK_ON` when
    the device's free memory (``free_bytes``, default what the first device reports) holds a
    second copy of them (else they stay stacked and decoding scans them); the dotted paths of
    the stacks converted. ``jaxfeed generate`` calls it on the model it loads; call it on a model
    you only decode with (training scans the stacks; a list trains too, compiling longer).

    >>> from flax import nnx
    >>> from jaxfeed.models.stacked import Stack
    >>> class Net(nnx.Module):
    ...     def __init__(self):
    ...         self.layers = Stack(lambda rngs: nnx.Linear(4, 4, rngs=rngs), 2, rngs=nnx.Rngs(0))
    >>> decode_layout(Net(), backend="cpu"), decode_layout(Net(), backend="tpu", free_bytes=10**9)
    ([], ['layers'])
    >>> decode_layout(Net(), backend="tpu", free_bytes=100)  # no room for the copy
    []
    """
    from flax import nnx  # noqa: PLC0415 (import cost: flax; jaxfeed.text stays light)

    from jaxfeed.models.stacked import stacks, unstack_layers  # noqa: PLC0415 (as flax)

    if (backend or jax.default_backend()) not in UNSTACK_ON:
        return []
    found = stacks(model)
    if not found:
        return []
    need = sum(
        leaf.addressable_shards[0].data.nbytes if isinstance(leaf, jax.Array) else 0
        for stack in found.values()
        for leaf in jax.tree.leaves(nnx.state(stack))
    )
    if free_bytes is None:
        stats = jax.local_devices()[0].memory_stats() or {}
        free_bytes = int(stats.get("bytes_limit", 0)) - int(stats.get("bytes_in_use", 0))
    if need * 1.1 > free_bytes:  # a tenth for what decoding itself needs
        return []
    return unstack_layers(model)


def _as_ids(value: Any, name: str) -> list[int]:
    """An int or a list of ints (``eos_token_id`` in ``generation_config.json`` may be either)."""
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | np.integer) or item < 0:
            raise ValueError(
                f"generate: {name} must be a token id or a list of them, got {value!r}"
            )
    return [int(x) for x in items]


def generation_config(model: Any) -> dict:
    """The model's generation settings: its ``generation_config`` attribute (a dict), else the
    ``generation_config.json`` of the checkpoint folder it came from (``hub_source``), else {}.
    The file is read as JSON only."""
    found = getattr(model, "generation_config", None)
    if isinstance(found, dict):
        return found
    folder = getattr(getattr(model, "hub_source", None), "folder", None)
    if folder is None:
        return {}
    path = file_inside(folder, "generation_config.json", "checkpoint file")
    if path is None:
        return {}
    try:
        loaded = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise ValueError(f"generate: {path} is not valid JSON ({err})") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"generate: {path} holds a {type(loaded).__name__}, expected an object")
    return loaded


def _settings(model: Any, key: str) -> Any:
    """``key`` from the model's generation config (:func:`generation_config`), else from its
    ``hub_config`` (config.json), else None."""
    for found in (generation_config(model), getattr(model, "hub_config", None)):
        if isinstance(found, dict) and found.get(key) is not None:
            return found[key]
    return None


def end_ids(model: Any, tokenizer: Any, eos_token_id: Any = None) -> list[int]:
    """The end-of-sequence ids of a generation: ``eos_token_id`` (an id or a list), else the
    model's ``generation_config.json`` / ``config.json`` ones, else the tokenizer's
    (:func:`eos_id`); empty when there are none: rows then run to ``max_new_tokens`` (or a stop
    string), as ``transformers`` decodes without an ``eos_token_id``. Where the end of a text
    must be found (a chat reply, texts put end to end for fine-tuning), the recipes refuse a
    tokenizer without one."""
    if eos_token_id is not None:
        return _as_ids(eos_token_id, "eos_token_id")
    configured = _settings(model, "eos_token_id")
    if configured is not None:
        return _as_ids(configured, "eos_token_id of the model's generation config")
    found = eos_id(tokenizer)
    return [] if found is None else [found]


def stop_strings(model: Any, stop: str | Sequence[str] | None = None) -> list[str]:
    """The stop strings of a generation: ``stop`` (a string or a list), else the model's
    ``stop_strings`` (``generation_config.json``); non-empty strings, else a ``ValueError``.

    >>> stop_strings(object(), "\\n"), stop_strings(object())
    (['\\n'], [])
    """
    stops = _settings(model, "stop_strings") if stop is None else stop
    stops = [stops] if isinstance(stops, str) else list(stops or [])
    if any(not isinstance(s, str) or not s for s in stops):
        raise ValueError(f"generate: stop must be non-empty strings, got {stops!r}")
    for i, text in enumerate(stops):
        check_text(text, f"stop string {i}")
    return stops


def _without_padding(tokenizer: Any) -> Any:
    """``tokenizer``, or a copy with padding and truncation off when it has them on (as a Hub
    checkpoint's preprocessor does): prompts are never padded or cut at encoding."""
    if (
        getattr(tokenizer, "padding", None) is None
        and getattr(tokenizer, "truncation", None) is None
    ):
        return tokenizer
    copy = type(tokenizer).from_str(tokenizer.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


class Generated(NamedTuple):
    """New token ids of each row (up to, without, the first end-of-sequence id) and the number
    of decoding steps run (fewer than ``max_new_tokens`` when every row ended early)."""

    tokens: list[list[int]]
    steps: int


def _check_room(lengths: Sequence[int], max_new_tokens: int, context: int | None,
                texts: Sequence[str] | None) -> None:  # fmt: skip
    if context is None:
        return
    for i, n in enumerate(lengths):
        label = f"prompt {i}" + (f" ({texts[i][:40]!r})" if texts is not None else "")
        if n >= context:
            raise ValueError(
                f"generate: {label} has {n} tokens; that is longer than the model's context of "
                f"{context} tokens (max_length), which leaves no room for a new token: shorten "
                "the prompt"
            )
        if n + max_new_tokens > context:
            raise ValueError(
                f"generate: {label} has {n} tokens; max_new_tokens={max_new_tokens} is more than "
                f"the {context - n} tokens left in the model's context of {context} tokens "
                f"(max_length): ask for at most {context - n} new tokens or shorten the prompt"
            )


def generate_ids(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    *,
    eos_token_id: int | Sequence[int] | None = None,
    use_cache: bool = True,
    finished: Callable[[list[list[int]]], Sequence[bool]] | None = None,
) -> Generated:
    """:func:`generate` on token ids: ``prompts`` a list of id lists; returns a
    :class:`Generated` (new ids per row, cut before the first of ``eos_token_id``, and the
    number of steps run). ``eos_token_id`` here is only the argument (no tokenizer to ask).
    ``finished``, a function of the new ids of the rows still running (a list per row) to
    whether each is finished, is called every :data:`STOP_CHUNK` steps: a finished row stops
    there, and decoding stops once every row has (:func:`generate` checks its ``stop`` strings
    so).

    >>> from flax import nnx
    >>> from jaxfeed.models import TransformerLM
    >>> lm = TransformerLM(20, dim=16, depth=1, num_heads=2, max_length=32, rngs=nnx.Rngs(0))
    >>> out = generate_ids(lm, [[3, 4, 5], [6]], max_new_tokens=12, temperature=0)
    >>> [len(row) for row in out.tokens], out.steps
    ([12, 12], 12)
    >>> generate_ids(lm, [[3, 4, 5], [6]], 12, temperature=0, use_cache=False).tokens == out.tokens
    True
    >>> generate_ids(lm, [[3], [6]], 12, temperature=0, finished=lambda rows: [True] * len(rows)).steps
    8
    """
    rows = [list(map(int, ids)) for ids in prompts]
    if not rows:
        raise ValueError("generate: no prompts given")
    _check_numbers(max_new_tokens, temperature, top_k, top_p, seed)
    for i, ids in enumerate(rows):
        if not ids:
            raise ValueError(f"generate: prompt {i} has no tokens")
    _check_room([len(ids) for ids in rows], max_new_tokens, getattr(model, "max_length", None),
                None)  # fmt: skip
    eos = [] if eos_token_id is None else _as_ids(eos_token_id, "eos_token_id")
    return _run(model, rows, max_new_tokens, temperature, top_k, top_p, seed, eos, use_cache,
                finished)  # fmt: skip


def _check_numbers(max_new_tokens: Any, temperature: Any, top_k: Any, top_p: Any,
                   seed: Any = 0) -> None:  # fmt: skip
    """The sampling settings, each refused by name unless of the right type and range (NaN and
    infinities included: a NaN temperature would sample from NaN logits).

    >>> _check_numbers(4, float("nan"), None, None)
    Traceback (most recent call last):
    ValueError: generate: temperature must be a finite number >= 0 (0: greedy), got nan
    """
    if not _is_int(max_new_tokens) or max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"generate: top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not (_is_real(top_p) and 0 < float(top_p) <= 1):
        raise ValueError(f"generate: top_p must be in (0, 1] or None, got {top_p!r}")
    if not (_is_real(temperature) and 0 <= float(temperature) < math.inf):
        raise ValueError(
            f"generate: temperature must be a finite number >= 0 (0: greedy), got {temperature!r}"
        )
    if not _is_int(seed) or not -(2**63) <= seed < 2**63:
        raise ValueError(f"generate: seed must be an int (a 64-bit one), got {seed!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


STOP_CHUNK = 8  # with stop strings, the steps run between two checks of the decoded text


def _run(model: Any, rows: list[list[int]], max_new_tokens: int, temperature: float,
         top_k: int | None, top_p: float | None, seed: int, eos: list[int],
         use_cache: bool, finished: Any = None) -> Generated:  # fmt: skip
    """Decode ``rows``: in one call of the compiled loop, or (``finished``: a function of the
    new ids of every row, cut at an end id, to whether each row is finished) in calls of
    :data:`STOP_CHUNK` steps, each followed by ``finished`` on the rows still running; the
    loop stops when every row has ended or is finished."""
    from flax import nnx  # noqa: PLC0415 (import cost: flax; jaxfeed.text stays light)

    vocab = getattr(model, "vocab_size", None)
    for i, ids in enumerate(rows):
        if vocab is not None and (max(ids) >= vocab or min(ids) < 0):
            raise ValueError(
                f"generate: prompt {i} has token id {max(ids)}, outside the model's vocabulary of "
                f"{vocab}: the tokenizer does not match the model"
            )
    longest = max(len(ids) for ids in rows)
    start = -(-longest // ROUND) * ROUND
    cached = use_cache and has_cache(model)
    length = -(-(start + max_new_tokens) // ROUND) * ROUND if cached else start + max_new_tokens
    width = start if cached else length
    tokens = np.zeros((len(rows), width), np.int32)
    mask = np.ones_like(tokens)
    for i, ids in enumerate(rows):
        tokens[i, start - len(ids) : start] = ids
        mask[i, : start - len(ids)] = 0
    graphdef, state = nnx.split(model)
    settings = (jnp.float32(temperature), jnp.int32(top_k or 0),
                jnp.float32(1.0 if top_p is None else top_p), jax.random.key(seed))  # fmt: skip
    slots = -(-max(len(eos), 1) // EOS_SLOTS) * EOS_SLOTS
    ends = np.full((slots,), -1, np.int32)
    ends[: len(eos)] = eos
    tokens, mask, ends = jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(ends)
    done = np.zeros((len(rows),), bool)
    place = _placer(state)
    if cached:
        carry = Carry(jnp.zeros((len(rows), _vocab(model, vocab)), jnp.float32),
                      model.init_cache(len(rows), length),
                      jnp.zeros((len(rows), length - start), jnp.int32), jnp.asarray(done),
                      jnp.int32(0))  # fmt: skip
    else:
        carry = (tokens, jnp.asarray(done), jnp.int32(0))
    carry = place(carry)
    ran = 0
    while True:
        until = max_new_tokens if finished is None else min(max_new_tokens, ran + STOP_CHUNK)
        if cached:
            carry = _cached_jit(graphdef, state, tokens, mask, length, jnp.int32(until), ends,
                                *settings, carry)  # fmt: skip
            new, ended, ran = carry.out, carry.done, int(carry.i)
        else:
            carry = _decode_jit(graphdef, state, carry[0], mask, start, jnp.int32(until), ends,
                                *settings, carry[1], carry[2])  # fmt: skip
            new, ended, ran = carry[0][:, start:], carry[1], int(carry[2])
        done = np.asarray(ended)
        if ran >= max_new_tokens or done.all() or finished is None:
            break
        running = np.flatnonzero(~done)
        so_far = _cut(np.asarray(new)[running, :ran], eos)
        done = done.copy()
        done[running] = np.asarray(finished(so_far), bool)
        if done.all():
            break
        ended = place(jnp.asarray(done))
        carry = carry._replace(done=ended) if cached else (carry[0], ended, carry[2])
    return Generated(_cut(np.asarray(new)[:, :max_new_tokens], eos), ran)


def _placer(state: Any) -> Callable[[Any], Any]:
    """Where the decoding loop's carry goes: onto the model's device when its weights all lie on
    one, as the loop's outputs do (a carry that came back from a call and one made on the host
    must look alike to ``jax.jit``, else the chunks after the first compile the loop again);
    elsewhere left as it is."""
    devices = {d for leaf in jax.tree.leaves(state) if isinstance(leaf, jax.Array)
               for d in leaf.devices()}  # fmt: skip
    if len(devices) != 1:
        return lambda tree: tree
    device = devices.pop()
    return lambda tree: jax.device_put(tree, device)


def _cut(new: np.ndarray, eos: list[int]) -> list[list[int]]:
    """Each row's ids up to (without) its first end id."""
    results = []
    for row in new:
        ids = row.tolist()
        cut = min((ids.index(e) for e in eos if e in ids), default=len(ids))
        results.append(ids[:cut])
    return results


def _vocab(model: Any, vocab: int | None) -> int:
    """The width of the model's logits."""
    if vocab is not None:
        return int(vocab)
    probe = jax.eval_shape(lambda: model.decode(jnp.zeros((1, 1), jnp.int32),
                                                jnp.zeros((1, 1), jnp.int32),
                                                jnp.ones((1, 8), jnp.int32),
                                                model.init_cache(1, 8), jnp.int32(0)))  # fmt: skip
    return int(probe[0].shape[-1])


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
    eos_token_id: int | Sequence[int] | None = None,
    stop: str | Sequence[str] | None = None,
    add_special_tokens: bool | None = None,
    use_cache: bool = True,
) -> str | list[str]:
    """Continue each prompt with up to ``max_new_tokens`` tokens from a causal language model.

    ``model`` is an NNX model such as :class:`~jaxfeed.models.TransformerLM` or a Hub causal
    language model (``jaxfeed.models.from_pretrained(..., task="causal-lm")``); ``tokenizer`` a
    ``tokenizers.Tokenizer`` (:func:`~jaxfeed.text.load_tokenizer`,
    :func:`~jaxfeed.text.train_tokenizer`, ``jaxfeed.models.preprocessor``). Prompts are
    encoded without special tokens, except for Hub models (``add_special_tokens=None``: as their
    tokenizer says, e.g. Llama's ``<s>``). Returns the continuation of each prompt (without the
    prompt, decoded without special tokens): a string for a string, a list for a list.

    ``temperature=0`` is greedy decoding (the most likely token: deterministic, the tokens of
    ``transformers``' ``generate(do_sample=False)``); otherwise tokens are sampled from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` most likely and to the
    nucleus of probability ``top_p``, with keys from ``seed`` (the same seed gives the same
    text; ``top_k=1`` is greedy). A row ends at an end-of-sequence id: ``eos_token_id`` (an id
    or a list), else the model's ``generation_config.json`` / ``config.json`` ones, else the
    tokenizer's ``<eos>``, ``</s>``, ``<|endoftext|>`` or ``[SEP]``; decoding stops when every
    row has ended. With none of these (a tokenizer without an end-of-sequence token, and no
    ``eos_token_id`` given or configured) every row runs to ``max_new_tokens`` or a stop
    string, as ``transformers`` does without an ``eos_token_id``: not an error here (``jaxfeed
    generate --chat`` and fine-tuning on texts put end to end refuse it). ``stop`` strings (or
    the checkpoint's ``stop_strings``) cut each continuation before the first one found; a row
    whose text holds one stops decoding (the text is checked every :data:`STOP_CHUNK` steps),
    and decoding ends when every row has. A prompt that leaves fewer than ``max_new_tokens``
    tokens of room in the model's context (``max_length``) is an error naming both numbers;
    nothing is cut silently.

    Models with a key/value cache decode one token per step (see the module docstring;
    ``use_cache=False`` runs the old whole-buffer loop). The decoding is one compiled program
    per model, batch size and length bucket (:func:`compilations` counts them): no
    recompilation per token, per seed or per setting.

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
    texts, single = _prompt_texts(prompts)
    _check_numbers(max_new_tokens, temperature, top_k, top_p, seed)
    encoded = _encode_prompts(model, tokenizer, texts, add_special_tokens, max_new_tokens)
    eos = end_ids(model, tokenizer, eos_token_id)
    stops = stop_strings(model, stop)

    def finished(rows: list[list[int]]) -> list[bool]:  # a stop string ends a row's decoding
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in rows]
        return [any(s in text for s in stops) for text in texts]

    generated = _run(model, encoded, max_new_tokens, temperature, top_k, top_p, seed, eos,
                     use_cache, finished if stops else None)  # fmt: skip
    results = _continuations(tokenizer, generated.tokens, stops)
    return results[0] if single else results


def _prompt_texts(prompts: Any) -> tuple[list[str], bool]:
    """The prompts as a list of strings, and whether one string was given; refused, naming the
    prompt, when not strings."""
    if prompts is None:
        raise TypeError("generate: prompts is None; give a str or a list of str to continue")
    single = isinstance(prompts, str)
    if not single and not isinstance(prompts, Sequence):
        raise TypeError(
            f"generate: prompts must be a str or a list of str, got {type(prompts).__name__}"
        )
    texts = [prompts] if single else list(prompts)
    if not texts:
        raise ValueError("generate: no prompts given")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"generate: prompt {i} is a {type(text).__name__}, expected a str")
        check_text(text, f"prompt {i}")
    return texts, single


def check_text(text: str, what: str) -> None:
    """Refuse a text that is not Unicode a tokenizer can encode: one holding a lone surrogate,
    which is what Python makes of bytes that are not UTF-8 (a command-line argument or a file
    read with ``errors="surrogateescape"``), naming ``what`` and the byte.

    >>> check_text("caf\\udce9", "prompt 0")
    Traceback (most recent call last):
    ValueError: generate: prompt 0 is not UTF-8 text (byte 0xe9 at character 3): give it as UTF-8
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        char = text[err.start]
        code = ord(char)
        shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise ValueError(
            f"generate: {what} is not UTF-8 text ({shown} at character {err.start}): give it as "
            "UTF-8"
        ) from None


def _encode_prompts(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    add_special_tokens: bool | None,
    max_new_tokens: int,
) -> list[list[int]]:
    """The prompts' token ids (special tokens for Hub models unless told), each refused when it
    encodes to nothing or leaves no room for ``max_new_tokens`` in the model's context."""
    special = hasattr(model, "hub_config") if add_special_tokens is None else add_special_tokens
    plain = _without_padding(tokenizer)
    encoded = [e.ids for e in plain.encode_batch(texts, add_special_tokens=special)]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"generate: prompt {i} ({texts[i][:40]!r}) encodes to no tokens")
    _check_room([len(ids) for ids in encoded], max_new_tokens, getattr(model, "max_length", None),
                texts)  # fmt: skip
    return encoded


def _continuations(tokenizer: Any, tokens: Any, stops: Sequence[str]) -> list[str]:
    """Each row's generated tokens decoded (no special tokens), cut before its first stop
    string."""
    results = []
    for ids in tokens:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        cut = min((text.index(s) for s in stops if s in text), default=len(text))
        results.append(text[:cut])
    return results
