"""Behaviours of the newest code that an independent review could change without a test failing.

Each test pins one behaviour at the level a user sees where possible; each was checked to fail
with the behaviour broken by hand (the change named in its docstring), then the change reverted.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed import DataLoader, Dataset, Padding, export, load_exported
from jaxfeed.checkpoint import CheckpointManager
from jaxfeed.data.ragged import arrow_ragged
from jaxfeed.models import MLP, TransformerLM
from jaxfeed.recipes.kinds.table import TableOptions, plan_table
from jaxfeed.serve.spec import ServingSpec, TableColumn
from jaxfeed.train.sharding import ShardingPlan


def test_a_batch_as_long_as_an_allowed_length_is_padded_to_that_length():
    """Broken by: choosing the first allowed length ``>`` the longest row instead of ``>=``."""
    ds = Dataset.from_dict({"input_ids": [[1, 2, 3, 4], [5], [6, 7, 8, 9, 10]]})
    loader = DataLoader(ds, batch_size=2, padding=Padding(lengths=(2, 4, 8)))
    first, second = [b["input_ids"].shape for b in loader]
    assert first == (2, 4)  # longest row 4: exactly an allowed length
    assert second == (1, 8)


def test_unshuffled_batches_of_a_ragged_column_are_their_own_rows():
    """Later batches of an unshuffled loader are slices of the table: broken by reading a sliced
    list array's values from the start of its buffer (ignoring its offset)."""
    rng = np.random.default_rng(0)
    rows = [rng.integers(1, 100, size=int(n)).tolist() for n in rng.integers(1, 9, size=23)]
    ds = Dataset.from_dict({"ids": rows, "k": list(range(23))})
    seen = 0
    for batch in DataLoader(ds, batch_size=5, padding=Padding()):
        for ids, mask, k in zip(batch["ids"], batch["attention_mask"], batch["k"], strict=True):
            assert np.asarray(ids)[np.asarray(mask, bool)].tolist() == rows[int(k)], int(k)
            assert int(k) == seen
            seen += 1
    assert seen == 23
    # the reader itself, on a slice of the column (a list array with a non-zero offset)
    column = ds.data.column("ids").combine_chunks()
    for start in (0, 5, 17):
        part = arrow_ragged(column.slice(start, 4))
        assert [part[i].tolist() for i in range(len(part))] == rows[start : start + 4]


def test_tokenize_with_max_length_none_switches_off_a_loaded_truncation(tmp_path):
    """A tokenizer.json that carries truncation (512) must not cut a 600-token text when
    ``max_length=None``: broken by leaving the loaded truncation on."""
    tokenizers = pytest.importorskip("tokenizers")
    from jaxfeed.text import load_tokenizer, tokenize

    words = [f"w{i}" for i in range(600)]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, "[UNK]")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.enable_truncation(max_length=512)
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    ds = Dataset.from_dict({"text": [" ".join(words)]})
    assert len(tokenize(ds, loaded, max_length=None)[0]["input_ids"]) == 600
    assert len(tokenize(ds, loaded, max_length=100)[0]["input_ids"]) == 100


def test_fsdp_splits_each_weight_along_its_largest_divisible_dimension():
    """Broken by splitting the first divisible dimension (here 8, which also divides)."""
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    plan = ShardingPlan(fsdp=True, fsdp_min_size=1)
    assert plan.spec("w", (8, 4096), None, mesh) == PartitionSpec(None, "data")
    assert plan.spec("w", (4096, 8), None, mesh) == PartitionSpec("data")
    assert plan.spec("w", (12, 24), None, mesh) == PartitionSpec(None, "data")  # 12 does not split


