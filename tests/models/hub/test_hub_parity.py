"""BERT, RoBERTa and DistilBERT from tiny random ``transformers`` checkpoints: logits equal to
the PyTorch model's to 1e-4 on padded inputs, for every head; heads the checkpoint lacks are
initialised as ``transformers`` does and reported once."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hub_checkpoints import CONFIGS, HEADS, inputs, reference, save_checkpoint
from jaxfeed.models import from_pretrained

CASES = [(family, task) for family in CONFIGS for task in HEADS]


@pytest.mark.parametrize(("family", "task"), CASES)
def test_logits_equal_transformers(tmp_path, family, task):
    torch_model = save_checkpoint(tmp_path, family, task)
    batch = inputs(family)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every tensor is in the checkpoint: nothing to report
        model = from_pretrained(tmp_path)
    assert model.hub_task == task  # from config.json's architectures
    got = np.asarray(model(**{k: jnp.asarray(v) for k, v in batch.items()}))
    want = reference(torch_model, batch)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_padding_does_not_change_the_real_positions(tmp_path):
    torch_model = save_checkpoint(tmp_path, "roberta", "token-classification")
    batch = inputs("roberta", batch=2, length=6)
    model = from_pretrained(tmp_path)
    short = {k: v[1:, :2] for k, v in batch.items()}
    full = np.asarray(model(**{k: jnp.asarray(v) for k, v in batch.items()}))
    alone = np.asarray(model(**{k: jnp.asarray(v) for k, v in short.items()}))
    np.testing.assert_allclose(full[1, :2], alone[0], atol=1e-5)
    np.testing.assert_allclose(alone, reference(torch_model, short), atol=1e-4)


def test_missing_head_is_initialised_as_transformers_and_reported_once(tmp_path):
    save_checkpoint(tmp_path, "bert", "feature-extraction", initializer_range=0.5)
    with pytest.warns(UserWarning) as caught:
        model = from_pretrained(tmp_path, task="sequence-classification", num_labels=4)
    messages = [str(w.message) for w in caught if "newly initialised" in str(w.message)]
    assert len(messages) == 1
    assert "classifier.weight" in messages[0] and "classifier.bias" in messages[0]
    assert "pooler" not in messages[0]  # BertModel's pooler is in the checkpoint
    kernel, bias = np.asarray(model.classifier.kernel[...]), np.asarray(model.classifier.bias[...])
    assert kernel.shape == (16, 4) and not bias.any()
    assert 0.3 < kernel.std() < 0.7  # normal(0, initializer_range)
    assert model.hub_config["num_labels"] == 4 and len(model.hub_config["id2label"]) == 4
    out = model(input_ids=jnp.array([[2, 7, 9, 3]]))
    assert out.shape == (1, 4) and np.isfinite(np.asarray(out)).all()


def test_bf16_parameters_and_compute(tmp_path):
    torch_model = save_checkpoint(tmp_path, "distilbert", "sequence-classification")
    batch = inputs("distilbert")
    model = from_pretrained(tmp_path, dtype="bfloat16")
    assert model.classifier.kernel[...].dtype == jnp.bfloat16
    got = np.asarray(model(**{k: jnp.asarray(v) for k, v in batch.items()}))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, reference(torch_model, batch), atol=5e-2)


@pytest.mark.parametrize(
    ("family", "task", "overrides"),
    [
        ("bert", "masked-lm", {"tie_word_embeddings": False, "hidden_act": "gelu_new"}),
        ("roberta", "masked-lm", {"tie_word_embeddings": False}),
        (
            "distilbert",
            "sequence-classification",
            {"sinusoidal_pos_embds": True, "activation": "relu"},
        ),
    ],
)
def test_config_variants(tmp_path, family, task, overrides):
    torch_model = save_checkpoint(tmp_path, family, task, **overrides)
    batch = inputs(family)
    model = from_pretrained(tmp_path)
    got = np.asarray(model(**{k: jnp.asarray(v) for k, v in batch.items()}))
    np.testing.assert_allclose(got, reference(torch_model, batch), atol=1e-4, rtol=0)
