"""One sharded training run, shared by tests/train/test_sharding.py and its 2-process job.

As a script (under ``jaxfeed launch --num-processes 2 --devices-per-process 4``):
``sharded_run.py CKPT EXPECTED.npz OUT.npz STEPS`` restores the latest checkpoint of CKPT under
FSDP on the global mesh of 8, checks every shard this process holds against EXPECTED exactly,
trains to STEPS (resuming from CKPT) and process 0 writes the whole state to OUT.
"""

import sys

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxfeed import DataLoader, Dataset, Trainer
from jaxfeed.models import MLP
from jaxfeed.runtime import distributed
from jaxfeed.train.sharding import make_mesh


def data() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(320, 256)).astype(np.float32)
    return Dataset.from_dict({"x": x, "label": (x[:, :10].argmax(1)).astype(np.int64)})


def trainer(mesh, sharding) -> Trainer:
    model = MLP(10, (256,), hidden=(1024, 256), rngs=nnx.Rngs(0))
    return Trainer(model, optax.adam(1e-3, eps=1e-3), inputs="x", verbose=0, mesh=mesh,
                   sharding=sharding, handle_signals=False)  # fmt: skip


def loader(mesh) -> DataLoader:
    return DataLoader(data(), 32, shuffle=True, sharding=NamedSharding(mesh, PartitionSpec("data")))


def named_leaves(t: Trainer) -> dict[str, jax.Array]:
    return {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(t.core.state)[0]
    }


def host_state(t: Trainer) -> dict[str, np.ndarray]:
    """The whole state on the host (single process)."""
    return {name: np.asarray(leaf) for name, leaf in named_leaves(t).items()}


def check_shards(t: Trainer, expected: dict[str, np.ndarray]) -> int:
    """Compare every shard this process holds with ``expected`` exactly; returns shards seen."""
    seen = 0
    leaves = named_leaves(t)
    assert sorted(leaves) == sorted(expected), sorted(set(leaves) ^ set(expected))
    for name, leaf in leaves.items():
        for shard in leaf.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), expected[name][shard.index], name)
            seen += 1
    return seen


if __name__ == "__main__":
    ckpt, expected, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    assert distributed.initialize() and jax.process_count() == 2
    from jaxfeed.train.checkpoint import CheckpointManager

    mesh = make_mesh({"data": 8})
    run = trainer(mesh, "fsdp")
    with CheckpointManager(ckpt) as manager:
        run.restore_checkpoint(manager, "latest")
    shards = check_shards(run, dict(np.load(expected)))
    split = {leaf.sharding.spec for leaf in named_leaves(run).values()}
    assert any("data" in str(s) for s in split) and all(
        len(leaf.addressable_shards) == 4 for leaf in named_leaves(run).values()
    )
    run.fit(loader(mesh), max_steps=steps, checkpoint_dir=ckpt, resume=True)
    bytes_here = run.state_bytes_per_device()
    run.gather()
    if jax.process_index() == 0:
        np.savez(out, **host_state(run))
    print(f"exact shards {shards}; step {run.step}; bytes per device {bytes_here}", flush=True)
