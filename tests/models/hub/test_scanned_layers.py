"""The Hub models' layers are stored stacked and run as one ``lax.scan`` (``jaxfeed.models.stacked``):
outputs and gradients equal the layer-by-layer loop, the parameters are ``[layers, ...]`` arrays,
the compiled step neither stacks weights nor unstacks gradients, and the traced program holds one
layer's code whatever the depth."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import Trainer
from jaxfeed.models.hub import bert, decoder, vit
from jaxfeed.models.stacked import run_layers, scan_unroll, unstack

BERT = {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2,
        "intermediate_size": 32, "max_position_embeddings": 32, "hidden_dropout_prob": 0.2,
        "attention_probs_dropout_prob": 0.2}  # fmt: skip
VIT = {"model_type": "vit", "hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2,
       "intermediate_size": 32, "image_size": 8, "patch_size": 4, "hidden_dropout_prob": 0.2}  # fmt: skip
LLAMA = {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 32, "max_position_embeddings": 64}  # fmt: skip


def _made(build, abstract: bool):
    """``build()``'s model, or its abstract twin (weights as shapes and dtypes, none drawn: each
    new weight shape's initializer otherwise compiles, 0.1-0.2 CPU s apiece) when only traced."""
    return nnx.eval_shape(build) if abstract else build()


def _bert(depth: int = 3, abstract: bool = False):
    config = {**BERT, "num_hidden_layers": depth}
    model = _made(lambda: bert.build(config, task="sequence-classification", num_labels=3,
                                     dtype=None, param_dtype=jnp.float32, rngs=nnx.Rngs(0)),
                  abstract)  # fmt: skip
    ids = jnp.asarray(np.random.default_rng(0).integers(1, 50, (2, 7)))
    mask = jnp.asarray([[1] * 7, [1] * 4 + [0] * 3])

    def call(m, rngs=None):
        return m(ids, mask, rngs=rngs)

    return model, model.encoder, call


def _vit(depth: int = 3, abstract: bool = False):
    config = {**VIT, "num_hidden_layers": depth}
    model = _made(lambda: vit.FAMILY.build(config, task="image-classification", num_labels=3,
                                           dtype=None, param_dtype=jnp.float32,
                                           rngs=nnx.Rngs(0)), abstract)  # fmt: skip
    pixels = jnp.asarray(np.random.default_rng(1).normal(size=(2, 3, 8, 8)), jnp.float32)

    def call(m, rngs=None):
        return m(pixel_values=pixels, rngs=rngs)

    return model, model.vit.encoder, call


def _llama(depth: int = 3, abstract: bool = False):
    spec = decoder.llama_like_spec({**LLAMA, "num_hidden_layers": depth})
    model = _made(lambda: decoder.CausalLM(spec, rngs=nnx.Rngs(0)), abstract)
    ids = jnp.asarray(np.random.default_rng(2).integers(1, 50, (2, 9)))
    mask = jnp.asarray([[1] * 9, [0] * 3 + [1] * 6])

    def call(m, rngs=None):
        return m(input_ids=ids, attention_mask=mask)

    return model, model, call


MODELS = {"bert": _bert, "vit": _vit, "llama": _llama}


# XLA's CPU backend at optimisation level 0 (LLVM's), not the suite's 1 (conftest.py), for the
# programs compiled here: they are checked for values to tolerances and for their optimized HLO,
# which is the same text at both levels (the HLO passes do not depend on it; 12-layer train step
# compared), and level 0 compiles them 2.5-3x faster (12 scan/loop programs: 23 CPU s, not 59).
# Their values at level 0 are those at level 1 to 5e-6 (every case below, compared once), far
# inside the tolerances. (The suite cannot use level 0: a CNN's loss turned non-finite there.)
_LEVEL_0 = {"xla_backend_optimization_level": 0}


def _compiled(fn, *args):
    """``fn`` compiled for ``args`` at XLA CPU optimisation level 0 (see ``_LEVEL_0``)."""
    return jax.jit(fn).lower(*args).compile(compiler_options=_LEVEL_0)


def _loss_and_grads(model, call, rngs_seed):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
        m = nnx.merge(graphdef, p, rest, copy=True)
        rngs = None if rngs_seed is None else nnx.Rngs(dropout=jax.random.key(rngs_seed))
        out = call(m, rngs)
        return jnp.sum(out**2), out

    return _compiled(jax.value_and_grad(loss, has_aux=True), params)(params)


_LOOPS: dict = {}


def _loop(name):
    """The plain layer-by-layer loop's loss, output and gradients (no recomputation: it changes
    no value) of a 3-layer model: computed once, shared by the cases of that model (4 llama
    cases; a 3-layer loop compiles in 1-3 CPU s). Host arrays, never changed."""
    if name not in _LOOPS:
        model, stack, call = MODELS[name](3)
        if name == "llama":
            model.eval()
        stack.remat, stack.scan = False, False
        (loss, out), grads = _loss_and_grads(model, call, _SEEDS[name])
        _LOOPS[name] = (float(loss), np.asarray(out), jax.tree.map(np.asarray, grads))
    return _LOOPS[name]


