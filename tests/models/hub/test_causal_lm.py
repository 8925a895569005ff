"""Hub causal language models (GPT-2, Llama 2/3, Mistral, Qwen2, Qwen3): logits equal to
``transformers``' PyTorch models on tiny random checkpoints, left-padded and packed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from models.hub.lm_checkpoints import (  # noqa: E402
    CONFIGS,
    VARIANTS,
    left_padded,
    legacy_config,
    load,
    save_checkpoint,
)

TOL = 1e-4


@nnx.jit
def forward(model, **kwargs):
    return model(**kwargs)


def reference(model, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """transformers' logits, positions counted over the real tokens (as its generate does)."""
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                    position_ids=torch.tensor(positions))  # fmt: skip
    return out.logits.numpy()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    torch_model = save_checkpoint(request.param, folder)
    return request.param, torch_model, load(folder)


def _rows(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 97, n).tolist() for n in lengths]


def test_logits_equal_transformers_with_left_padding(pair):
    kind, torch_model, model = pair
    ids, mask = left_padded(_rows([11, 4, 7]))
    expected = reference(torch_model, ids, mask)
    got = np.asarray(forward(model, input_ids=jnp.asarray(ids), attention_mask=jnp.asarray(mask)))
    real = mask.astype(bool)
    err = np.abs(got[real] - expected[real]).max()
    assert err < TOL, f"{kind}: max |diff| {err:.2e}"
    assert np.abs(expected[real]).max() > 0.1  # the comparison is not of near-zero logits


@pytest.mark.parametrize("kind", sorted(VARIANTS))
def test_logits_equal_transformers_with_theta_scaling_and_epsilon_from_the_config(kind, tmp_path):
    """A non-default rope_theta at config.json's top level (as transformers 4 saved it), linear
    or llama3 rotary scaling in rope_scaling, and a non-default norm epsilon: each is read."""
    torch_model = save_checkpoint(kind, tmp_path)
    config = legacy_config(tmp_path)
    assert "rope_parameters" not in config
    if not kind.startswith("gpt2"):
        assert config["rope_theta"] != 10000.0 and config["rms_norm_eps"] > 1e-3
        assert config["rope_scaling"].get("type") or config["rope_scaling"].get("rope_type")
    ids, mask = left_padded(_rows([11, 4, 7]))
    expected = reference(torch_model, ids, mask)
    got = np.asarray(forward(load(tmp_path), input_ids=jnp.asarray(ids),
                             attention_mask=jnp.asarray(mask)))  # fmt: skip
    real = mask.astype(bool)
    err = np.abs(got[real] - expected[real]).max()
    assert err < TOL, f"{kind}: max |diff| {err:.2e}"


def test_packed_rows_equal_each_segment_alone(pair):
    kind, torch_model, model = pair
    rows = _rows([6, 9, 3], seed=1)  # the 9-token segment is longer than Mistral's window
    ids = np.zeros((1, 20), np.int64)
    segments, positions = np.zeros_like(ids), np.zeros_like(ids)
    at = 0
    for s, r in enumerate(rows, 1):
        ids[0, at : at + len(r)], segments[0, at : at + len(r)] = r, s
        positions[0, at : at + len(r)] = np.arange(len(r))
        at += len(r)
    got = np.asarray(forward(model, input_ids=jnp.asarray(ids), segment_ids=jnp.asarray(segments),
                             positions=jnp.asarray(positions)))[0]  # fmt: skip
    at = 0
    for r in rows:
        alone = reference(torch_model, np.array([r]), np.ones((1, len(r)), np.int64))[0]
        err = np.abs(got[at : at + len(r)] - alone).max()
        assert err < TOL, f"{kind}: packed segment differs by {err:.2e}"
        at += len(r)


def test_config_errors_are_clear():
    from jaxfeed.models.hub import gpt2, llama

    base = {"model_type": "llama", "vocab_size": 50, "hidden_size": 30, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": 16}  # fmt: skip
    with pytest.raises(ValueError, match=r"hidden size 30 is not a multiple of .* heads 4"):
        llama.spec(base)
    with pytest.raises(
        ValueError, match=r"rope scaling of type 'yarn' .* supported: default, linear, llama3"
    ):
        llama.spec(
            {**base, "hidden_size": 32, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}}
        )
    with pytest.raises(
        ValueError, match="num_attention_heads 4 must be a multiple of num_key_value_heads 3"
    ):
        llama.spec({**base, "hidden_size": 32, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="llama3' needs 'low_freq_factor'"):
        llama.spec(
            {**base, "hidden_size": 32, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
        )
    with pytest.raises(ValueError, match="hidden size 30 is not a multiple"):
        gpt2.spec({"n_embd": 30, "n_head": 4, "n_layer": 1, "vocab_size": 5, "n_positions": 8})
    with pytest.raises(ValueError, match="tasks causal-lm, not 'masked-lm'"):
        llama.FAMILY.build({**base, "hidden_size": 32}, task="masked-lm", rngs=nnx.Rngs(0))


def test_every_weight_has_logical_axis_names(pair):
    _, _, model = pair
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        names = var.get_metadata().get("out_sharding")
        assert names is not None and len(names) == var[...].ndim, path


def test_save_pretrained_round_trip_loads_in_transformers(pair, tmp_path):
    import transformers

    from jaxfeed.models import save_pretrained

    kind, torch_model, model = pair
    out = save_pretrained(model, tmp_path / "saved")
    again = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids, mask = left_padded(_rows([5, 8], seed=2))
    real = mask.astype(bool)
    err = np.abs(reference(again, ids, mask)[real] - reference(torch_model, ids, mask)[real]).max()
    assert err < TOL, f"{kind}: {err:.2e}"
