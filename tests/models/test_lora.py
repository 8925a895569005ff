"""``jaxfeed.models.lora`` on one layer (and int8 loading of a checkpoint, issue 63 D11): int8 kernels keep one scale per output channel, a merged
int8 layer is float32 (the dequantized kernel plus the adapters' update), and the adapters'
dropout acts in training only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("qwix")

from safetensors.numpy import load_file

from jaxfeed.models import from_pretrained
from jaxfeed.models.hub.files import write_safetensors
from jaxfeed.models.lora import LoRA, LoRALinear, merge, quantize_int8
from models.hub.lm_checkpoints import save_tiny

COLUMN_SCALES = np.array([1e-3, 1.0, 10.0, 1000.0], np.float32)


def _kernel(n_in=32):
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.normal(size=(n_in, 4)).astype(np.float32) * COLUMN_SCALES)


def _adapted(dropout=0.0, quantize=None, wide=True):
    """A LoRALinear (over a kernel whose columns differ a millionfold when ``wide``) with
    random (non-zero) B."""
    base = nnx.Linear(32, 4, rngs=nnx.Rngs(0))
    if wide:
        base.kernel.set_value(_kernel())
    layer = LoRALinear(base, LoRA(rank=2, alpha=4, dropout=dropout), key=jax.random.key(1),
                       quantize=quantize)  # fmt: skip
    b = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    layer.lora_b.set_value(jnp.asarray(b))
    return base, layer


def test_int8_scales_are_one_per_output_channel():
    """absmax per column: each column's largest value is +-127, whatever the other columns hold
    (one scale for the tensor would round the 1e-3 column to zeros)."""
    kernel = _kernel()
    q, scale = quantize_int8(kernel)
    absmax = np.abs(np.asarray(kernel)).max(axis=0)
    assert q.dtype == jnp.int8 and scale.shape == (1, 4)
    ratio = np.asarray(scale)[0] / absmax  # qwix's step: absmax / 127.5
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-5)
    assert 1 / 128 <= ratio[0] <= 1 / 126, ratio
    assert np.abs(np.asarray(q, np.int32)).max(axis=0).tolist() == [127] * 4
    error = np.abs(np.asarray(q, np.float32) * np.asarray(scale) - np.asarray(kernel)).max(axis=0)
    assert (error <= absmax / 126).all(), error / absmax  # within a step, in every column


def test_a_merged_int8_layer_is_float32_dequantized_plus_the_update():
    base, layer = _adapted(quantize="int8")
    assert layer.kernel[...].dtype == jnp.int8
    merged = merge(layer)
    kernel = np.asarray(merged.kernel[...])
    assert kernel.dtype == np.float32
    dequantized = np.asarray(layer.base_kernel(jnp.float32))
    np.testing.assert_allclose(kernel, dequantized + np.asarray(layer.delta()), rtol=1e-6,
                               atol=1e-6)  # fmt: skip
    # close to the full-precision kernel plus the update: within an int8 step in every column
    full = np.asarray(base.kernel[...]) + np.asarray(layer.delta())
    step = np.abs(np.asarray(base.kernel[...])).max(axis=0) / 126
    assert (np.abs(kernel - full).max(axis=0) <= step).all()
    x = jnp.asarray(np.random.default_rng(2).normal(size=(3, 32)), jnp.float32)
    np.testing.assert_allclose(np.asarray(merged(x)), np.asarray(layer(x)), rtol=1e-4, atol=1e-3)


def test_adapter_dropout_acts_in_training_only():
    base, layer = _adapted(dropout=0.5, wide=False)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(8, 32)), jnp.float32)
    update = np.asarray((x @ layer.lora_a[...] @ layer.lora_b[...]) * layer.scaling)
    expected = np.asarray(base(x)) + update
    layer.eval()
    for _ in range(2):  # the same output each call: no mask
        np.testing.assert_allclose(np.asarray(layer(x)), expected, rtol=1e-5, atol=1e-4)
    layer.train()
    trained = np.asarray(layer(x))
    assert np.abs(trained - expected).max() > 0.1 * np.abs(update).max()  # half the inputs dropped
    np.testing.assert_allclose(np.asarray(merge(layer)(x)), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_weight_is_not_quantized_into_a_finite_one(bad):
    kernel = jnp.ones((3, 4)).at[1, 2].set(bad)
    with pytest.raises(ValueError, match=r"holds 1 NaN or infinite value: int8 cannot hold them"):
        quantize_int8(kernel)


def test_int8_loading_names_the_layer_whose_weight_is_nan(tmp_path):
    """The float model's logits were NaN, the int8 model's finite and plausible."""
    folder = save_tiny(tmp_path / "llama")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = np.nan
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(ValueError, match=r"model.layers.1.mlp.up_proj: its weight holds 1 NaN"):
        from_pretrained(folder, lora=LoRA(rank=2), quantize="int8")


LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # JAX's, once per program lowered


def _programs_lowered(load):
    """How many programs JAX lowered (compiled, or fetched from the persistent cache) while
    ``load()`` ran; what it returned."""
    seen = []

    def on_event(event, _seconds, **_):
        if event == LOWERED:
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        out = load()
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    return len(seen), out


def test_an_int8_load_compiles_one_quantizer_per_weight_shape_not_per_module(tmp_path):
    """Issue 64 item 9: a small model's int8 load spent most of its time compiling: a jit made
    anew for each module and eager NaN checks. The tiny Llama's 7 block modules have 4 weight
    shapes (q/o, k/v, gate/up, down): the int8 load lowers at most 4 programs more than a float
    LoRA load of the same folder, and a second int8 load none."""
    folder = save_tiny(tmp_path / "tiny")
    shapes = {(16, 16), (16, 8), (16, 24), (24, 16)}
    from_pretrained(folder, lora=LoRA(rank=2))  # what a float LoRA load compiles, compiled
    first, model = _programs_lowered(lambda: from_pretrained(folder, lora=LoRA(rank=2),
                                                              quantize="int8"))  # fmt: skip
    again, _ = _programs_lowered(lambda: from_pretrained(folder, lora=LoRA(rank=2),
                                                          quantize="int8"))  # fmt: skip
    kernels = {
        tuple(v.shape[-2:]) for v in jax.tree.leaves(nnx.state(model)) if v.dtype == jnp.int8
    }
    assert kernels == shapes
    assert first <= len(shapes), first
    assert again == 0, again


def test_int8_values_are_qwix_s_for_stacks_and_single_layers():
    """The shared quantizer gives bit for bit what ``qwix`` gave before: a stack as a jit of
    ``lax.map`` over its layers, one layer eagerly."""
    import qwix

    def one(k):
        q = qwix.quantize(k, jnp.int8, channelwise_axes=[1], scale_dtype=jnp.float32)
        return q.qvalue, q.scale

    rng = np.random.default_rng(3)
    stack = rng.normal(size=(3, 33, 20)).astype(np.float32) * rng.lognormal(0, 4, (3, 1, 20))
    stack[1, :, 2] = 0.0  # a zero column: scale 1
    stack[2, :4, 3] = [2.5, -2.5, 1.25, 0.5]  # halves: rounding ties
    stack = jnp.asarray(stack)
    q, scale = quantize_int8(stack)
    old_q, old_scale = jax.jit(lambda k: jax.lax.map(one, k))(stack)
    np.testing.assert_array_equal(np.asarray(q), np.asarray(old_q))
    np.testing.assert_array_equal(np.asarray(scale), np.asarray(old_scale))
    for layer in stack:
        q, scale = quantize_int8(layer)
        old_q, old_scale = one(layer)
        np.testing.assert_array_equal(np.asarray(q), np.asarray(old_q))
        np.testing.assert_array_equal(np.asarray(scale), np.asarray(old_scale))


def test_adapters_start_from_the_same_draw_as_before():
    """``lora_a`` is drawn flat and reshaped (a program that compiles ten times faster than a
    3-D draw's): the values of ``uniform(key, (in, rank))`` as before."""
    _, layer = _adapted(wide=False)
    bound = 1.0 / np.sqrt(32)
    expected = jax.random.uniform(jax.random.key(1), (32, 2), jnp.float32, -bound, bound)
    np.testing.assert_array_equal(np.asarray(layer.lora_a[...]), np.asarray(expected))
