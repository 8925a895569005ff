"""Two JAX processes stream one Parquet dataset: each reads only its own row groups."""

import json
import os
import socket
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

WORKER = textwrap.dedent(
    """
    import json, os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    process_id, port, out, pattern = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    from jaxfeed import DataLoader, load_dataset

    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), PartitionSpec("data"))
    ids = load_dataset("parquet", data_files=pattern, split="train", streaming=True)
    loader = DataLoader(ids, batch_size=16, sharding=sharding, drop_last=True)
    rows = []
    for batch in loader:
        assert batch["id"].shape == (16,) and not batch["id"].is_fully_addressable
        rows += [v for s in batch["id"].addressable_shards for v in np.asarray(s.data).tolist()]
    units = [[u.path, list(u.row_groups)] for u in loader.dataset._source.units]
    json.dump({"rows": rows, "units": units}, open(out, "w"))
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_stream_disjoint_row_groups_that_cover_the_data(process_group, tmp_path):
    for i in range(4):
        ids = np.arange(i * 32, (i + 1) * 32)
        pq.write_table(pa.table({"id": ids}), tmp_path / f"train-{i}.parquet", row_group_size=16)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    pattern = str(tmp_path / "train-*.parquet")
    procs = [
        process_group(
            [sys.executable, str(script), str(i), port, str(tmp_path / f"out{i}.json"), pattern],
            env=env,
        )
        for i in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=240) == 0
    parts = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    units = [{(path, tuple(groups)) for path, groups in p["units"]} for p in parts]
    assert len(units[0]) == len(units[1]) == 4 and not units[0] & units[1]
    rows = [p["rows"] for p in parts]
    assert len(rows[0]) == len(rows[1]) == 64 and not set(rows[0]) & set(rows[1])
    assert sorted(rows[0] + rows[1]) == list(range(128))