_SEEDS = {"bert": 3, "vit": 3, "llama": None}  # encoders train with dropout: the same keys


@pytest.mark.parametrize(
    ("name", "remat", "scan"),
    [("bert", False, True), ("vit", False, True), ("llama", False, True), ("llama", True, True),
     ("bert", "dots", 2), ("vit", "full", 2), ("llama", "dots", True),
     ("bert", "attention", True), ("llama", "attention", 2)],
)  # fmt: skip
def test_scan_equals_loop_outputs_and_gradients(name, remat, scan):
    """Three layers scanned (one layer per iteration, or 2 layers unrolled with one left over),
    with or without recomputation (all of a layer, all but its weight matmuls, all but those and
    the attention weights): as the plain loop (one loop program per model, not one per depth)."""
    model, stack, call = MODELS[name](3)
    seed = _SEEDS[name]
    if seed is None:
        model.eval()
    stack.remat = remat
    stack.scan = scan
    (loss_s, out_s), grads_s = _loss_and_grads(model, call, seed)
    loss_l, out_l, grads_l = _loop(name)
    np.testing.assert_allclose(np.asarray(out_s), np.asarray(out_l), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(loss_s), float(loss_l), rtol=1e-5)
    assert jax.tree.structure(grads_s) == jax.tree.structure(grads_l)
    for a, b in zip(jax.tree.leaves(grads_s), jax.tree.leaves(grads_l), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_traced_program_does_not_grow_with_depth(name):
    def dots(depth):
        model, stack, call = MODELS[name](depth, abstract=True)  # traced, never run
        stack.scan = True  # as the default ("auto") does, on every backend
        model.eval()
        graphdef, state = nnx.split(model)
        jaxpr = jax.make_jaxpr(lambda s: call(nnx.merge(graphdef, s)))(state)
        return str(jaxpr).count("dot_general")

    assert dots(2) == dots(5)


def test_parameter_tree_is_stacked_with_a_layers_axis():
    model, _, _ = _bert()
    kernel = model.encoder.layers.layer.attention.query.kernel
    assert kernel.get_value().shape == (3, 16, 16)
    assert kernel.get_metadata()["out_sharding"] == ("layers", "embed", "heads")
    names = {".".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert not any(".layers.0." in n for n in names)
    single = model.encoder.layers[2].attention.query.kernel[...]  # one layer, as a copy
    np.testing.assert_array_equal(np.asarray(single), np.asarray(kernel[...][2]))


def _train_step_hlo(depth: int, *, old_style: bool) -> str:
    """The optimized HLO of a BERT-base-shaped train step (tiny widths, ``depth`` layers,
    scanned); ``old_style`` holds the layers as a list, stacked inside the step as before. The
    model and optimizer are abstract (shapes and dtypes, ``nnx.eval_shape``): the program is
    compiled for those, and no weight is ever drawn (a 12-layer model's 2 CPU s)."""

    def build():
        config = {**BERT, "num_hidden_layers": depth}
        model = bert.build(config, task="sequence-classification", num_labels=2, dtype=None,
                           param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip
        model.encoder.scan = True
        if old_style:
            model.encoder.layers = unstack(model.encoder.layers)
        return model, nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    graphdef, state = nnx.split(nnx.eval_shape(build))
    ids = jnp.ones((2, 8), jnp.int32)

    def step(state):
        model, optimizer = nnx.merge(graphdef, state)
        key = jax.random.key(0)
        _, grads = nnx.value_and_grad(lambda m: m(ids, ids, rngs=nnx.Rngs(dropout=key)).sum())(
            model
        )
        optimizer.update(model, grads)
        return nnx.state((model, optimizer))

    return _compiled(step, state).as_text()


def _stacking_ops(hlo: str, depth: int) -> tuple[int, int]:
    """Ops that stack per-layer weights into ``[depth, ...]`` (concatenates) and that cut a
    stack into per-layer pieces (static slices of one layer), of weights' dtypes (random keys'
    words are ``u32``)."""
    weights = r"(?:f32|bf16|f16|s8)"
    stacks = re.findall(rf"= {weights}\[{depth},[^\]]*\]\S* concatenate\(", hlo)
    pieces = re.findall(rf"= {weights}\[1,[^\]]*\]\S* slice\(", hlo)
    return len(stacks), len(pieces)


def test_train_step_never_stacks_weights_nor_unstacks_gradients():
    """The compiled 12-layer step holds no concatenate into [12, ...] and no per-layer slice: the
    scan slices the stored stacks inside its loop. The layers held as a list (the layout before)
    give both, which shows what the count detects."""
    assert _stacking_ops(_train_step_hlo(12, old_style=False), 12) == (0, 0)
    stacked, pieces = _stacking_ops(_train_step_hlo(12, old_style=True), 12)
    assert stacked >= 12 and pieces >= 12 * 12


def test_layers_with_different_graphs_run_in_a_loop():
    layers = [
        nnx.Linear(2, 2, rngs=nnx.Rngs(0)),
        nnx.Linear(2, 2, use_bias=False, rngs=nnx.Rngs(1)),
    ]
    x = jnp.ones((1, 2))
    got = run_layers(layers, x, lambda layer, h, r: layer(h))
    np.testing.assert_allclose(np.asarray(got), np.asarray(layers[1](layers[0](x))), rtol=1e-6)


def test_dropout_keys_differ_per_layer_and_repeat_per_seed():
    layers = [nnx.Dropout(0.5, deterministic=False) for _ in range(3)]
    seen = []

    def call(layer, h, r):
        seen.append(r)
        return layer(h, rngs=r)

    x = jnp.ones((64,))
    a = run_layers(layers, x, call, rngs=nnx.Rngs(dropout=jax.random.key(5)), scan=False)
    b = run_layers(layers, x, call, rngs=nnx.Rngs(dropout=jax.random.key(5)), scan=False)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(jnp.mean(a == 0)) > 0.5  # three independent masks, not one repeated


def test_unknown_remat_and_scan_settings_are_refused_by_name():
    model, _, _ = _llama(2)
    with pytest.raises(ValueError, match=r"remat='fast'.*dots.*full"):
        Trainer(model, optax.sgd(0.1), inputs={"input_ids": "input_ids"}, loss="next_token",
                remat="fast")  # fmt: skip
    layers = [nnx.Linear(2, 2, rngs=nnx.Rngs(i)) for i in range(2)]
    with pytest.raises(ValueError, match=r"scan=-1"):
        run_layers(layers, jnp.ones((1, 2)), lambda layer, h, r: layer(h), scan=-1)


class _Stack(nnx.Module):
    """Three linear layers (the second without a bias when ``mixed``: graphs that differ)."""

    def __init__(self, mixed: bool = False):
        self.layers = nnx.List([nnx.Linear(3, 3, use_bias=not (mixed and i == 1),
                                           rngs=nnx.Rngs(i)) for i in range(3)])  # fmt: skip


def _stack_program(stack, *, scan, remat=False, grad=False):
    """The jaxpr of running ``stack``'s layers (or of its gradient), and the function."""
    graphdef, state = nnx.split(stack)

    def f(s, x):
        m = nnx.merge(graphdef, s)
        return jnp.sum(run_layers(m.layers, x, lambda layer, h, r: layer(h), scan=scan,
                                  remat=remat) ** 2)  # fmt: skip

    fn = jax.grad(f) if grad else f
    return jax.make_jaxpr(fn)(state, jnp.ones((2, 3))).jaxpr, fn, state


def _primitives(jaxpr) -> list[str]:
    return [e.primitive.name for e in jaxpr.eqns]


REMAT_PRIMITIVES = ("checkpoint", "remat", "remat2")  # jax.checkpoint's name across versions


def test_auto_scans_on_every_backend(monkeypatch):
    """``scan="auto"`` (the Hub models' default) is one scan on a CPU and on an accelerator: a
    TPU's compile of the loop took minutes, and with the weights stored stacked the scan copies
    nothing on a CPU either (issue 62)."""
    assert scan_unroll("auto") == 1  # the tests run on a CPU
    cpu = _primitives(_stack_program(_Stack(), scan="auto")[0])
    assert cpu.count("scan") == 1 and "dot_general" not in cpu, cpu  # inside the scan's body
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert scan_unroll("auto") == 1
    tpu = _primitives(_stack_program(_Stack(), scan="auto")[0])
    assert tpu.count("scan") == 1 and "dot_general" not in tpu, tpu


@pytest.mark.parametrize(("scan", "mixed"), [(False, False), ("auto", True), (True, True)])
def test_remat_recomputes_each_layer_run_as_a_loop(scan, mixed):
    """Layers run one after the other (``scan=False``, graphs that differ under ``scan=True`` or
    ``"auto"``) are each wrapped in ``jax.checkpoint`` with ``remat``, with the
    gradients of the plain loop."""
    for remat, count in ((False, 0), (True, 3), ("dots", 3)):
        jaxpr, fn, state = _stack_program(_Stack(mixed), scan=scan, remat=remat, grad=True)
        names = _primitives(jaxpr)
        assert sum(names.count(p) for p in REMAT_PRIMITIVES) == count, (remat, names)
        assert "scan" not in names
        grads = fn(state, jnp.ones((2, 3)))
        if remat is False:
            plain = grads
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(plain), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
