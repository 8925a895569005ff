"""Decoding with the key/value cache when a causal LM's layers are stored stacked: one
``lax.scan`` over the stack and a stacked cache (the decode program holds one layer's code), with
the same logits as the layers run one after the other or kept as a list of their own."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models.hub.decoder import CausalLM, DecoderSpec, rope_frequencies
from jaxfeed.models.stacked import Stack, unstack


def _model(layers: int, **spec) -> CausalLM:
    config = dict(vocab_size=40, hidden_size=16, num_layers=layers, num_heads=4, num_kv_heads=2,
                  head_dim=4, intermediate_size=24, max_positions=64,
                  inv_freq=rope_frequencies({}, 4))  # fmt: skip
    config.update(spec)
    model = CausalLM(DecoderSpec(**config), rngs=nnx.Rngs(0))
    model.eval()
    return model


def _decode_steps(model: CausalLM, steps: int = 3) -> np.ndarray:
    """Prefill two left-padded prompts into 16 slots, then ``steps`` greedy tokens: the logits."""
    ids = jnp.array([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]], jnp.int32)
    key_mask = jnp.zeros((2, 16), jnp.int32).at[:, :5].set(jnp.array([[0, 0, 1, 1, 1], [1] * 5]))
    positions = jnp.array([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]], jnp.int32)
    cache = model.init_cache(2, 16)
    logits, cache = model.decode(ids, positions, key_mask, cache, jnp.int32(0))
    out = [logits]
    for i in range(steps):
        at = 5 + i
        key_mask = key_mask.at[:, at].set(1)
        token = jnp.argmax(logits, -1).astype(jnp.int32)[:, None]
        logits, cache = model.decode(token, positions[:, -1:] + 1 + i, key_mask, cache,
                                     jnp.int32(at))  # fmt: skip
        out.append(logits)
    return np.asarray(jnp.stack(out))


@pytest.mark.parametrize("scan", ["auto", False])
def test_stacked_decoding_equals_the_layers_as_a_list(scan):
    stacked = _model(3)
    assert isinstance(stacked.layers, Stack)
    stacked.scan = scan
    listed = _model(3)
    listed.layers = unstack(listed.layers)
    expected = _decode_steps(listed)
    np.testing.assert_allclose(_decode_steps(stacked), expected, atol=2e-5, rtol=2e-5)


def test_a_decode_step_writes_only_the_new_tokens_slots_of_the_stacked_cache():
    model = _model(3)
    (keys, values), = model.init_cache(2, 8)  # fmt: skip
    assert keys.shape == (3, 2, 8, 2, 4)
    rng = np.random.default_rng(0)
    cache = ((jnp.asarray(rng.normal(size=keys.shape), keys.dtype),
              jnp.asarray(rng.normal(size=values.shape), values.dtype)),)  # fmt: skip
    _, ((new_k, new_v),) = model.decode(jnp.array([[3], [4]]), jnp.array([[5], [5]]),
                                        jnp.ones((2, 8), jnp.int32), cache, jnp.int32(5))  # fmt: skip
    for old, new in ((cache[0][0], new_k), (cache[0][1], new_v)):
        others = np.ones(8, bool)
        others[5] = False
        np.testing.assert_array_equal(np.asarray(new)[:, :, others], np.asarray(old)[:, :, others])
        assert not np.allclose(np.asarray(new)[:, :, 5], np.asarray(old)[:, :, 5])


def _dots_in_decode(layers: int) -> int:
    model = _model(layers)
    graphdef, state = nnx.split(model)

    def step(state, cache):
        m = nnx.merge(graphdef, state)
        return m.decode(jnp.ones((1, 1), jnp.int32), jnp.ones((1, 1), jnp.int32),
                        jnp.ones((1, 8), jnp.int32), cache, jnp.int32(1))  # fmt: skip

    text = jax.jit(step).lower(state, model.init_cache(1, 8)).as_text()
    return text.count("stablehlo.dot_general")


def test_the_decode_program_holds_one_layer_s_code_whatever_the_depth():
    """Compile time stays flat in depth (on a TPU v5e the 22-layer 1.1B decode program compiled
    in 2.9 s scanned against 21.5 s as a loop over the layers)."""
    assert _dots_in_decode(2) == _dots_in_decode(6)


def test_the_decoding_layout_lists_the_layers_where_they_fit_and_decodes_the_same():
    """``decode_layout`` (what ``jaxfeed generate`` calls): on a TPU with room for a copy, the
    stacked layers become a list of their own buffers (the stack's arrays are not kept) and
    greedy decoding gives the same logits; without the room, or on a CPU, nothing changes."""
    from jaxfeed.text import decode_layout

    model = _model(3)
    expected = _decode_steps(model)
    stacked_leaves = {id(x) for x in jax.tree.leaves(nnx.state(model.layers))}
    assert decode_layout(model, backend="cpu") == []
    assert decode_layout(model, backend="tpu", free_bytes=1000) == []  # 3 layers take more
    assert isinstance(model.layers, Stack)
    assert decode_layout(model, backend="tpu", free_bytes=10**9) == ["layers"]
    assert isinstance(model.layers, nnx.List) and len(model.layers) == 3
    assert not stacked_leaves & {id(x) for x in jax.tree.leaves(nnx.state(model))}
    assert model.layers[1].attention.query.kernel.ndim == 2
    np.testing.assert_allclose(_decode_steps(model), expected, atol=2e-5, rtol=2e-5)
