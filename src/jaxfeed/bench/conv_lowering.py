"""Lowerings of the CNN's convolutions on CPU: XLA's own convolution against rewrites, with
PyTorch eager on the same layers in the same run.

The article's CNN spends most of its CPU training step in its two 3x3 convolutions
(128 x 32 x 32 x 3 -> 32 and 128 x 16 x 16 x 32 -> 64). For each layer this times the forward
pass and a training pass (forward, then the gradients the step needs of ``sum(y**2 * g)``: the
kernel's, and the input's for the second layer) of:

* ``XLA NHWC``: ``lax.conv_general_dilated`` on channels-last data (what ``nnx.Conv`` does);
* ``XLA NCHW``: the same on channels-first data and an ``OIHW`` kernel;
* ``im2col patches + dot``: ``lax.conv_general_dilated_patches`` then one matrix product;
* ``im2col slices + dot, custom VJP``: the patches built from 9 shifted slices, one matrix
  product, and a custom VJP (kernel gradient = patches^T @ dy, input gradient = a forward
  convolution of dy with the flipped kernel);
* ``im2col slices + dot, JAX's VJP``: the same product differentiated by JAX (what
  :func:`jaxfeed.models.im2col_conv` does for shallow kernels);
* PyTorch eager (``torch.nn.functional.conv2d``, channels-first, oneDNN), when installed.

Every JAX lowering is checked against ``XLA NHWC`` (outputs and gradients, largest relative
difference), cases take turns in every repeat and the table shows medians.

``--step`` also times the Trainer's whole CNN step with XLA's convolutions, with
:func:`jaxfeed.models.im2col_conv` (what the reference models use: im2col for the first layer's
three input channels, where XLA's convolution is weakest, XLA's convolution for the second) and
with the first layer done by :func:`slices_conv` (custom VJP).

Run: ``python -m jaxfeed.bench.conv_lowering [--repeats 5] [--iters 10] [--step]``.

>>> import numpy as np
>>> x = np.random.default_rng(0).normal(size=(2, 5, 5, 3)).astype(np.float32)
>>> w = np.random.default_rng(1).normal(size=(3, 3, 3, 4)).astype(np.float32)
>>> bool(np.allclose(slices_conv(x, w), nhwc_conv(x, w), atol=1e-5))
True
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfeed import Trainer
from jaxfeed.bench._common import machine, save_json
from jaxfeed.bench._steps import BATCH, SHAPE, ms_per_step, trainer_case
from jaxfeed.models import CNN
from jaxfeed.models.conv import im2col_conv

LAYERS = {  # name: (batch, height, in channels, out channels, the step needs the input's gradient)
    "conv1 128x32x32x3 -> 32": (128, 32, 3, 32, False),
    "conv2 128x16x16x32 -> 64": (128, 16, 32, 64, True),
}
NHWC = ("NHWC", "HWIO", "NHWC")


def nhwc_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    """XLA's convolution, channels-last, 'SAME' padding, stride 1."""
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC)


def nchw_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    """The same on NCHW data with an OIHW kernel."""
    return lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )


def patches_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    """``conv_general_dilated_patches`` (channel-major patches) and one product."""
    kh, kw, ci, co = w.shape
    cols = lax.conv_general_dilated_patches(x, (kh, kw), (1, 1), "SAME", dimension_numbers=NHWC)
    return cols @ w.transpose(2, 0, 1, 3).reshape(ci * kh * kw, co)


