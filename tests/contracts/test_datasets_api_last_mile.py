"""Differential tests against `datasets` for the behaviours of issue 39 ("the last mile"), each
named after the upstream test that shows it."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from datasets_diff import datasets, jaxfeed, same, same_error


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


def _files(filepaths, n=3):
    for f in filepaths:
        for i in range(n):
            yield {"id": i, "filepath": f}


def _split_by_node(lib):
    if lib is datasets:
        from datasets.distributed import split_dataset_by_node

        return split_dataset_by_node
    return lib.split_dataset_by_node


# upstream: tests/test_iterable_dataset.py::test_iterable_dataset_shard
def test_iterable_shard_arguments():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"a": list(range(20))}).to_iterable_dataset(num_shards=5)
        out = [ds.num_shards]
        for n in (5, 2):
            out.append([ds.shard(n, i).num_shards for i in range(n)])
            out.append([list(ds.shard(n, i)) for i in range(n)])
            out.append([list(ds.shard(num_shards=n, index=i, contiguous=False)) for i in range(n)])
        return out

    same(snippet)


# upstream: test_iterable_dataset_batch_with_table_format
def test_iterable_batch_with_table_formats():
    def snippet(lib):
        ds = lib.IterableDataset.from_dict({"a": [1, 2, 3, 4]})
        return [
            (list(ds.with_format(f).batch(2)), list(ds.batch(2).with_format(f)))
            for f in ("pyarrow", "arrow", "pandas", "numpy")
        ]

    same(snippet)


# upstream: test_iterable_dataset_map_batched_{shrink,expand}_without_all_columns_raises,
# test_iterable_dataset_map_batched_new_shorter_column_raises
@pytest.mark.parametrize("kind", ["shrink", "expand", "new_shorter"])
def test_batched_map_changing_rows_without_all_columns(kind):
    import pyarrow as pa

    functions = {
        "shrink": lambda b: {"a": [x for x in b["a"] if x >= 3]},
        "expand": lambda b: {"a": [x for x in b["a"] for _ in range(2)]},
        "new_shorter": lambda b: {"c": [x for x in b["a"] if x >= 3]},
    }
    rows = [{"a": i, "b": i} for i in range(6)]

    def stream(lib):
        ds = lib.IterableDataset.from_generator(lambda: iter(rows))
        list(ds.map(functions[kind], batched=True, batch_size=6))

    hf, jf = same_error(stream)
    assert "Column lengths mismatch" in str(hf) and "Column lengths mismatch" in str(jf)
    if kind == "shrink":
        hf, jf = same_error(
            lambda lib: lib.Dataset.from_list(rows).map(functions[kind], batched=True, batch_size=6)
        )
        assert isinstance(jf, pa.ArrowInvalid) and "expected length" in str(jf)


# upstream: test_iterable_dataset_set_epoch_resuming
def test_iterable_set_epoch_while_resuming():
    def snippet(lib):
        ds = lib.IterableDataset.from_generator(_files, gen_kwargs={"filepaths": ["a", "b"]})
        out = [len(list(ds)), len(list(ds))]
        ds.load_state_dict(ds.state_dict())
        out.append(len(list(ds)))
        ds.set_epoch(1)
        out.append(len(list(ds)))
        ds.load_state_dict(ds.state_dict())
        out.append(len(list(ds)))
        return out

    assert same(snippet) == [6, 6, 0, 6, 0]


# upstream: test_iterable_dataset_skip_or_take_after_split_by_node (and from_generator's shards)
@pytest.mark.parametrize("method", ["skip", "take"])
def test_skip_and_take_after_split_dataset_by_node(method):
    def snippet(lib):
        split = _split_by_node(lib)
        files = [f"{i}.txt" for i in range(10)]
        ds = lib.IterableDataset.from_generator(_files, gen_kwargs={"filepaths": files})
        out = [ds.num_shards]
        for count in (2, 5, 11):
            out.append(list(getattr(split(ds, rank=1, world_size=2), method)(count)))
            out.append(list(split(getattr(ds, method)(count), rank=1, world_size=2)))
        return out

    same(snippet)


# upstream: test_iterable_dataset_with_features_fill_with_none
def test_stream_features_fill_missing_columns_with_none():
    def snippet(lib):
        def rows():
            yield {"a": 1}
            yield {"b": 1}

        features = lib.Features({"a": lib.Value("int32"), "b": lib.Value("int32")})
        return list(lib.IterableDataset.from_generator(rows, features=features))

    assert same(snippet) == [{"a": 1, "b": None}, {"a": None, "b": 1}]


_NUM_PROC_ON_DATASETS = """
import json, os, sys
import datasets
datasets.disable_progress_bars()


