"""`jaxfeed.models.im2col_conv`: the first layer's convolution as im2col + one product equals XLA's
convolution (values, gradients, forward mode), falls back for everything else, and the reference
CNN trains to the same parameters (3 SGD steps, 1e-4) as with ``lax.conv_general_dilated``."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax import lax

from jaxfeed.models import CNN, LinenCNN, im2col_conv

NHWC = ("NHWC", "HWIO", "NHWC")


def _both(x, w, strides, padding):
    dn = lax.conv_dimension_numbers(x.shape, w.shape, NHWC)

    def ours(a, b):
        return im2col_conv(a, b, strides, padding, dimension_numbers=dn)

    def ref(a, b):
        return lax.conv_general_dilated(a, b, strides, padding, dimension_numbers=dn)

    return ours, ref


def _rel(a, b) -> float:
    """The largest difference relative to the largest value of ``b`` (in NumPy: no eager JAX
    operation, each of which would compile for its shapes)."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


CASES = list(
    itertools.product(
        [(2, 9, 7, 1), (3, 8, 8, 3), (1, 6, 11, 4)],  # N, H, W, C (shallow: im2col)
        [(3, 3), (5, 5), (1, 1), (3, 1)],
        [(1, 1), (2, 2), (1, 2)],
        ["SAME", "VALID", ((1, 0), (2, 1))],
    )
)


@pytest.mark.parametrize(("shape", "kernel", "strides", "padding"), CASES[::5])
def test_values_and_gradients_equal_xla(shape, kernel, strides, padding):
    rng = np.random.default_rng(sum(shape) + sum(kernel))
    x = jnp.asarray(rng.normal(size=shape), jnp.float32)
    w = jnp.asarray(rng.normal(size=(*kernel, shape[-1], 6)), jnp.float32)
    ours, ref = _both(x, w, strides, padding)
    g = jnp.asarray(rng.normal(size=jax.eval_shape(ref, x, w).shape), jnp.float32)
    t_x, t_w = np.ones(x.shape, np.float32), np.full(w.shape, 0.1, np.float32)

    def loss(f):
        return lambda a, b: jnp.sum(jnp.square(f(a, b)) * g)

    @jax.jit  # one program per case for both convolutions: values, gradients, forward mode
    def results(x, w):
        return [
            (f(x, w), jax.grad(loss(f), argnums=(0, 1))(x, w), jax.jvp(f, (x, w), (t_x, t_w))[1])
            for f in (ours, ref)
        ]

    (y_ours, grads_ours, tangent_ours), (y_ref, grads_ref, tangent_ref) = results(x, w)
    assert y_ours.shape == y_ref.shape
    assert _rel(y_ours, y_ref) < 1e-5
    for a, b in zip(grads_ours, grads_ref, strict=True):
        assert _rel(a, b) < 1e-5
    # forward mode (no custom VJP in the way): jvp equals XLA's
    assert _rel(tangent_ours, tangent_ref) < 1e-5


def test_other_convolutions_go_to_xla_unchanged():
    rng = np.random.default_rng(0)
    deep = jnp.asarray(rng.normal(size=(2, 8, 8, 32)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(3, 3, 32, 4)), jnp.float32)
    ours, ref = _both(deep, w, (1, 1), "SAME")
    np.testing.assert_array_equal(np.asarray(ours(deep, w)), np.asarray(ref(deep, w)))
    # dilation: lax's own result
    x = jnp.asarray(rng.normal(size=(1, 6, 6, 1)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(3, 3, 1, 2)), jnp.float32)
    dn = lax.conv_dimension_numbers(x.shape, k.shape, NHWC)
    dilated = im2col_conv(x, k, (1, 1), "SAME", rhs_dilation=(2, 2), dimension_numbers=dn)
    expected = lax.conv_general_dilated(x, k, (1, 1), "SAME", rhs_dilation=(2, 2),
                                        dimension_numbers=dn)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(dilated), np.asarray(expected))
    big = jnp.ones((7, 7, 1, 2), jnp.float32)  # larger than the input: lax's empty result
    dn = lax.conv_dimension_numbers(x.shape, big.shape, NHWC)
    empty = lax.conv_general_dilated(x, big, (1, 1), "VALID", dimension_numbers=dn)
    assert im2col_conv(x, big, (1, 1), "VALID", dimension_numbers=dn).shape == empty.shape


def _train(model: nnx.Module, steps: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((16, 16, 16, 3)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 10, 16))
    optimizer = nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        def loss_fn(model):
            logits = model(x, rngs=nnx.Rngs(dropout=1))
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        grads = nnx.grad(loss_fn)(model)
        optimizer.update(model, grads)

    for _ in range(steps):
        step(model, optimizer)
    return {
        jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(nnx.state(model, nnx.Param))[0]
    }


def test_reference_cnn_trains_as_with_xla_convolutions():
    ours = CNN(10, input_shape=(16, 16, 3), rngs=nnx.Rngs(0))
    assert ours.conv1.conv_general_dilated is im2col_conv
    xla = CNN(10, input_shape=(16, 16, 3), rngs=nnx.Rngs(0))
    xla.conv1.conv_general_dilated = xla.conv2.conv_general_dilated = lax.conv_general_dilated
    # SGD: AdamW's first steps move each weight by about +-lr whatever the size of its gradient,
    # so float rounding alone flips near-zero gradients' updates (the xla_flags sweep shows it)
    a, b = _train(ours), _train(xla)
    assert max(_rel(a[k], b[k]) for k in b) < 1e-4


def test_linen_cnn_uses_it_with_the_same_parameters():
    model = LinenCNN(10)
    x = jnp.asarray(np.random.default_rng(0).random((2, 8, 8, 3)), jnp.float32)
    variables = model.init(jax.random.key(0), x, train=False)
    assert variables["params"]["Conv_0"]["kernel"].shape == (3, 3, 3, 32)
    out = model.apply(variables, x, train=False)
    assert out.shape == (2, 10) and bool(jnp.isfinite(out).all())
