"""``save_pretrained`` writes a Hub-format folder that ``transformers`` loads with the same
logits (after the weights changed, as after fine-tuning), with its labels and tokenizer files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hub_checkpoints import inputs, reference, save_checkpoint  # noqa: E402
from jaxfeed.models import from_pretrained, preprocessor, save_pretrained  # noqa: E402

AUTO = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "feature-extraction": "AutoModel",
}


def perturb(model, seed=0):
    """Change every parameter a little, as fine-tuning would."""
    params = nnx.state(model, nnx.Param)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    leaves = [
        x + 0.05 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=True)
    ]
    nnx.update(model, jax.tree.unflatten(tree, leaves))


@pytest.mark.parametrize(
    ("family", "task"),
    [
        ("bert", "sequence-classification"),
        ("roberta", "masked-lm"),
        ("distilbert", "token-classification"),
        ("bert", "feature-extraction"),
    ],
)
def test_transformers_loads_what_save_pretrained_wrote(tmp_path, family, task):
    save_checkpoint(tmp_path / "in", family, task)
    model = from_pretrained(tmp_path / "in")
    perturb(model)
    out = save_pretrained(model, tmp_path / "out")
    batch = inputs(family)
    ours = np.asarray(model(**{k: jnp.asarray(v) for k, v in batch.items()}))
    theirs = getattr(transformers, AUTO[task]).from_pretrained(out).eval()
    np.testing.assert_allclose(reference(theirs, batch), ours, atol=1e-4, rtol=0)
    # and back: the saved folder loads in jaxfeed with the same logits
    again = from_pretrained(out)
    np.testing.assert_allclose(
        np.asarray(again(**{k: jnp.asarray(v) for k, v in batch.items()})), ours, atol=1e-6
    )


def test_labels_and_tokenizer_files_are_written(tmp_path):
    save_checkpoint(tmp_path / "in", "distilbert", "feature-extraction")
    with pytest.warns(UserWarning, match="newly initialised"):
        model = from_pretrained(tmp_path / "in", task="sequence-classification", num_labels=2)
    out = save_pretrained(model, tmp_path / "out", id2label={0: "neg", 1: "pos"})
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["DistilBertForSequenceClassification"]
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"]["pos"] == 1
    names = {p.name for p in out.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "model.safetensors"} <= names
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out)
    assert theirs.config.id2label == {0: "neg", 1: "pos"}
    tokenizer = preprocessor(out)
    assert tokenizer.encode("w1 w2").ids[0] == 2  # [CLS], as the source checkpoint's


def test_save_pretrained_refuses_other_models(tmp_path):
    with pytest.raises(TypeError, match="made by from_pretrained"):
        save_pretrained(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), tmp_path)
