"""Differential tests: the same snippets on Hugging Face `datasets` and on jaxfeed.

Each test runs a snippet written against the `datasets` API on both libraries and compares
values, types and features (see ``datasets_diff.norm``). Formats, construction, export and
import, the everyday methods and seeds are here; map, features, nulls and media in
``test_datasets_api_map.py``; deliberate refusals in ``test_datasets_api_refusals.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from datasets_diff import datasets, jaxfeed, norm, run_both, same, same_error


def base(lib, **kw):
    feats = lib.Features(
        {
            "text": lib.Value("string"),
            "label": lib.ClassLabel(names=["neg", "pos"]),
            "score": lib.Value("float32"),
            "ids": lib.List(lib.Value("int64")),
        }
    )
    return lib.Dataset.from_dict(
        {
            "text": ["a", "b", "c", "d", "e", "f"],
            "label": [0, 1, 1, 0, 1, 0],
            "score": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5],
            "ids": [[1], [2, 3], [], [4], [5, 6], [7]],
        },
        features=feats,
        **kw,
    )


# ------------------------------------------------------------------------------ formats
def test_formatted_as_restores_the_previous_format():
    def snippet(lib):
        ds = base(lib).with_format("numpy", columns=["score"])
        with ds.formatted_as("python"):
            inside = ds[:2]
        return inside, ds[:2], ds.format["type"], ds.format["columns"]

    same(snippet)


def test_dataset_dict_formatted_as():
    def snippet(lib):
        dd = lib.DatasetDict({"train": base(lib), "test": base(lib).select([0])})
        with dd.formatted_as("numpy"):
            inside = dd["test"][0]
        return inside, dd["test"][0]

    same(snippet)


def test_context_manager():
    def snippet(lib):
        with base(lib) as ds:
            return ds.num_rows, ds[0]

    same(snippet)


def test_numpy_format_dtype():
    same(lambda lib: base(lib).with_format("numpy", dtype=np.float16)[:3]["score"])


def test_numpy_rows_give_np_str():
    same(lambda lib: (base(lib).with_format("numpy")[0], base(lib).with_format("numpy")[:2]))


def test_set_transform_and_with_transform():
    def snippet(lib):
        ds = base(lib)

        def shout(batch):
            return {
                "text": [t.upper() for t in batch["text"]],
                "n": [len(t) for t in batch["text"]],
            }

        other = ds.with_transform(shout, columns=["text"])
        ds.set_transform(shout, columns=["text"])
        return ds[0], ds[1:3], other[2], ds.format["type"], list(ds["text"])

    same(snippet)


def test_dataset_dict_transforms():
    def snippet(lib):
        dd = lib.DatasetDict({"a": base(lib)})
        out = dd.with_transform(lambda b: {"t2": [t * 2 for t in b["text"]]})
        dd.set_transform(lambda b: {"first": [t[:1] for t in b["text"]]})
        return out["a"][0], dd["a"][1]

    same(snippet)


# ------------------------------------------------------------------------------ column
def test_column_object():
    def snippet(lib):
        ds = base(lib)
        col = ds["text"]
        return (
            type(col).__name__,
            col[0],
            col[1:3],
            col[[4, 0]],
            list(col),
            col == ["a", "b", "c", "d", "e", "f"],
            len(col),
            repr(col),
            ds.with_format("numpy")["score"][:2],
        )

    same(snippet)


def test_nested_column_and_pandas_series_index():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"meta": [{"src": "x", "n": 1}, {"src": "y", "n": 2}]})
        rows = pd.Series([1, 0])
        return ds["meta"]["src"][1], list(ds["meta"]["n"]), ds[rows]

    same(snippet)


# ------------------------------------------------------------------------------ export
def test_to_dict_to_list_to_pandas():
    def snippet(lib):
        ds = base(lib).select([3, 1, 2])
        batches = list(ds.to_pandas(batched=True, batch_size=2))
        return (
            ds.to_dict(),
            ds.to_list(),
            ds.to_pandas(),
            [len(b) for b in batches],
            batches[1],
            [b for b in ds.to_dict(batched=True, batch_size=2)],
        )

    same(snippet)


def test_to_csv_json_parquet_bytes_and_files(tmp_path):
    outputs = {}
    for name, lib in (("datasets", datasets), ("jaxfeed", jaxfeed)):
        ds = base(lib).select([0, 2, 4])
        folder = tmp_path / name
        folder.mkdir()
        sizes = (
            ds.to_csv(folder / "d.csv"),
            ds.to_json(folder / "d.jsonl"),
            ds.to_json(folder / "d.json", lines=False, orient="records"),
            ds.to_csv(folder / "d.tsv", sep="\t", batch_size=1),
        )
        ds.to_parquet(folder / "d.parquet")
        texts = [(folder / f).read_text() for f in ("d.csv", "d.jsonl", "d.json", "d.tsv")]
        outputs[name] = (sizes, texts)
    assert outputs["jaxfeed"] == outputs["datasets"]


def test_from_csv_json_parquet(tmp_path):
    (tmp_path / "a.csv").write_text("x,y,z\n1,hi,0.5\n2,,1.5\n")
    (tmp_path / "a.jsonl").write_text('{"x": 1, "y": "hi"}\n{"x": 2, "y": null}\n')
    (tmp_path / "b.json").write_text('{"rows": [{"x": 1}, {"x": 3}], "other": 1}')
    base(datasets).to_parquet(tmp_path / "a.parquet")
    cache = str(tmp_path / "cache")

    def snippet(lib):
        return (
            lib.Dataset.from_csv(str(tmp_path / "a.csv"), cache_dir=cache),
            lib.Dataset.from_json(str(tmp_path / "a.jsonl"), cache_dir=cache),
            lib.Dataset.from_json(str(tmp_path / "b.json"), field="rows", cache_dir=cache),
            lib.Dataset.from_parquet(str(tmp_path / "a.parquet"), cache_dir=cache),
            lib.Dataset.from_csv(
                [str(tmp_path / "a.csv")] * 2,
                features=lib.Features(
                    {"x": lib.Value("int32"), "y": lib.Value("string"), "z": lib.Value("float64")}
                ),
                cache_dir=cache,
            ),
        )

    same(snippet)


def test_save_to_disk_shards_and_load_classmethods(tmp_path):
    def snippet(lib):
        folder = tmp_path / lib.__name__
        ds = base(lib)
        ds.save_to_disk(str(folder / "ds"), num_shards=3)
        files = sorted(p.name for p in (folder / "ds").glob("*.arrow"))
        dd = lib.DatasetDict({"train": ds, "test": ds.select([0])})
        dd.save_to_disk(str(folder / "dd"), num_shards={"train": 2, "test": 1})
        ds.save_to_disk(str(folder / "small"), max_shard_size=100)
        return (
            files,
            lib.Dataset.load_from_disk(str(folder / "ds")),
            lib.DatasetDict.load_from_disk(str(folder / "dd")),
            sorted(p.name for p in (folder / "dd" / "train").glob("*.arrow")),
            len(list((folder / "small").glob("*.arrow"))) > 1,
        )

    same(snippet)


# ------------------------------------------------------------------------------ methods
def test_unique_sort_shard():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"k": [3, 1, None, 3, 2, 1], "v": list("abcdef")})
        return (
            ds.unique("k"),
            ds.sort("k"),
            ds.sort("k", reverse=True),
            ds.sort(["k", "v"], reverse=[False, True], null_placement="at_start"),
            ds.shard(4, 1),
            ds.shard(4, 3, contiguous=False),
            ds.shuffle(seed=3).unique("k"),
        )

    same(snippet)


def test_add_column_add_item_flatten():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"a": [{"b": 1, "c": {"d": "x"}}, {"b": 2, "c": {"d": "y"}}]})
        wide = ds.add_column("e", [0.5, 1.5])
        longer = wide.add_item({"a": {"b": 3, "c": {"d": "z"}}, "e": 2.5})
        shuffled = (
            base(lib).shuffle(seed=1).add_item({"text": "z", "label": 1, "score": 9.0, "ids": [9]})
        )
        return wide, longer, longer.flatten(), shuffled, base(lib).add_column("n", np.arange(6))

    same(snippet)


def test_flatten_translation():
    def snippet(lib):
        feats = lib.Features({"t": lib.Translation(languages=["fr", "en"])})
        ds = lib.Dataset.from_dict({"t": [{"en": "cat", "fr": "chat"}]}, features=feats)
        return ds, ds.flatten()

    same(snippet)


def test_class_encode_column():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"y": ["dog", "cat", None, "dog"], "n": [3, 1, 2, 1]})
        dd = lib.DatasetDict({"a": ds.select([0, 1]), "b": ds.select([2, 3])})
        return (
            ds.class_encode_column("y"),
            ds.class_encode_column("n"),
            ds.class_encode_column("y", include_nulls=True),
            dd.class_encode_column("y"),
        )

    same(snippet)


def test_cast_with_batch_size_and_dataset_dict_cast():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"y": ["a", "b", "a"], "x": [1, 2, 3]})
        feats = lib.Features({"y": lib.ClassLabel(names=["a", "b"]), "x": lib.Value("float32")})
        dd = lib.DatasetDict({"t": ds})
        return ds.cast(feats, batch_size=1), dd.cast(feats)

    same(snippet)


def test_select_columns_order():
    same(lambda lib: base(lib).select_columns(["score", "text"]))


def test_concatenate_fills_missing_columns_and_resets_format():
    def snippet(lib):
        a = lib.Dataset.from_dict({"x": [1, 2]}).with_format("numpy")
        b = lib.Dataset.from_dict({"y": ["z"], "x": [3]})
        out = lib.concatenate_datasets([a, b])
        same_format = lib.concatenate_datasets([a, a])
        return out, out.format["type"], same_format.format["type"]

    same(snippet)


@pytest.mark.parametrize("strategy", ["first_exhausted", "all_exhausted"])
def test_interleave_datasets(strategy):
    def snippet(lib):
        a = lib.Dataset.from_dict({"x": [0, 1, 2]})
        b = lib.Dataset.from_dict({"x": [10, 11, 12, 13, 14]})
        return (
            lib.interleave_datasets([a, b], stopping_strategy=strategy),
            lib.interleave_datasets(
                [a, b], probabilities=[0.3, 0.7], seed=42, stopping_strategy=strategy
            ),
        )

    same(snippet)


def test_interleave_without_replacement():
    def snippet(lib):
        a = lib.Dataset.from_dict({"x": [0, 1, 2]})
        b = lib.Dataset.from_dict({"x": [10, 11]})
        strategy = "all_exhausted_without_replacement"
        return (
            lib.interleave_datasets([a, b], stopping_strategy=strategy),
            lib.interleave_datasets([a, b], [0.5, 0.5], seed=1, stopping_strategy=strategy),
        )

    same(snippet)


def test_to_iterable_dataset_and_iterable_api():
    def snippet(lib):
        ds = base(lib)
        it = ds.to_iterable_dataset()

        def gen(n):
            for i in range(n):
                yield {"i": i, "s": str(i)}

        from_gen = lib.IterableDataset.from_generator(gen, gen_kwargs={"n": 5})
        idd = lib.IterableDatasetDict({"train": from_gen})
        return (
            [r["text"] for r in it],
            list(from_gen.filter(lambda r: r["i"] % 2 == 0)),
            list(from_gen.filter(lambda b: [i > 2 for i in b["i"]], batched=True)),
            list(idd.map(lambda r: {"j": r["i"] * 2})["train"]),
            list(idd.filter(lambda r: r["i"] == 1)["train"]),
        )

    same(snippet)


# ------------------------------------------------------------------------------ seeds
@pytest.mark.parametrize("seed", [0, 7, 1234])
def test_shuffle_and_split_pick_the_same_rows(seed):
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": list(range(23))})
        return (
            ds.shuffle(seed=seed)["x"],
            ds.shuffle(generator=np.random.default_rng(seed))["x"],
            ds.train_test_split(test_size=0.3, seed=seed),
            ds.train_test_split(test_size=5, train_size=10, seed=seed),
            ds.train_test_split(train_size=0.5, shuffle=False),
        )

    same(snippet)


def test_unseeded_shuffle_follows_numpy_global_seed():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": list(range(20))})
        np.random.seed(5)
        first = ds.shuffle()["x"]
        split = ds.train_test_split(test_size=0.25)
        return first, split, float(np.random.random())

    same(snippet)


@pytest.mark.parametrize("seed", [0, 3])
def test_stratified_split_picks_the_same_rows(seed):
    def snippet(lib):
        labels = [0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 1, 1, 0, 2, 2, 0]
        ds = lib.Dataset.from_dict(
            {"x": list(range(16)), "y": labels},
            features=lib.Features({"x": lib.Value("int64"), "y": lib.ClassLabel(num_classes=3)}),
        )
        return ds.train_test_split(test_size=0.4, seed=seed, stratify_by_column="y")

    same(snippet)


@pytest.mark.parametrize(
    "bad",
    [
        {"labels": [0, 0, 0, 1], "test_size": 0.5},  # a class with one member
        {"labels": [0, 0, 1, 1, 2, 2], "test_size": 2},  # a split smaller than the classes
        {"labels": [0, 1, 0, 1], "test_size": 0.5, "column": "x"},  # not a ClassLabel
        {"labels": [0, 1, 0, 1], "test_size": 0.5, "shuffle": False},
    ],
)
def test_stratified_split_rejects_what_datasets_rejects(bad):
    def snippet(lib):
        ds = lib.Dataset.from_dict(
            {"x": list(range(len(bad["labels"]))), "y": bad["labels"]},
            features=lib.Features({"x": lib.Value("int64"), "y": lib.ClassLabel(num_classes=3)}),
        )
        return ds.train_test_split(
            test_size=bad["test_size"],
            stratify_by_column=bad.get("column", "y"),
            shuffle=bad.get("shuffle", True),
            seed=0,
        )

    same_error(snippet)


@pytest.mark.parametrize(
    "sizes", [{"test_size": 1.5}, {"test_size": 0}, {"train_size": 0.7, "test_size": 0.6}]
)
def test_split_size_errors(sizes):
    same_error(lambda lib: lib.Dataset.from_dict({"x": list(range(10))}).train_test_split(**sizes))


def test_dataset_dict_shuffle_seeds():
    def snippet(lib):
        dd = lib.DatasetDict({"a": lib.Dataset.from_dict({"x": list(range(9))}), "b": base(lib)})
        return dd.shuffle(seeds={"a": 1, "b": 2}), dd.shuffle(seed=4), dd.shuffle(seeds=4)

    same(snippet)


# ------------------------------------------------------------------------------ errors
def test_error_types_match():
    same_error(lambda lib: lib.ClassLabel(names=["a"]).str2int(1))
    same_error(lambda lib: lib.ClassLabel(names=["a"]).int2str(None))
    # jaxfeed raises when the DatasetDict is built, `datasets` at its first use: same type.
    same_error(lambda lib: lib.DatasetDict({"train": None}).num_rows)
    same_error(lambda lib: lib.ClassLabel(names=["a"]).int2str(3))
    same_error(lambda lib: base(lib).sort("nope"))
    same_error(lambda lib: base(lib).shard(2, 2))


def test_the_snippets_compare_types_not_just_values():
    hf, jf = run_both(lambda lib: np.int32(1))
    assert norm(hf) == norm(jf) and norm(np.int64(1)) != norm(np.int32(1))
    assert norm(np.array([1], np.int32)) != norm(np.array([1], np.int64))
