"""Differential tests against `datasets` for the behaviours of issue 39 ("the last mile"), each
named after the upstream test that shows it."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from datasets_diff import datasets, same, same_error


# upstream: tests/io/test_csv.py::test_dataset_from_csv_split (and the json/parquet twins)
@pytest.mark.parametrize(
    "split", [None, "train", "test", "split-objects"], ids=["none", "train", "test", "objects"]
)
def test_from_readers_take_split_objects(tmp_path, split):
    (tmp_path / "a.csv").write_text("x,y\n1,a\n2,b\n")
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "a.parquet")

    def snippet(lib):
        cache = str(tmp_path / lib.__name__)
        names = (
            [lib.NamedSplit("train"), lib.Split.TEST, datasets.NamedSplit("validation")]
            if split == "split-objects"
            else [split]
        )
        out = []
        for name in names:
            for read, path in (
                (lib.Dataset.from_csv, "a.csv"),
                (lib.Dataset.from_json, "a.jsonl"),
                (lib.Dataset.from_parquet, "a.parquet"),
            ):
                ds = read(str(tmp_path / path), split=name, cache_dir=cache)
                out.append((ds, repr(ds.split)))
        out.append(repr(lib.Dataset.from_dict({"x": [1]}, split=datasets.Split.TEST).split))
        return out

    same(snippet)


@pytest.mark.parametrize("split", ["train[:50%]", "train+test", "all"])
def test_from_readers_refuse_split_expressions(tmp_path, split):
    (tmp_path / "a.csv").write_text("x\n1\n2\n")

    def snippet(lib):
        name = lib.Split.ALL if split == "all" else split
        lib.Dataset.from_csv(str(tmp_path / "a.csv"), split=name, cache_dir=str(tmp_path / "c"))

    hf, jf = same_error(snippet)
    assert str(jf) == str(hf)


def test_dataset_dict_readers_take_split_objects_as_keys(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n2\n")

    def snippet(lib):
        files = {datasets.NamedSplit("train"): str(tmp_path / "a.csv")}
        read = lib.DatasetDict.from_csv(files, cache_dir=str(tmp_path / lib.__name__))
        return read, {str(k): repr(v.split) for k, v in read.items()}

    same(snippet)


# upstream: tests/test_arrow_dataset.py and tests/test_iterable_dataset.py, test_map_async and
# test_filter_async (timed there; here the calls are shown to overlap instead)
@pytest.mark.parametrize("stream", [False, True])
def test_async_functions_in_map_and_filter(stream):
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": list(range(20))})
        if stream:
            ds = ds.to_iterable_dataset()
        running, most = [0], [0]

        async def overlapping(value):
            running[0] += 1
            most[0] = max(most[0], running[0])
            await asyncio.sleep(0.001)
            running[0] -= 1
            return value

        async def add(example):
            return await overlapping({"y": example["x"] * 2})

        async def add_batch(batch):
            return await overlapping({"y": [x * 2 for x in batch["x"]]})

        async def keep(example, i):
            return await overlapping(example["x"] % 3 == 0 and i < 15)

        async def keep_batch(batch):
            return await overlapping([x == 4 for x in batch["x"]])

        outs = [
            ds.map(add),
            ds.map(add_batch, batched=True, batch_size=7),
            ds.filter(keep, with_indices=True),
            ds.filter(keep_batch, batched=True, batch_size=7),
        ]
        rows = [list(o) for o in outs]
        return rows, most[0] > 1

    same(snippet)
