"""Two JAX processes on 127.0.0.1 (4 fake CPU devices each) load one global batch together."""

import json
import os
import socket
import sys
import textwrap

import numpy as np
import pytest

from jaxfeed import DataLoader, Dataset

WORKER = textwrap.dedent(
    """
    import json, os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    process_id, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    from jaxfeed import DataLoader, Dataset

    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), PartitionSpec("data"))
    ds = Dataset.from_dict({"id": np.arange(40), "x": np.arange(80, dtype=np.float32).reshape(40, 2)})
    loader = DataLoader(ds, batch_size=16, shuffle=True, seed=3, sharding=sharding, drop_last=True)
    batches = []
    for batch in loader:
        assert batch["id"].shape == (16,) and batch["x"].shape == (16, 2)
        assert not batch["id"].is_fully_addressable
        batches.append(sorted((s.index[0].start, np.asarray(s.data).tolist()) for s in batch["id"].addressable_shards))
    json.dump({"batches": batches, "state": loader.state_dict()}, open(out, "w"))
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_assemble_the_single_process_batches(process_group, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [
        process_group(
            [sys.executable, str(script), str(i), port, str(tmp_path / f"out{i}.json")], env=env
        )
        for i in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=240) == 0
    parts = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    reference = DataLoader(
        Dataset.from_dict({"id": np.arange(40)}),
        batch_size=16,
        shuffle=True,
        seed=3,
        drop_last=True,
    )
    expected = [np.asarray(b["id"]).tolist() for b in reference]
    assert len(parts[0]["batches"]) == len(expected) == 2
    for k, want in enumerate(expected):
        shards = dict(item for part in parts for item in part["batches"][k])
        assert sorted(shards) == [
            0,
            2,
            4,
            6,
            8,
            10,
            12,
            14,
        ]  # each process holds its 4 devices' rows
        assert [x for start in sorted(shards) for x in shards[start]] == want
    assert parts[0]["state"] == parts[1]["state"]
