"""The Hub models' one attention function (``jaxfeed.models.attention``): on a CPU ``"auto"``
takes the plain XLA path, which equals a reference softmax attention for padding masks, packed
segments, causality, grouped heads and dropout; ``"flash"`` refuses clearly where the fused kernel
cannot run; the choice comes from ``use_attention`` or ``$JAXFEED_ATTENTION``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models import attention as att
from jaxfeed.models.dropout import Dropout
from jaxfeed.models.stacked import REMAT_POLICIES


def _qkv(b=2, t=6, h=4, kv=2, d=8, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    return q, k, v


def _reference(q, k, v, allowed):
    """Per (row, head, query) softmax over the allowed keys, in numpy float64."""
    q, k, v, allowed = (np.asarray(x, np.float64) for x in (q, k, v, allowed))
    b, _, h, d = q.shape
    group = h // k.shape[2]
    out = np.zeros_like(q)
    for i in range(b):
        for j in range(h):
            logits = q[i, :, j] @ k[i, :, j // group].T / np.sqrt(d)
            logits = np.where(allowed[i] > 0, logits, -np.inf)
            w = np.exp(logits - logits.max(-1, keepdims=True))
            out[i, :, j] = (w / w.sum(-1, keepdims=True)) @ v[i, :, j // group]
    return out


def test_cpu_auto_is_the_xla_path():
    q, k, v = _qkv()
    assert att.flash_refusal(q, k, v) == f"the backend is {jax.default_backend()}, not tpu"
    got = att.attention(q, k, v, implementation="auto")
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, np.ones((2, 6, 6))), atol=1e-5)


def test_padding_segments_and_causal_masks_equal_the_reference():
    q, k, v = _qkv()
    key_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    got = att.attention(q, k, v, key_mask=key_mask)
    allowed = np.broadcast_to(key_mask[:, None, :], (2, 6, 6))
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, allowed), atol=1e-5)
    segments = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]])
    got = att.attention(q, k, v, segment_ids=segments, causal=True)
    tril = np.tril(np.ones((6, 6)))
    allowed = (segments[:, :, None] == segments[:, None, :]) * tril
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, allowed), atol=1e-5)


def test_dropout_applies_to_the_weights():
    q, k, v = _qkv()
    zero = att.attention(q, k, v, dropout=lambda w: w * 0.0)
    assert float(jnp.abs(zero).max()) == 0.0


def test_flash_refuses_clearly_where_it_cannot_run():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match='attention="flash" cannot run here'):
        att.attention(q, k, v, implementation="flash")
    with pytest.raises(ValueError, match="one of auto, xla, flash"):
        att.attention(q, k, v, implementation="fast")


def test_choice_from_context_and_environment(monkeypatch):
    monkeypatch.setenv(att.ENV, "xla")
    assert att.current_implementation() == "xla"
    with att.use_attention("flash"):
        assert att.current_implementation() == "flash"
    assert att.current_implementation() == "xla"
    monkeypatch.setenv(att.ENV, "nonsense")
    with pytest.raises(ValueError, match="JAXFEED_ATTENTION"):
        att.current_implementation()


def test_flash_refusals_name_the_reason(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    q = jnp.ones((1, 256, 2, 128))
    assert att.flash_refusal(q, q, q) is None
    narrow = jnp.ones((1, 256, 2, 64))  # BERT-base's heads, short rows: XLA's path
    assert "head width 64 under 128 at 256 tokens" in att.flash_refusal(narrow, narrow, narrow)
    long = jnp.ones((1, 512, 2, 64))  # from 512 tokens the fused kernel measured faster
    assert att.flash_refusal(long, long, long) is None
    assert att.flash_refusal(narrow, narrow, narrow, implementation="flash") is None
    assert "multiples of 128" in att.flash_refusal(jnp.ones((1, 197, 2, 128)), q, q)
    assert "dropout" in att.flash_refusal(q, q, q, dropout=lambda w: w)
    assert "sliding window" in att.flash_refusal(q, q, q, mask=jnp.ones((1, 256, 256), bool))
    assert "head width" in att.flash_refusal(jnp.ones((1, 256, 2, 192)), q, q)
    monkeypatch.setattr(jax, "device_count", lambda: 4)
    assert "several devices" in att.flash_refusal(q, q, q)
    assert att.flash_refusal(q, q, q, implementation="flash") is None


@pytest.fixture
def interpreted_flash(monkeypatch):
    """The Pallas TPU flash kernel run by Pallas's interpreter (on a CPU)."""
    import functools

    from jax.experimental import pallas as pl
    from jax.experimental.pallas.ops.tpu import flash_attention as kernel

    monkeypatch.setattr(kernel.pl, "pallas_call", functools.partial(pl.pallas_call, interpret=True))