def _shifted_columns(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """``(N, H, W, kh * kw * C)``: the 'SAME'-padded input shifted by every kernel offset."""
    _, h, w, _ = x.shape
    xp = jnp.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    return jnp.concatenate(
        [xp[:, i : i + h, j : j + w, :] for i in range(kh) for j in range(kw)], -1
    )


def slices_autodiff_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    """im2col from shifted slices and one product, differentiated by JAX."""
    kh, kw, ci, co = w.shape
    return _shifted_columns(x, kh, kw) @ w.reshape(kh * kw * ci, co)


@jax.custom_vjp
def slices_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    """im2col from shifted slices and one product; custom VJP (see the module docstring)."""
    kh, kw, ci, co = w.shape
    return _shifted_columns(x, kh, kw) @ w.reshape(kh * kw * ci, co)


def _slices_fwd(x, w):
    return slices_conv(x, w), (x, w)


def _slices_bwd(res, dy):
    x, w = res
    kh, kw, ci, co = w.shape
    cols = _shifted_columns(x, kh, kw).reshape(-1, kh * kw * ci)
    dw = (cols.T @ dy.reshape(-1, co)).reshape(kh, kw, ci, co)
    dx = nhwc_conv(dy, jnp.flip(w, (0, 1)).swapaxes(2, 3))
    return dx, dw


slices_conv.defvjp(_slices_fwd, _slices_bwd)


def slices_conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                                rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                                **kwargs):  # fmt: skip
    """:func:`slices_conv` where it applies (stride 1, no dilation or groups, NHWC/HWIO, odd
    kernel, 'SAME' padding), else ``lax.conv_general_dilated``: a drop-in for ``nnx.Conv``'s
    ``conv_general_dilated``."""
    kh, kw = rhs.shape[:2]
    same = padding == "SAME" or [tuple(p) for p in padding] == [(kh // 2,) * 2, (kw // 2,) * 2]
    plain = (
        rhs.ndim == 4
        and kh % 2 == 1
        and kw % 2 == 1
        and same
        and all(s == 1 for s in window_strides)
        and all(d == 1 for d in (lhs_dilation or ()) + (rhs_dilation or ()))
        and feature_group_count == 1
        and dimension_numbers == lax.conv_dimension_numbers(lhs.shape, rhs.shape, NHWC)
    )
    if not plain:
        return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation,
                                        rhs_dilation, dimension_numbers, feature_group_count,
                                        **kwargs)  # fmt: skip
    return slices_conv(lhs, rhs)


LOWERINGS: dict[str, Callable] = {
    "XLA NHWC (nnx.Conv)": nhwc_conv,
    "XLA NCHW": nchw_conv,
    "im2col patches + dot": patches_conv,
    "im2col slices + dot, custom VJP": slices_conv,
    "im2col slices + dot, JAX's VJP": slices_autodiff_conv,
}


def _jax_cases(layer: tuple, rng: np.random.Generator) -> tuple[dict, dict]:
    """``{name: (fwd, train)}`` runners and ``{name: max relative difference}`` from NHWC."""
    n, h, ci, co, needs_dx = layer
    x = rng.normal(size=(n, h, h, ci)).astype(np.float32)
    w = (rng.normal(size=(3, 3, ci, co)) * 0.1).astype(np.float32)
    g = rng.normal(size=(n, h, h, co)).astype(np.float32)
    argnums = (0, 1) if needs_dx else (1,)
    cases, diffs, reference = {}, {}, None
    for name, conv in LOWERINGS.items():
        if conv is nchw_conv:
            xi, wi, gi = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), g.transpose(0, 3, 1, 2)
        else:
            xi, wi, gi = x, w, g
        xi, wi, gi = (jax.device_put(a) for a in (xi, wi, gi))
        fwd = jax.jit(conv)
        train = jax.jit(
            jax.grad(lambda a, b, c, f=conv: jnp.sum(jnp.square(f(a, b)) * c), argnums=argnums)
        )
        outs = [np.asarray(fwd(xi, wi)), *(np.asarray(t) for t in train(xi, wi, gi))]
        if conv is nchw_conv:  # back to the NHWC/HWIO layouts for the comparison
            outs = [outs[0].transpose(0, 2, 3, 1)] + [
                t.transpose(0, 2, 3, 1)
                if t.ndim == 4 and t.shape[0] == n
                else t.transpose(2, 3, 1, 0)
                for t in outs[1:]
            ]
        if reference is None:
            reference = outs
        diffs[name] = max(
            float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))
            for a, b in zip(outs, reference, strict=True)
        )
        cases[name] = (
            lambda f=fwd, a=xi, b=wi: f(a, b),
            lambda t=train, a=xi, b=wi, c=gi: t(a, b, c),
        )
    return cases, diffs