def crash(row):
    os.kill(os.getpid(), 9)


def main(folder):
    datasets.Dataset.from_dict({"f": [f"n_{i}" for i in range(6)]}).save_to_disk(folder)
    ds = datasets.load_from_disk(folder)
    out = ds.map(lambda x, i: {"name": x["f"][:-2], "id": i}, with_indices=True, num_proc=2)
    again = out.map(lambda x: {"name": 1}, remove_columns=out.column_names, num_proc=2)
    try:
        ds.map(crash, num_proc=2)
        error = None
    except Exception as err:
        error = [type(err).__name__, isinstance(err, RuntimeError), str(err)]
    print(json.dumps([
        [os.path.basename(c["filename"]).split("_", 1)[1] for c in out.cache_files],
        out.to_dict(), again.features.to_dict(), again.to_dict(), error,
    ]))


if __name__ == "__main__":
    main(sys.argv[1])
"""


def _crash(row):
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


# upstream: test_map_multiprocessing (cache files per shard), test_map_remove_columns with
# num_proc, test_map_crash_subprocess (datasets' message; its cause names the worker)
@pytest.mark.slow  # 6 worker processes and a datasets interpreter
def test_map_num_proc_cache_files_remove_columns_and_crash(tmp_path):
    import json
    import os
    import subprocess
    import sys

    hf = subprocess.Popen(  # runs while jaxfeed's workers start (datasets forks: never here)
        [sys.executable, "-c", _NUM_PROC_ON_DATASETS, str(tmp_path / "hf")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    jaxfeed.Dataset.from_dict({"f": [f"n_{i}" for i in range(6)]}).save_to_disk(tmp_path / "jf")
    ds = jaxfeed.load_from_disk(str(tmp_path / "jf"))
    out = ds.map(lambda x, i: {"name": x["f"][:-2], "id": i}, with_indices=True, num_proc=2)
    again = out.map(lambda x: {"name": 1}, remove_columns=out.column_names, num_proc=2)
    with pytest.raises(RuntimeError) as crashed:
        ds.map(_crash, num_proc=2)
    stdout, stderr = hf.communicate(timeout=300)
    assert hf.returncode == 0, stderr[-3000:]
    files, rows, features, again_rows, error = json.loads(stdout.strip().splitlines()[-1])
    assert [os.path.basename(c["filename"]).split("_", 1)[1] for c in out.cache_files] == files
    assert files == ["00000_of_00002.arrow", "00001_of_00002.arrow"]
    assert out.to_dict() == rows
    assert (
        json.loads(json.dumps(again.features.to_dict()))
        == features
        == {"name": {"dtype": "int64", "_type": "Value"}}
    )
    assert again.to_dict() == again_rows
    assert error[1] is True and str(crashed.value) == error[2]  # datasets' words, to the letter
    assert "killed by signal 9" in str(crashed.value.__cause__)  # which worker, pid, how it died


# upstream: tests/features/test_image.py::test_encode_np_array (the downcasting cases)
@pytest.mark.parametrize(
    "shape, dtype, dest", [((4, 4), "int64", "int32"), ((2, 2, 4), "int64", "uint8")]
)
def test_image_arrays_downcast_with_datasets_warning(shape, dtype, dest):
    import numpy as np

    array = np.arange(16).reshape(shape).astype(dtype)

    def snippet(lib):
        with pytest.warns(UserWarning, match=f"Downcasting array dtype.+{dest}.+"):
            encoded = lib.Image().encode_example(array)
        decoded = lib.Image().decode_example(encoded)
        return encoded["path"], decoded.format, np.asarray(decoded)

    same(snippet)


# upstream: test_dataset_with_image_feature_from_pil_image (in-memory images with no filename,
# and one opened from a file: decoded, it names that file)
def test_image_from_pil_images(tmp_path):
    import numpy as np
    import PIL.Image

    path = tmp_path / "x.png"
    PIL.Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).save(path)

    def snippet(lib):
        made = PIL.Image.new("RGB", (4, 3), (1, 2, 3))
        resized = PIL.Image.open(path).resize((2, 2))
        ds = lib.Dataset.from_dict({"image": [made, resized, PIL.Image.open(path)]})
        stored = ds.cast_column("image", lib.Image(decode=False))[:2]["image"]
        images = ds["image"]
        return (
            ds.features,
            stored,
            [(im.format, im.mode, im.size, np.asarray(im)) for im in images],
            images[2].filename == str(path),
        )

    same(snippet)


# upstream: test_dataset_add_item (items that need an implicit cast, under each transform)
@pytest.mark.parametrize(
    "item",
    [
        {"col_1": "2", "col_2": 2, "col_3": 2.0},
        {"col_1": "2", "col_2": "2", "col_3": "2"},
        {"col_1": 2, "col_2": 2, "col_3": 2},
        {"col_1": 2.0, "col_2": 2.0, "col_3": 2.0},
    ],
)
@pytest.mark.parametrize("transform", [None, "shuffle", "with_format", "class_encode_column"])
def test_add_item_with_implicit_casts(item, transform):
    data = {"col_1": ["0", "1", "2", "3"], "col_2": [0, 1, 2, 3], "col_3": [0.0, 1.0, 2.0, 3.0]}
    calls = {
        "shuffle": ("shuffle", (42,)),
        "with_format": ("with_format", ("pandas",)),
        "class_encode_column": ("class_encode_column", ("col_2",)),
    }

    def snippet(lib):
        ds = lib.Dataset.from_dict(data)
        if transform is not None:
            name, args = calls[transform]
            ds = getattr(ds, name)(*args)
        out = ds.add_item(item)
        kind = out.format["type"]
        out.reset_format()
        return kind, out

    same(snippet)


def test_add_item_casts_that_lose_nothing_and_refusals():
    data = {"i": [0, 1], "b": [True, False]}

    def snippet(lib):
        return lib.Dataset.from_dict(data).add_item({"i": 3.0, "b": 1})

    same(snippet)
    # kept refusals (the differences table): 2.5 into an int column, "False" into a bool column
    for lib in (datasets, jaxfeed):  # both refuse (ArrowInvalid, FeatureError: ValueErrors)
        with pytest.raises(ValueError, match=r"2\.5"):
            lib.Dataset.from_dict(data).add_item({"i": 2.5, "b": True})
    with pytest.raises(ValueError, match=r"'b'.*'False'"):
        jaxfeed.Dataset.from_dict(data).add_item({"i": 1, "b": "False"})
    stored = datasets.Dataset.from_dict(data).add_item({"i": 1, "b": "False"})
    assert stored["b"][-1] is False  # datasets parses it with Arrow; jaxfeed refuses strings


# upstream: test_to_pandas_decode_nested_json, test_to_list_and_to_dict_decode_nested_json
def test_nested_json_decoded_in_to_pandas_and_to_list():
    def snippet(lib):
        features = lib.Features({"col": lib.List(lib.Json()), "s": {"j": lib.Json()}})
        ds = lib.Dataset.from_dict(
            {"col": [[{"a": 1}], [{"b": 2}]], "s": [{"j": {"a": [1]}}, {"j": None}]},
            features=features,
        )
        df = ds.to_pandas()
        batches = list(ds.to_pandas(batched=True, batch_size=1))
        return (
            [list(v) for v in df["col"]],
            list(df["s"]),
            [list(b["col"].iloc[0]) for b in batches],
            ds.to_list(),
            ds.to_dict(),
        )

    same(snippet)


# upstream: test_dataset_dict.py::DatasetDictTest::test_map and test_filter (cache_file_names)
def test_dataset_dict_map_and_filter_take_cache_file_names(tmp_path):
    import os

    def snippet(lib):
        folder = tmp_path / lib.__name__
        folder.mkdir()
        dd = lib.DatasetDict(
            {
                "train": lib.Dataset.from_dict({"x": [1, 2]}),
                "test": lib.Dataset.from_dict({"x": [3]}),
            }
        )
        names = {k: str(folder / f"{k}.arrow") for k in dd}
        mapped = dd.map(lambda r: {"y": r["x"] * 2}, cache_file_names=names)
        kept = dd.filter(
            lambda r: r["x"] > 1, cache_file_names={k: str(folder / f"f-{k}.arrow") for k in dd}
        )
        return mapped, kept, sorted(f for f in os.listdir(folder) if not f.startswith("f-"))

    same(snippet)


# upstream: test_map_cases (rows returning {} or a subset of the input columns among full rows)
@pytest.mark.parametrize("subset", [False, True])
def test_map_rows_returning_fewer_input_columns(subset):
    def snippet(lib):
        def f(x):
            if x["a"] < 2:
                x["a"] = -1
                return dict(x)
            return {"b": x["b"] + "!"} if subset else {}

        ds = lib.Dataset.from_dict({"a": [0, 1, 2, 3], "b": ["w", "x", "y", "z"]})
        return ds.map(f)

    same(snippet)
    # a row returning a key the first row did not stays refused (the differences table)
    with pytest.raises(KeyError):
        jaxfeed.Dataset.from_dict({"a": [0, 1]}).map(lambda x: {} if x["a"] == 0 else {"c": 1})


# upstream: test_repeat, test_select_then_map / test_shard (select's cache arguments),
# test_dataset_from_generator_split / _fingerprint (from_generator's arguments)
def test_repeat_select_and_from_generator_arguments(tmp_path):
    def rows():
        yield from ({"x": i} for i in range(3))

    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2, 3]})
        made = lib.Dataset.from_generator(rows, cache_dir=str(tmp_path / lib.__name__), split="foo")
        return (
            ds.repeat(-1),
            ds.repeat(0),
            ds.select([2, 0], indices_cache_file_name=str(tmp_path / "i.arrow")),
            made,
            str(made.split),
        )

    same(snippet)


# upstream: test_dataset_dict.py::DatasetDictTest::test_serialization (num_proc shards). Only
# jaxfeed runs here: datasets forks its num_proc workers, never to be done from a process running
# JAX; the upstream test asserts 2 cache files per split.
def test_save_to_disk_num_proc_writes_that_many_shards(tmp_path):
    dd = jaxfeed.DatasetDict(
        {
            "train": jaxfeed.Dataset.from_dict({"x": list(range(30))}),
            "test": jaxfeed.Dataset.from_dict({"x": [1, 2]}),
        }
    )
    dd.save_to_disk(str(tmp_path / "d"), num_proc=2)
    back = jaxfeed.DatasetDict.load_from_disk(str(tmp_path / "d"))
    assert {k: len(v.cache_files) for k, v in back.items()} == {"train": 2, "test": 2}
    assert back["train"]["x"][:] == list(range(30))
    dd["train"].save_to_disk(str(tmp_path / "one"), num_proc=3)
    assert len(jaxfeed.load_from_disk(str(tmp_path / "one")).cache_files) == 3