@pytest.mark.parametrize("case", ["padding", "causal-segments"])
def test_flash_path_equals_xla_path_interpreted(interpreted_flash, case):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 128, 2, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(1, 128, 1, 64)), jnp.float32) for _ in range(2))
    kwargs = (
        {"key_mask": jnp.asarray(np.arange(128)[None] < 100)}
        if case == "padding"
        else {"segment_ids": jnp.asarray(np.repeat([[1, 2]], 64, axis=1)), "causal": True}
    )

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, **kwargs) ** 2)

    def xla(q, k, v, **kw):
        return att.attention(q, k, v, implementation="xla", **kw)

    for a, b in ((att.flash_attention(q, k, v, **kwargs), xla(q, k, v, **kwargs)),
                 (jax.grad(loss, (1, 2, 3))(att.flash_attention, q, k, v),
                  jax.grad(loss, (1, 2, 3))(xla, q, k, v))):  # fmt: skip
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-4)


def test_flash_pairs_each_query_head_with_its_groups_kv_head_interpreted(interpreted_flash):
    """Grouped-query attention with 2 key/value heads and 4 query heads: query heads 0, 1 read
    key/value head 0 and heads 2, 3 read head 1, as the XLA path and transformers group them
    (with one key/value head every layout agrees, so the test above cannot tell)."""
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.normal(size=(1, 128, 4, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(1, 128, 2, 8)), jnp.float32) for _ in range(2))
    key_mask = jnp.asarray(np.arange(128)[None] < 100)
    got = np.asarray(att.flash_attention(q, k, v, key_mask=key_mask))
    allowed = np.broadcast_to(np.asarray(key_mask)[:, None, :], (1, 128, 128))
    np.testing.assert_allclose(got, _reference(q, k, v, allowed), rtol=1e-4, atol=1e-4)
    xla = att.attention(q, k, v, key_mask=key_mask, implementation="xla")
    np.testing.assert_allclose(got, np.asarray(xla), rtol=1e-4, atol=1e-4)