def test_an_integer_column_counting_rows_is_left_out_as_an_identifier():
    """0..n-1 in any order, under a name that says nothing of ids: broken by requiring an
    id-like name."""
    n = 40
    rng = np.random.default_rng(1)
    ds = Dataset.from_dict(
        {
            "serial": rng.permutation(n).tolist(),
            "size": rng.random(n).tolist(),
            "price": rng.random(n).tolist(),
        }
    )
    options = TableOptions()
    prep, notes = plan_table(ds, ["serial", "size"], "price", "regression", options)
    assert prep.input_columns == ["size"]
    assert any("serial (unique per row: an identifier)" in note for note in notes), notes


def test_a_stream_shuffled_with_another_seed_refuses_the_saved_state():
    """Broken by not recording (or not comparing) the shuffle seed in the stream's state."""
    from jaxfeed import IterableDataset

    stream = IterableDataset.from_dataset(Dataset.from_dict({"x": list(range(50))}))
    first = stream.shuffle(seed=0, buffer_size=8)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    other = stream.shuffle(seed=1, buffer_size=8)
    with pytest.raises(
        ValueError, match=r"shuffled with seed 0, but this one is shuffled with seed 1"
    ):
        other.load_state_dict(state)


def test_transformer_lm_restarts_positions_at_every_packed_segment():
    """Without ``positions=``, each segment counts from 0 (learned positions make it visible):
    broken by counting positions over the whole row."""
    lm = TransformerLM(
        40, dim=16, depth=1, num_heads=2, max_length=16, positions="learned", rngs=nnx.Rngs(0)
    )
    lm.eval()
    packed = jnp.array([[3, 4, 5, 6, 7, 8, 0]])
    segments = jnp.array([[1, 1, 1, 2, 2, 2, 0]])
    implicit = lm(packed, segment_ids=segments)
    explicit = lm(packed, segment_ids=segments, positions=jnp.array([[0, 1, 2, 0, 1, 2, 0]]))
    np.testing.assert_allclose(implicit, explicit, atol=1e-6)
    alone = lm(packed[:, 3:6])
    np.testing.assert_allclose(implicit[0, 3:6], alone[0], atol=1e-5)


def test_a_regression_export_adds_the_mean_back_and_unseen_categories_go_to_the_unknown_slot(
    tmp_path,
):
    """Broken by dropping ``+ target_mean`` from the outputs, or by one-hot encoding an unseen
    category as all zeros."""
    columns = (
        TableColumn("area", "numeric", mean=50.0, std=10.0),
        TableColumn("city", "categorical", vocabulary=("lyon", "paris")),
    )
    spec = ServingSpec(
        "table", (4,), task="regression", columns=columns, target_mean=100.0, target_std=20.0
    )
    model = MLP(4, (1,), hidden=(), rngs=nnx.Rngs(0))
    kernel = np.zeros((4, 1), np.float32)
    kernel[3, 0] = 1.0  # the output is the "unknown city" slot
    model.head.kernel.set_value(jnp.asarray(kernel))
    model.head.bias.set_value(jnp.zeros((1,)))
    served = load_exported(
        export(model, tmp_path / "m", np.zeros((1, 4), np.float32), preprocessing=spec)
    )
    out = served({"area": [50.0, 60.0, 70.0], "city": ["lyon", "premium", "paris"]})
    np.testing.assert_allclose(out, [100.0, 120.0, 100.0], atol=1e-5)


def test_restoring_onto_a_mesh_keeps_the_target_sharding(tmp_path):
    """Broken by restoring every array onto the default device (ignoring the target's sharding)."""
    w = jnp.arange(64.0).reshape(16, 4)
    with CheckpointManager(tmp_path, async_save=False) as ckpt:
        ckpt.save(1, {"w": w})  # saved from one device
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    sharding = NamedSharding(mesh, PartitionSpec("data", "model"))
    target = jax.device_put(jnp.zeros((16, 4)), sharding)
    restored = CheckpointManager(tmp_path).restore(1, state={"w": target})["state"]["w"]
    assert restored.sharding.is_equivalent_to(sharding, 2)
    assert len(restored.addressable_shards) == 8
    np.testing.assert_array_equal(np.asarray(restored), np.asarray(w))
