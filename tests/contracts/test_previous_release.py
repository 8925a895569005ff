"""Files written by the release before the layered layout still load: a cache entry, a saved
dataset, an export and a checkpoint (``previous-release/``, written by jaxfeed at cb7b85f; the run
folder of the previous release is ``tests/recipes/run-format-2``)."""

import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pytest
from flax import nnx

import jaxfeed
from jaxfeed import Features, Value
from jaxfeed.data.formats.cache import cached_dataset
from jaxfeed.models import MLP
from jaxfeed.train.checkpoint import CheckpointManager

OLD = Path(__file__).parent / "previous-release"


@pytest.fixture
def old(tmp_path):
    copy = tmp_path / "old"
    shutil.copytree(OLD, copy)
    return copy


def test_a_cache_entry_keeps_its_key_and_loads(old):
    """The same payload finds the entry the previous release wrote, without rebuilding it."""
    features = Features({"x": Value("int64"), "name": Value("string")})

    def rebuild():
        raise AssertionError("the entry was not found under its old key")

    table = cached_dataset({"previous-release": 1}, rebuild, features, str(old / "cache"))
    table = getattr(table, "data", table)
    table = getattr(table, "table", table)
    assert pa.table(table).to_pydict() == {"x": [1, 2, 3], "name": ["a", "b", "c"]}


def test_a_saved_dataset_loads(old):
    ds = jaxfeed.load_from_disk(str(old / "saved"))
    assert ds.num_rows == 6 and ds["label"] == [0, 1, 2, 0, 1, 2]
    np.testing.assert_array_equal(
        np.asarray(ds.with_format("numpy")["x"]), np.arange(12, dtype=np.float32).reshape(6, 2)
    )


def test_an_export_serves_and_fills_a_model(old):
    x = np.load(old / "export-input.npy")
    expected = np.load(old / "export-output.npy")
    served = jaxfeed.load_exported(old / "export")
    np.testing.assert_allclose(np.asarray(served(x)), expected, rtol=1e-6)
    model = jaxfeed.load_exported(old / "export", like=MLP(3, (2,), hidden=(8,), rngs=nnx.Rngs(1)))
    model.eval()
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(x))), expected, rtol=1e-5)


def test_a_checkpoint_restores(old):
    manager = CheckpointManager(old / "checkpoints")
    try:
        like = {"w": jnp.zeros(4), "b": jnp.zeros((2, 2))}
        restored = manager.restore(3, state=like)
    finally:
        manager.close()
    assert restored["meta"]["note"] == "previous release"
    state = restored["state"]
    np.testing.assert_array_equal(np.asarray(state["w"]), np.arange(4.0))
    np.testing.assert_array_equal(np.asarray(state["b"]), np.ones((2, 2)))