def _plain_autodiff(q, k, v, allowed, keep):
    """The attention of the XLA path written plainly (``where`` on the logits, softmax, dropout
    multipliers), differentiated by JAX itself."""
    b, t, h, d = q.shape
    kv = k.shape[2]
    logits = jnp.einsum("btkgd,bskd->bkgts", q.reshape(b, t, kv, h // kv, d), k) / np.sqrt(d)
    logits = jnp.where(allowed[:, None, None], logits, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(logits, axis=-1) * keep
    return jnp.einsum("bkgts,bskd->btkgd", weights, v).reshape(b, t, h, d)


@pytest.mark.parametrize("dropout", [False, True])
def test_the_written_gradient_equals_autodiff_with_masks_and_dropout(dropout):
    """:func:`attend`'s backward pass (written out to keep only the weights) gives JAX's own
    gradients, also for a query that sees no key (its output is the values' mean, and no
    gradient reaches the logits) and under dropout."""
    q, k, v = _qkv()
    allowed = jnp.asarray(np.random.default_rng(3).random((2, 6, 6)) > 0.3).at[1, 2].set(False)
    keep = jnp.ones(())
    drop = None
    if dropout:
        keep = jnp.asarray(np.random.default_rng(4).random((2, 2, 2, 6, 6)) > 0.25) / 0.75
        drop = lambda w: w * keep.astype(w.dtype)  # noqa: E731 (the same multipliers)

    def loss(fn, q, k, v):
        return jnp.sum(jnp.sin(fn(q, k, v)))

    def ours(q, k, v):
        return att.xla_attention(q, k, v, allowed, drop)

    def plain(q, k, v):
        return _plain_autodiff(q, k, v, allowed, keep)

    np.testing.assert_allclose(np.asarray(ours(q, k, v)), np.asarray(plain(q, k, v)), atol=1e-6)
    for a, b in zip(jax.grad(loss, (1, 2, 3))(ours, q, k, v),
                    jax.grad(loss, (1, 2, 3))(plain, q, k, v), strict=True):  # fmt: skip
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_the_backward_pass_keeps_the_weights_in_the_values_dtype_and_nothing_else_that_size(
    capsys,
):
    """In bfloat16, what the backward pass keeps of a layer's attention (all of it kept, no
    remat): one copy of the weights in bfloat16 named for remat policies, the mask once per row
    (not per head); never the float32 logits or softmax (plain autodiff kept four arrays of the
    weights' size, 0.9 GB a BERT-base layer at 32x512)."""
    from jax.ad_checkpoint import print_saved_residuals

    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv())
    allowed = jnp.asarray(np.random.default_rng(3).random((2, 6, 6)) > 0.3)
    print_saved_residuals(lambda q, k, v: jnp.sum(att.xla_attention(q, k, v, allowed)), q, k, v)
    saved = capsys.readouterr().out.splitlines()
    heads = [line for line in saved if "[2,2,2,6,6]" in line]  # (B, Hkv, G, T, S)
    assert heads == [next(line for line in heads if "bf16" in line)], saved
    assert f"named '{att.WEIGHTS}'" in heads[0], saved
    assert any(line.startswith("bool[2,1,1,6,6]") for line in saved), saved
    assert not [line for line in saved if line.startswith("f32[") and "f32[]" not in line], saved


@pytest.mark.parametrize("module", ["jaxfeed", "nnx"])
def test_attention_dropout_saves_a_boolean_keep_mask_and_equals_its_multipliers(module, capsys):
    """A model's attention dropout (``active_dropout``: jaxfeed's ``Dropout`` or flax's own)
    reaches :func:`attend` as a boolean keep mask and its scale: the backward pass keeps it in
    one byte an element, named :data:`KEEP` (the scaled bfloat16 multipliers took two), and the
    outputs and gradients are those of the weights times the module's own multipliers."""
    from jax.ad_checkpoint import print_saved_residuals

    from jaxfeed.models.dropout import Dropout

    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv())
    allowed = jnp.asarray(np.random.default_rng(3).random((2, 6, 6)) > 0.3)
    cls = Dropout if module == "jaxfeed" else nnx.Dropout
    drop = cls(0.25, deterministic=False)
    key = jax.random.key(5)

    def ours(q, k, v):
        return att.xla_attention(q, k, v, allowed, att.active_dropout(drop, nnx.Rngs(dropout=key)))

    print_saved_residuals(lambda q, k, v: jnp.sum(ours(q, k, v)), q, k, v)
    saved = capsys.readouterr().out.splitlines()
    heads = [line for line in saved if "[2,2,2,6,6]" in line]  # (B, Hkv, G, T, S)
    assert sorted(line.split("[")[0] for line in heads) == ["bf16", "bool"], saved
    assert f"named '{att.KEEP}'" in next(line for line in heads if line.startswith("bool")), saved
    keep = drop(jnp.ones((2, 2, 2, 6, 6)), rngs=nnx.Rngs(dropout=key))  # the same draw
    assert 0 < float((keep == 0).mean()) < 0.5

    def loss(fn, q, k, v):
        return jnp.sum(jnp.sin(fn(q, k, v).astype(jnp.float32)))

    def plain(q, k, v):
        out = _plain_autodiff(*(x.astype(jnp.float32) for x in (q, k, v)), allowed, keep)
        return out.astype(jnp.bfloat16)

    np.testing.assert_allclose(np.asarray(ours(q, k, v), np.float32),
                               np.asarray(plain(q, k, v), np.float32), atol=3e-2)  # fmt: skip
    for a, b in zip(jax.grad(loss, (1, 2, 3))(ours, q, k, v),
                    jax.grad(loss, (1, 2, 3))(plain, q, k, v), strict=True):  # fmt: skip
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   rtol=5e-2, atol=5e-2)  # fmt: skip


def test_a_dropout_subclass_with_its_own_scaling_keeps_its_multipliers():
    """A subclass of ``nnx.Dropout`` whose call scales kept weights its own way (here: not at
    all) is applied as its call says, not as ``nnx.Dropout``'s ``1 / (1 - rate)``."""

    class Unscaled(nnx.Dropout):
        def __call__(self, inputs, *, deterministic=None, rngs=None):
            return jnp.where(super().__call__(inputs, rngs=rngs) != 0, inputs, 0)

    q, k, v = _qkv()
    drop = Unscaled(0.5, deterministic=False)
    key = jax.random.key(2)
    out = att.xla_attention(q, k, v, None, att.active_dropout(drop, nnx.Rngs(dropout=key)))
    keep = drop(jnp.ones((2, 2, 2, 6, 6)), rngs=nnx.Rngs(dropout=key))
    assert set(np.unique(np.asarray(keep)).tolist()) == {0.0, 1.0}
    allowed = jnp.ones((2, 6, 6), bool)
    np.testing.assert_allclose(np.asarray(out), np.asarray(_plain_autodiff(q, k, v, allowed, keep)),
                               atol=1e-6)  # fmt: skip


