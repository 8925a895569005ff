"""``from_pretrained(mesh=, sharding=)``: every weight lands on the sharding the Trainer's plan
gives it (logical axis names included), the logits do not change, and the Trainer trains it."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hub_checkpoints import inputs, save_checkpoint
from jaxfeed import Trainer
from jaxfeed.models import from_pretrained
from jaxfeed.models.hub.weights import logical_axes, variables
from jaxfeed.train.sharding import ShardingPlan, make_mesh

WIDE = {"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "intermediate_size": 128}  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    save_checkpoint(folder, "bert", "sequence-classification", **WIDE)
    return folder


@pytest.mark.parametrize(
    ("axes", "sharding"),
    [
        ({"data": 8}, "fsdp"),
        ({"data": 4, "model": 2}, {"mlp": "model", "heads": "model", "fsdp": True}),
    ],
)
def test_weights_land_on_the_trainer_plan(checkpoint, axes, sharding):
    assert len(jax.devices()) == 8
    mesh = make_mesh(axes)
    model = from_pretrained(checkpoint, mesh=mesh, sharding=sharding)
    plan = ShardingPlan.parse(sharding)
    split = 0
    for path, var in variables(model).items():
        value = var.get_value()
        want = plan.spec(path, value.shape, logical_axes(var), mesh)
        assert value.sharding.spec == want, path
        split += want != jax.sharding.PartitionSpec()
    assert split >= 6  # embeddings, q/k/v/out, mlp kernels are split
    batch = {k: jnp.asarray(v) for k, v in inputs("bert").items()}
    whole = from_pretrained(checkpoint)
    np.testing.assert_allclose(np.asarray(model(**batch)), np.asarray(whole(**batch)), atol=1e-5)


def test_trainer_trains_an_fsdp_loaded_model(checkpoint):
    model = from_pretrained(checkpoint, sharding="fsdp")
    batch = inputs("bert", batch=8)
    batch = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
             "label": np.arange(8) % 3}  # fmt: skip
    trainer = Trainer(model, optax.adamw(1e-3), inputs={"input_ids": "input_ids",
                      "attention_mask": "attention_mask"}, sharding="fsdp", verbose=0)  # fmt: skip
    trainer.fit([batch] * 2, epochs=1)
    assert np.isfinite(trainer.history[-1]["train_loss"])
    kernel = model.encoder.embeddings.word.embedding.get_value()
    assert kernel.sharding.spec == jax.sharding.PartitionSpec("data")


def test_blockwise_reads_give_the_same_weights(checkpoint, monkeypatch):
    """Tensors read in blocks along the file's rows (memory map pages released after each) equal
    tensors read whole, transposed or not, sharded or not."""
    from jaxfeed.models.hub import weights

    whole = {
        k: np.asarray(v.get_value()) for k, v in variables(from_pretrained(checkpoint)).items()
    }
    monkeypatch.setattr(weights, "BLOCK_BYTES", 256)
    for sharding in (None, "fsdp"):
        model = from_pretrained(checkpoint, sharding=sharding)
        for path, var in variables(model).items():
            np.testing.assert_array_equal(np.asarray(var.get_value()), whole[path], err_msg=path)


def test_rule_naming_a_missing_mesh_axis(checkpoint):
    with pytest.raises(ValueError, match=r"rule for 'mlp' names mesh axis 'model', which the mesh"):
        from_pretrained(checkpoint, mesh=make_mesh({"data": 8}), sharding={"mlp": "model"})