def _torch_cases(layer: tuple, rng: np.random.Generator) -> dict:
    try:
        import torch  # optional peer (the bench extra)
    except ImportError:
        return {}
    n, h, ci, co, needs_dx = layer
    x = torch.from_numpy(rng.normal(size=(n, ci, h, h)).astype(np.float32))
    x.requires_grad_(needs_dx)
    w = torch.from_numpy((rng.normal(size=(co, ci, 3, 3)) * 0.1).astype(np.float32))
    w.requires_grad_(True)
    g = torch.from_numpy(rng.normal(size=(n, co, h, h)).astype(np.float32))
    conv = torch.nn.functional.conv2d

    def fwd():
        with torch.no_grad():
            return conv(x, w, padding=1)

    def train():
        w.grad = x.grad = None
        (conv(x, w, padding=1).square() * g).sum().backward()
        return w.grad

    return {f"PyTorch {torch.__version__.split('+')[0]} eager (NCHW, oneDNN)": (fwd, train)}


def _time(run: Callable[[], object], iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        out = run()
    if not hasattr(out, "grad_fn"):  # a JAX result (PyTorch's eager ops have finished)
        jax.block_until_ready(out)
    return (time.perf_counter() - start) / iters * 1e3


STEP_LOWERINGS: dict[str, Callable] = {
    "lax.conv_general_dilated (XLA)": lax.conv_general_dilated,
    "jaxfeed.models.im2col_conv (built in)": im2col_conv,
    "first layer: slices, custom VJP": slices_conv_general_dilated,
}


def step_cases() -> dict[str, Callable[[int], None]]:
    """The Trainer's CNN step (128 x 32 x 32 x 3, AdamW) with each of :data:`STEP_LOWERINGS` as
    the convolutions' ``conv_general_dilated`` (the same parameters)."""
    import optax  # the step comparison only
    from flax import nnx

    rng = np.random.default_rng(0)
    batch = {
        "image": jax.device_put(rng.random((BATCH, *SHAPE), dtype=np.float32)),
        "label": jax.device_put(rng.integers(0, 10, BATCH).astype(np.int32)),
    }
    out = {}
    for name, conv in STEP_LOWERINGS.items():
        model = CNN(10, input_shape=SHAPE, rngs=nnx.Rngs(0))
        model.conv1.conv_general_dilated = model.conv2.conv_general_dilated = conv
        trainer = Trainer(model, optax.adamw(1e-3, weight_decay=1e-4), verbose=0)
        out[name] = trainer_case(trainer, batch)
    return out


def measure(repeats: int = 5, iters: int = 10) -> list[dict]:
    """Print and return the table: ms per forward and per training pass, medians."""
    rng = np.random.default_rng(0)
    rows = []
    print(f"\nConvolution lowerings on CPU, ms (medians of {repeats}; {machine()})")
    print(f"{'layer':<26}{'lowering':<40}{'forward':>9}{'train':>9}{'max rel diff':>14}")
    for layer_name, layer in LAYERS.items():
        cases, diffs = _jax_cases(layer, rng)
        cases.update(_torch_cases(layer, rng))
        times: dict[str, dict[str, list[float]]] = {c: {"fwd": [], "train": []} for c in cases}
        for fwd, train in cases.values():  # compile and warm up
            _time(fwd, 2), _time(train, 2)
        for _ in range(repeats):
            for name, (fwd, train) in cases.items():
                times[name]["fwd"].append(_time(fwd, iters))
                times[name]["train"].append(_time(train, iters))
        for name in cases:
            row = {
                "layer": layer_name,
                "lowering": name,
                "forward_ms": statistics.median(times[name]["fwd"]),
                "train_ms": statistics.median(times[name]["train"]),
                "max_rel_diff": diffs.get(name),
            }
            rows.append(row)
            diff = "" if row["max_rel_diff"] is None else f"{row['max_rel_diff']:.1e}"
            print(
                f"{layer_name:<26}{name:<40}{row['forward_ms']:>9.2f}{row['train_ms']:>9.2f}"
                f"{diff:>14}",
                flush=True,
            )
    print(f"wrote {save_json('conv_lowering', {'repeats': repeats, 'iters': iters, 'rows': rows})}")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument(
        "--step",
        action="store_true",
        help="also time the Trainer's CNN step with the first convolution rewritten",
    )
    args = parser.parse_args(argv)
    rows = measure(args.repeats, args.iters)
    if args.step:
        steps = ms_per_step(step_cases(), 5, args.repeats)
        print(f"\nTrainer CNN step, ms (medians of {args.repeats} x 5 steps, taking turns)")
        for name, ms in steps.items():
            print(f"{name:<42}{ms:>9.1f}")
        save_json("conv_lowering", {"rows": rows, "trainer_step_ms": steps})


if __name__ == "__main__":
    main()