@pytest.mark.parametrize(("policy", "draws"), [("attention", 1), ("dots", 2)])
def test_remat_attention_keeps_the_keep_mask_instead_of_drawing_it_again(policy, draws):
    """Under ``remat="attention"`` the backward pass reuses the saved keep mask: one draw of
    random bits a step (under ``"dots"``, which keeps no names, the backward pass draws again)."""
    from jaxfeed.models.dropout import Dropout
    from jaxfeed.models.stacked import REMAT_POLICIES

    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv())

    def f(q, k, v):
        drop = att.active_dropout(Dropout(0.25, deterministic=False), jax.random.key(1))
        return jnp.sum(att.xla_attention(q, k, v, None, drop).astype(jnp.float32))

    step = jax.grad(jax.checkpoint(f, policy=REMAT_POLICIES[policy]), (0, 1, 2))
    assert str(jax.make_jaxpr(step)(q, k, v)).count("random_bits") == draws


def test_flash_blocks_longer_than_the_kernel_default_equal_the_xla_path_interpreted(
    interpreted_flash, monkeypatch
):
    """With ``FLASH_BLOCK = 512``, 256 queries and keys run in blocks of 256
    (:func:`flash_blocks`), not the kernel's default 128: outputs and gradients as the XLA
    path's."""
    monkeypatch.setattr(att, "FLASH_BLOCK", 512)
    rng = np.random.default_rng(2)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 256, 1, 64)), jnp.float32) for _ in range(3))
    key_mask = jnp.asarray(np.arange(256)[None] < 200)
    from jax.experimental.pallas.ops.tpu import flash_attention as kernel

    assert att.flash_blocks(kernel.BlockSizes, 256, 256).block_k == 256

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, key_mask=key_mask) ** 2)

    def xla(q, k, v, **kw):
        return att.attention(q, k, v, implementation="xla", **kw)

    np.testing.assert_allclose(np.asarray(att.flash_attention(q, k, v, key_mask=key_mask)),
                               np.asarray(xla(q, k, v, key_mask=key_mask)), atol=1e-4)  # fmt: skip
    for a, b in zip(jax.grad(loss, (1, 2, 3))(att.flash_attention, q, k, v),
                    jax.grad(loss, (1, 2, 3))(xla, q, k, v), strict=True):  # fmt: skip
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


def _logits_dtype(q, k, v):
    """The dtype of the logits the XLA path hands to :func:`attend` (its custom-gradient call)."""
    jaxpr = jax.make_jaxpr(lambda q, k, v: att.xla_attention(q, k, v, None))(q, k, v)
    calls = [e for e in jaxpr.eqns if "custom_vjp" in e.primitive.name]
    assert len(calls) == 1, jaxpr
    return calls[0].invars[0].aval.dtype


def test_the_logits_are_written_in_the_queries_dtype_unless_float32_is_asked(monkeypatch):
    """bfloat16 queries give bfloat16 logits (the softmax still reads them into float32): on a
    chip every pass over the ``(B, H, T, S)`` logits moves half the bytes."""
    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv())
    assert _logits_dtype(q, k, v) == jnp.bfloat16
    monkeypatch.setattr(att, "LOGITS_IN_FLOAT32", True)
    assert _logits_dtype(q, k, v) == jnp.float32


def test_bfloat16_attention_and_its_gradient_follow_float32():
    """In bfloat16 (logits, weights and values) the output and gradients stay within bfloat16's
    rounding of the float32 computation; the logits' gradient comes back in their dtype."""
    q, k, v = _qkv(seed=3)
    mask = jnp.asarray(np.tril(np.ones((6, 6), bool)))[None].repeat(2, 0)

    def loss(q, k, v):
        return jnp.sum(att.xla_attention(q, k, v, mask).astype(jnp.float32) ** 2)

    low = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    np.testing.assert_allclose(np.asarray(att.xla_attention(*low, mask), np.float32),
                               np.asarray(att.xla_attention(q, k, v, mask)), atol=0.05)  # fmt: skip
    for a, b in zip(jax.grad(loss, (0, 1, 2))(*low), jax.grad(loss, (0, 1, 2))(q, k, v),
                    strict=True):  # fmt: skip
        assert a.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b), rtol=0.05, atol=0.1)


