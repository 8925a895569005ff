"""What the engines' workers write and the driver maps (``jaxfeed.data.formats.shards``) and the
blocks ``to_ray`` puts into Ray's object store (``jaxfeed.data.formats.ray``), without starting
Spark or Ray (``tests/data/test_engines.py`` runs them for real, in the slow tier): a source's
pieces larger than ``max_shard_size`` keep its order, and each row goes into one block."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pyarrow as pa

from jaxfeed import Dataset, Features, Value
from jaxfeed.data.formats import ray as ray_format
from jaxfeed.data.formats.shards import ShardWriter, publish_shards

FEATURES = Features({"x": Value("int64")})


def test_pieces_over_max_shard_size_keep_the_sources_order(tmp_path):
    """Three pieces (Spark partitions, Ray blocks) of 10 rows, each written into files of 3
    rows: the published table holds piece 0's rows, then piece 1's, then piece 2's, in order,
    whatever order the workers reported their files in."""
    written = tmp_path / "written"
    written.mkdir()
    stats = []
    for part in (2, 0, 1):  # workers finish in any order
        writer = ShardWriter(written, FEATURES, part=part, max_shard_size=24)  # 3 int64 rows
        for lo in range(0, 10, 4):  # the piece arrives as several record batches
            rows = range(part * 10 + lo, part * 10 + min(lo + 4, 10))
            writer.write(pa.table({"x": pa.array(rows, pa.int64())}))
        stats += writer.finish().to_pylist()
    assert len(stats) >= 9 and {r["rows"] for r in stats} <= {1, 2, 3}, stats
    random.Random(0).shuffle(stats)
    shards = publish_shards(tmp_path / "cache", written, stats, FEATURES, {})
    assert shards.table.column("x").to_pylist() == list(range(30))
    assert len(shards.cache_files) == len(stats)


class _ObjectStore:
    """Ray's ``put`` and ``data.from_arrow_refs`` as ``to_ray`` calls them: each put table kept,
    its index the reference."""

    def __init__(self) -> None:
        self.blocks: list[pa.Table] = []
        self.data = SimpleNamespace(from_arrow_refs=list)

    def put(self, table: pa.Table) -> int:
        self.blocks.append(table)
        return len(self.blocks) - 1


def test_to_ray_puts_each_row_into_one_block(monkeypatch):
    """A dataset of four blocks' worth of rows: four blocks of 25 rows, in order, each once (a
    block holding the blocks before it would repeat rows)."""
    store = _ObjectStore()
    monkeypatch.setattr(ray_format, "require", lambda *args: store)
    monkeypatch.setattr(ray_format, "BLOCK_BYTES", 25 * 8)  # 25 int64 rows a block
    ds = Dataset.from_dict({"x": list(range(100))}, features=FEATURES)
    assert ds.to_ray() == [0, 1, 2, 3]
    assert [b.num_rows for b in store.blocks] == [25] * 4
    assert pa.concat_tables(store.blocks).column("x").to_pylist() == list(range(100))
    store.blocks.clear()  # a stream's tables (IterableDataset.to_ray): 10 rows each, 3 a block
    tables = (pa.table({"x": pa.array(range(lo, lo + 10), pa.int64())}) for lo in range(0, 100, 10))
    assert ray_format.ray_from_tables(tables, FEATURES) == [0, 1, 2, 3]
    assert [b.num_rows for b in store.blocks] == [30, 30, 30, 10]
    assert pa.concat_tables(store.blocks).column("x").to_pylist() == list(range(100))