@pytest.mark.parametrize(
    "case", ["padding", "causal-segments", "grouped", "padded-length", "padded-causal-segments"]
)
def test_splash_path_equals_xla_path_interpreted(case):
    """Pallas's splash kernel (``FUSED_KERNEL = "splash"``), run by Pallas's interpreter: outputs
    and gradients as the XLA path's for padding, causal packed segments and grouped key/value
    heads (query heads 0, 1 read key/value head 0; 2, 3 read head 1), and for lengths that are
    not multiples of 128 (ViT's 197 patches: padded up to 256 inside, the padded keys masked,
    the padded queries dropped)."""
    rng = np.random.default_rng(4)
    heads, kv_heads = (4, 2) if case == "grouped" else (2, 1)
    t = 197 if case.startswith("padded") else 128
    q = jnp.asarray(rng.normal(size=(1, t, heads, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(1, t, kv_heads, 64)), jnp.float32) for _ in range(2))
    kwargs = {
        "causal-segments": {"segment_ids": jnp.asarray(np.repeat([[1, 2]], 64, axis=1)),
                            "causal": True},
        "padded-causal-segments": {"segment_ids": jnp.asarray([[1] * 120 + [2] * 77]),
                                   "causal": True},
        "padded-length": {},  # every key visible, as ViT's
    }.get(case, {"key_mask": jnp.asarray(np.arange(128)[None] < 100)})  # fmt: skip

    def splash(q, k, v, **kw):
        return att.splash_attention(q, k, v, interpret=True, **kw)

    def xla(q, k, v, **kw):
        return att.attention(q, k, v, implementation="xla", **kw)

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, **kwargs) ** 2)

    out = splash(q, k, v, **kwargs)
    assert out.shape == q.shape
    np.testing.assert_allclose(np.asarray(out), np.asarray(xla(q, k, v, **kwargs)), rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    for a, b in zip(jax.grad(loss, (1, 2, 3))(splash, q, k, v),
                    jax.grad(loss, (1, 2, 3))(xla, q, k, v), strict=True):  # fmt: skip
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dropout", [None, 0.1], ids=["splash", "fused-dropout"])
def test_a_checkpointed_layer_keeps_the_fused_kernels_residuals_under_remat_attention(dropout):
    """Both splash kernels (JAX's; jaxfeed's fork, with dropout) name their forward residuals:
    under ``remat="attention"`` a checkpointed layer's backward pass reads them and its compiled
    step runs the forward kernel once (unnamed, twice: once more inside the recomputed layer).
    Counted in the compiled program: Pallas's interpreter makes each kernel a while loop."""
    q = jnp.ones((1, 128, 2, 64))

    def layer(q):
        drop = None
        if dropout is not None:
            drop = att.WeightDropout(Dropout(dropout, deterministic=False), nnx.Rngs(dropout=0))
        return jnp.sum(att.splash_attention(q, q, q, dropout=drop, interpret=True))

    def forward_kernels(policy):
        step = jax.jit(jax.value_and_grad(jax.checkpoint(layer, policy=policy)))
        lines = step.lower(q).compile().as_text().splitlines()
        return sum(" while(" in x and "_fwd" in x for x in lines)  # the kernels' names: *_fwd*

    assert forward_kernels(REMAT_POLICIES["attention"]) == 1  # unnamed (the code before): 2


def test_the_fused_kernel_setting_picks_splash_where_the_fused_path_runs(monkeypatch):
    """Where the fused path runs (a TPU), ``FUSED_KERNEL`` names the kernel; here the refusal is
    lifted and the kernels are spies."""
    calls = []
    monkeypatch.setattr(att, "flash_refusal", lambda *a, **kw: None)
    monkeypatch.setattr(att, "flash_attention", lambda *a, **kw: calls.append("flash") or a[0])
    monkeypatch.setattr(att, "splash_attention", lambda *a, **kw: calls.append("splash") or a[0])
    q = jnp.ones((1, 128, 2, 64))
    att.attention(q, q, q)  # the default: splash
    monkeypatch.setattr(att, "FUSED_KERNEL", "flash")
    att.attention(q, q, q)
    assert calls == ["splash", "flash"]
