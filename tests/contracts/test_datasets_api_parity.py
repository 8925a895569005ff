"""Differential tests of the last mile of `datasets` parity: the module helpers, the
missing names and the behaviour items, each run on `datasets` 5.2 and on jaxfeed and compared
(values, types, features; see ``datasets_diff``). Refusals are in ``test_datasets_api_refusals.py``.
"""

from __future__ import annotations

import json
import wave

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from datasets.distributed import split_dataset_by_node as split_by_node

from datasets_diff import datasets, jaxfeed, norm, same, same_error


def same_message(snippet) -> None:
    """Both raise the same type, and jaxfeed's message holds `datasets`' (its last period off)."""
    hf, jf = same_error(snippet)
    assert str(hf).rstrip(".") in str(jf), f"\njaxfeed:  {jf}\ndatasets: {hf}"


class ArrayLike:
    """An object numpy reads through ``__array__`` (as jax and torch arrays are)."""

    def __init__(self, values):
        self.values = values

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)


# ------------------------------------------------------------------------------ module helpers
def test_progress_caching_logging_split_helpers():
    def snippet(lib):
        lib.enable_progress_bars()
        on = lib.is_progress_bar_enabled()
        lib.disable_progress_bars()
        lib.logging.set_verbosity_error()
        error = lib.logging.get_verbosity()
        lib.logging.set_verbosity_info()
        info = lib.logging.get_verbosity()
        lib.logging.set_verbosity_warning()
        lib.disable_caching()
        caching_off = lib.is_caching_enabled()
        lib.enable_caching()
        dd = lib.DatasetDict({"train": lib.Dataset.from_dict({"x": [1]})})
        return (
            on,
            lib.is_progress_bar_enabled(),
            (error, info, lib.logging.get_verbosity(), lib.logging.WARNING),
            (caching_off, lib.is_caching_enabled()),
            [str(s) for s in (lib.Split.TRAIN, lib.Split.TEST, lib.Split.VALIDATION)],
            repr(lib.Split.TEST),
            repr(lib.NamedSplit("extra")),
            lib.Split.TRAIN == "train",
            dd[lib.Split.TRAIN]["x"][:],
        )

    same(snippet)


def test_dataset_split_and_config_names(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for split in ("train", "test"):
        (flat / f"{split}.csv").write_text("x\n1\n")
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    for name in ("a-train.jsonl", "a-test.jsonl", "b-train.jsonl"):
        (hub / "data" / name).write_text('{"x": 1}\n')
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: first\n  data_files:\n"
        "  - split: train\n    path: data/a-train.jsonl\n  - split: test\n    path: data/a-test.jsonl\n"
        "- config_name: second\n  data_files: data/b-train.jsonl\n---\n"
    )

    def snippet(lib):
        return (
            lib.get_dataset_split_names(str(flat)),
            lib.get_dataset_config_names(str(flat)),
            lib.get_dataset_config_names(str(hub)),
            lib.get_dataset_split_names(str(hub), "first"),
            lib.get_dataset_split_names(str(hub), "second"),
            lib.get_dataset_split_names("csv", data_files={"a": str(flat / "train.csv")}),
        )

    same(snippet)


# ------------------------------------------------------------------------------ missing names
def test_classlabel_dtype_and_names_as_an_array():
    same(lambda lib: (lib.ClassLabel(names=["a"]).dtype, lib.ClassLabel(names=["a", "b"]).names))
    same_error(lambda lib: lib.ClassLabel(names=np.array(["a", "b"])))


def test_audio_arguments_as_datasets_orders_them():
    def snippet(lib):
        positional = lib.Audio(16000, False, 2, 0)
        return (
            positional.sampling_rate,
            positional.decode,
            positional.num_channels,
            positional.stream_index,
            lib.Audio.dtype,
            lib.Audio(num_channels=1).num_channels,
            lib.Features({"a": positional, "b": lib.Audio(), "c": lib.Image(decode=False)}),
            repr(lib.Audio(num_channels=2)),
        )

    same(snippet)


def _stereo_wav(path, frames=400, rate=8000):
    left = (np.sin(np.arange(frames) / 5) * 10000).astype(np.int16)
    right = (left // 2).astype(np.int16)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(2)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(np.stack([left, right], axis=1).tobytes())
    return left / 32768, right / 32768


def test_audio_num_channels_decodes(tmp_path):
    pytest.importorskip("soundfile")
    left, right = _stereo_wav(tmp_path / "s.wav")
    path = str(tmp_path / "s.wav")

    def decoded(feature):
        ds = jaxfeed.Dataset.from_dict({"a": [path]}, features=jaxfeed.Features({"a": feature}))
        return ds.with_format("numpy")[0]["a"]["array"]

    mixed = (left + right) / 2
    np.testing.assert_allclose(decoded(jaxfeed.Audio()), mixed, atol=1e-4)  # `datasets`' "array"
    np.testing.assert_allclose(decoded(jaxfeed.Audio(num_channels=1)), mixed, atol=1e-4)
    both = decoded(jaxfeed.Audio(num_channels=2, mono=False))
    assert both.shape == (2, 400)
    np.testing.assert_allclose(both[1], right, atol=1e-4)
    one = decoded(jaxfeed.Audio(num_channels=1, mono=False))
    assert one.shape == (1, 400)
    with pytest.raises(ValueError, match="num_channels must be None, 1 or 2"):
        jaxfeed.Audio(num_channels=3)
    with pytest.raises(ValueError, match="stream_index=1"):
        jaxfeed.Audio(stream_index=1)


def test_iterable_batch_with_and_without_by_column():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": list(range(7)), "k": [0, 0, 1, 1, 1, None, 2]})
        it = ds.to_iterable_dataset()
        return (
            list(it.batch(3)),
            list(it.batch(batch_size=3, drop_last_batch=True)),
            list(it.batch(by_column="k")),
            list(it.batch(2, by_column=["k"])),
            it.batch(by_column="k").features,
        )

    same(snippet)
    same_error(lambda lib: lib.Dataset.from_dict({"x": [1]}).to_iterable_dataset().batch())


def test_from_readers_take_split(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,a\n2,b\n")
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "a.parquet")
    cache = str(tmp_path / "cache")

    def snippet(lib):
        read = (
            lib.Dataset.from_csv(str(tmp_path / "a.csv"), split="test", cache_dir=cache),
            lib.Dataset.from_csv(str(tmp_path / "a.csv"), cache_dir=cache),
            lib.Dataset.from_json(str(tmp_path / "a.jsonl"), split="validation", cache_dir=cache),
            lib.Dataset.from_parquet(str(tmp_path / "a.parquet"), split="x", cache_dir=cache),
            lib.Dataset.from_dict({"x": [1]}, split="train"),
            lib.Dataset.from_list([{"x": 1}], split="test"),
            lib.Dataset.from_pandas(pd.DataFrame({"x": [1]}), split="test"),
        )
        plain = lib.Dataset.from_dict({"x": [1]})
        return read, [str(d.split) for d in read], plain.split, str(read[0].select([0]).split)

    same(snippet)


def test_split_names_of_dataset_dict_readers_and_load_dataset(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n2\n")
    files = {"train": str(tmp_path / "a.csv"), "test": str(tmp_path / "a.csv")}

    def snippet(lib):
        cache = str(tmp_path / lib.__name__)
        read = lib.DatasetDict.from_csv(files, cache_dir=cache)
        loaded = lib.load_dataset("csv", data_files=files, cache_dir=cache)
        picked = [
            lib.load_dataset("csv", data_files=files, split=s, cache_dir=cache)
            for s in ("train[:1]", "train+test")
        ]
        return (
            read,
            {k: str(v.split) for k, v in read.items()},
            {k: str(v.split) for k, v in loaded.items()},
            [(p, str(p.split)) for p in picked],
        )

    same(snippet)


def test_split_and_cache_files_after_save_to_disk(tmp_path):
    def snippet(lib):
        folder = tmp_path / lib.__name__
        lib.Dataset.from_dict({"x": [1, 2]}, split="test").save_to_disk(str(folder / "a"))
        lib.Dataset.from_dict({"x": [1, 2]}).save_to_disk(str(folder / "b"), num_shards=2)
        a, b = (lib.load_from_disk(str(folder / n)) for n in ("a", "b"))
        files = [f["filename"] for f in b.cache_files]
        return (
            str(a.split),
            b.split,
            [f.rsplit("/", 1)[-1] for f in files],
            all(f.startswith(str(folder)) for f in files),
            lib.load_from_disk(str(folder / "a"), keep_in_memory=True).cache_files,
        )

    same(snippet)


def test_from_json_and_parquet_map_the_cache(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "a.parquet")

    def snippet(lib):
        cache = tmp_path / lib.__name__
        out = []
        for ds in (
            lib.Dataset.from_json(str(tmp_path / "a.jsonl"), cache_dir=str(cache)),
            lib.Dataset.from_parquet(str(tmp_path / "a.parquet"), cache_dir=str(cache)),
        ):
            files = [f["filename"] for f in ds.cache_files]
            out.append((ds, len(files), all(f.startswith(str(cache)) for f in files)))
        in_memory = lib.Dataset.from_json(str(tmp_path / "a.jsonl"), keep_in_memory=True)
        return out, in_memory.cache_files

    same(snippet)


def test_map_and_filter_with_rank():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2, 3]})
        return (
            ds.map(lambda r, rank: {"r": rank}, with_rank=True),
            ds.map(lambda r, i, rank: {"i": i, "r": rank}, with_indices=True, with_rank=True),
            ds.map(lambda b, rank: {"n": [rank] * len(b["x"])}, batched=True, with_rank=True),
            ds.filter(lambda r, rank: rank is None and r["x"] > 1, with_rank=True),
        )

    same(snippet)


_RANKS_ON_DATASETS = """
import json
import datasets

datasets.disable_progress_bars()


def rank_and_index(batch, indices, rank):
    return {"r": [rank] * len(indices), "i": indices}


ds = datasets.Dataset.from_dict({"x": [1, 2, 3, 4]})
out = ds.map(rank_and_index, with_indices=True, with_rank=True, batched=True, batch_size=1, num_proc=2)
print(json.dumps([out.features.to_dict(), out.to_dict()]))
"""


def test_map_with_rank_over_processes():
    """`datasets` runs in a fresh interpreter (it forks its workers: never from a process running
    JAX); jaxfeed spawns its 2 workers once. Batches of one row: both cut the same 2 shards."""
    import subprocess
    import sys

    hf = subprocess.Popen(  # runs while jaxfeed's workers start
        [sys.executable, "-c", _RANKS_ON_DATASETS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ds = jaxfeed.Dataset.from_dict({"x": [1, 2, 3, 4]})
    out = ds.map(
        _rank_and_index, with_indices=True, with_rank=True, batched=True, batch_size=1, num_proc=2
    )
    stdout, stderr = hf.communicate(timeout=120)
    assert hf.returncode == 0, stderr
    hf_features, hf_rows = json.loads(stdout.strip().splitlines()[-1])
    assert hf_rows == {"x": [1, 2, 3, 4], "r": [0, 0, 1, 1], "i": [0, 1, 2, 3]}
    assert out.to_dict() == hf_rows
    assert datasets.Features.from_dict(hf_features).to_dict() == json.loads(
        json.dumps(datasets.Features.from_dict(out.features.to_dict()).to_dict())
    )


def _rank_and_index(batch, indices, rank):
    return {"r": [rank] * len(indices), "i": indices}


def test_pyarrow_format_alias():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2]}).with_format("pyarrow")
        return ds.format["type"], ds[:], type(ds[0]).__name__

    same(snippet)


# ------------------------------------------------------------------------------ map behaviour
@pytest.mark.parametrize("fmt", ["arrow", "pandas"])
def test_map_refuses_multi_row_tables_per_row(fmt):
    def make(lib):
        return lib.Dataset.from_dict({"x": [1, 2]}).with_format(fmt)

    table = pa.table({"y": [1, 2]}) if fmt == "arrow" else pd.DataFrame({"y": [1, 2]})
    same_message(lambda lib: make(lib).map(lambda r: table))
    one = pa.table({"y": [7]}) if fmt == "arrow" else pd.DataFrame({"y": [7]})
    same(lambda lib: make(lib).map(lambda r: one))


@pytest.mark.parametrize("batched", [False, True])
def test_map_returning_its_input_drops_removed_columns(batched):
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2], "y": [3, 4], "z": [5, 6]})
        return (
            ds.map(lambda r: r, remove_columns=["y"], batched=batched),
            ds.map(lambda r: dict(r), remove_columns="y", batched=batched),  # a copy: kept
            ds.with_format("numpy").map(lambda r: r, remove_columns=["y"], batched=batched),
        )

    same(snippet)


def test_map_on_formatted_columns_returns_the_new_columns():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2], "y": [3, 4]})
        ds.set_format("numpy", columns=["x"])
        out = ds.map(lambda r: {"z": r["x"] * 2})
        removed = ds.map(lambda r: {"w": 0}, remove_columns=["x"])
        return out.column_names, out.format["columns"], out[0], removed.format["columns"]

    same(snippet)


def test_map_rows_returning_empty_dicts():
    same(lambda lib: lib.Dataset.from_dict({"x": [1, 2]}).map(lambda r: {}))
    same_error(
        lambda lib: lib.Dataset.from_dict({"x": [1, 2, 3]}).map(
            lambda r: {} if r["x"] == 2 else {"y": r["x"]}
        )
    )


def test_map_stores_mixed_types_as_json():
    def mixed(row):
        return {"y": {1: 1, 2: "a", 3: [1, {"k": None}]}[row["x"]]}

    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2, 3]})
        out = ds.map(mixed)
        return out, out.to_dict(), out.to_list()

    same(snippet)
    for lib in (datasets, jaxfeed):  # refused by both (datasets: ArrowInvalid, a ValueError)
        with pytest.raises(ValueError):
            lib.Dataset.from_dict({"x": [1, 2]}).map(mixed, on_mixed_types=None)


def test_array_likes_are_values():
    def snippet(lib):
        return (
            lib.Dataset.from_dict({"x": [ArrayLike([1, 2]), ArrayLike([3])]}),
            lib.Dataset.from_dict(
                {"x": [ArrayLike([1, 2])]},
                features=lib.Features({"x": lib.List(lib.Value("int32"))}),
            ),
            lib.Dataset.from_dict(
                {"x": [ArrayLike([[1, 2]])]},
                features=lib.Features({"x": lib.Array2D((1, 2), "int32")}),
            ),
            lib.Dataset.from_dict({"x": [1, 2]}).map(lambda r: {"y": ArrayLike([r["x"], 0])}),
        )

    same(snippet)


def test_missing_array_values_are_nan_in_numpy():
    def snippet(lib):
        feats = lib.Features({"x": lib.Array2D((1, 2), "float32")})
        ds = lib.Dataset.from_dict({"x": [[[1.0, 2.0]], None, [[3.0, 4.0]]]}, features=feats)
        numpy = ds.with_format("numpy")
        return numpy[:]["x"], numpy[1]["x"], numpy[[2, 1]]["x"]

    same(snippet)


def test_pandas_format_of_array_columns():
    def snippet(lib):
        feats = lib.Features({"x": lib.Array2D((1, 2), "int32"), "n": lib.Value("int64")})
        ds = lib.Dataset.from_dict({"x": [[[1, 2]], [[3, 4]], [[5, 6]]], "n": [1, 2, 3]}, features=feats)  # fmt: skip
        frame = ds.with_format("pandas")[:]
        column = ds.with_format("pandas")["x"]
        return (
            frame["x"].to_numpy(),
            frame["x"][1],
            str(frame["x"].dtype),
            column.to_numpy(),
            ds.with_format("pandas")[1:3]["x"].to_numpy(),
        )

    same(snippet)
    # rows picked by iloc (`datasets` 5.2 fails there on int arrays: "cannot convert float NaN")
    feats = jaxfeed.Features({"x": jaxfeed.Array2D((1, 2), "int32")})
    ds = jaxfeed.Dataset.from_dict({"x": [[[1, 2]], [[3, 4]], [[5, 6]]]}, features=feats)
    picked = ds.with_format("pandas")[:].iloc[[2, 0]]["x"].to_numpy()
    assert picked.shape == (2, 1, 2) and picked.tolist() == [[[5, 6]], [[1, 2]]]


def test_image_folder_with_metadata_is_detected(tmp_path):
    from PIL import Image as PILImage

    folder = tmp_path / "pics"
    folder.mkdir()
    rows = []
    for i in range(3):
        PILImage.new("L", (2, 3), color=i * 40).save(folder / f"{i}.png")
        rows.append(json.dumps({"file_name": f"{i}.png", "caption": f"c{i}"}))
    (folder / "metadata.jsonl").write_text("\n".join(rows) + "\n")

    def snippet(lib):
        ds = lib.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / lib.__name__))
        return ds.features, ds.column_names, ds.num_rows, ds[1]["caption"], ds[1]["image"]

    same(snippet)


def test_contiguous_select_has_no_index_mapping():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2, 3, 4]})
        return [
            (s, s._indices is None)
            for s in (ds.select([1, 2]), ds.select(range(3)), ds.select([2, 1]), ds.select([3]))
        ]

    same(snippet)


def test_column_name_errors_follow_datasets():
    ds = lambda lib: lib.Dataset.from_dict({"x": [1], "y": [2]})  # noqa: E731
    same_message(lambda lib: ds(lib).rename_column("x", ""))
    same_message(lambda lib: ds(lib).rename_column("x", "y"))
    same_message(lambda lib: ds(lib).add_column("y", [3]))
    same_message(lambda lib: ds(lib).rename_columns({"x": "z", "y": "z"}))
    same_message(lambda lib: lib.concatenate_datasets([ds(lib), ds(lib)], axis=1))

    def none_split(lib):
        dd = lib.DatasetDict({"train": ds(lib)})
        dd["test"] = None  # jaxfeed refuses here, `datasets` at the first use
        return dd.num_rows

    same_message(none_split)


def test_encode_batch_gives_a_dict():
    def snippet(lib):
        feats = lib.Features(
            {
                "x": lib.Value("int32"),
                "c": lib.ClassLabel(names=["a", "b"]),
                "s": lib.Value("string"),
            }
        )
        return feats.encode_batch({"x": [1, 2], "c": ["b", 0], "s": ["p", 5]})

    same(snippet)


def test_features_decode_example_and_batch():
    import io

    from PIL import Image as PILImage

    buffer = io.BytesIO()
    PILImage.new("L", (2, 2), color=7).save(buffer, format="PNG")
    stored = {"bytes": buffer.getvalue(), "path": None}

    def snippet(lib):
        feats = lib.Features(
            {
                "i": lib.Image(),
                "raw": lib.Image(decode=False),
                "j": lib.Json(),
                "c": lib.ClassLabel(names=["a", "b"]),
                "l": lib.List(lib.Image()),
            }
        )
        row = {"i": stored, "raw": stored, "j": '{"a": [1]}', "c": 1, "l": [stored]}
        return (
            feats.decode_example(row),
            feats.decode_batch({k: [v, None] for k, v in row.items()}),
            feats.decode_column([stored], "i"),
            feats.encode_column(["b", 0], "c"),
        )

    same(snippet)


def test_undecoded_image_decode_example_raises():
    same_message(lambda lib: lib.Image(decode=False).decode_example({"bytes": b"", "path": None}))


def test_from_pandas_string_types():
    def snippet(lib):
        frame = pd.DataFrame({"s": ["a", "b"], "o": pd.Series(["a", None], dtype=object)})
        ds = lib.Dataset.from_pandas(frame)
        return ds, [str(f.type) for f in ds.data.schema]

    same(snippet)


def test_dataset_batch_take_skip_repeat():
    def snippet(lib):
        feats = lib.Features({"x": lib.Value("int32"), "k": lib.Value("int64")})
        ds = lib.Dataset.from_dict({"x": [1, 2, 3, 4, 5], "k": [0, 0, 1, None, 2]}, features=feats)
        return (
            ds.batch(2),
            ds.batch(2, drop_last_batch=True),
            ds.batch(by_column="k"),
            ds.select([4, 0, 1]).batch(2),
            ds.take(2),
            ds.skip(3),
            ds.repeat(2),
            ds.repeat(0),
            ds.take(2)._indices is None,
        )

    same(snippet)
    same_message(lambda lib: lib.Dataset.from_dict({"x": [1]}).repeat(None))


def test_features_flatten_and_progress_aliases():
    def snippet(lib):
        feats = lib.Features(
            {"a": {"b": lib.Value("int8"), "c": {"d": lib.Value("bool")}}, "e": lib.Image()}
        )
        lib.enable_progress_bar()
        on = lib.are_progress_bars_disabled()
        lib.disable_progress_bar()
        return feats.flatten(), feats.flatten(max_depth=1), on, lib.are_progress_bars_disabled()

    same(snippet)


# ------------------------------------------------------------------------------ streams
def test_iterable_cast_and_dict_columns():
    def snippet(lib):
        it = lib.Dataset.from_dict({"x": [1, 2], "s": ["a", "b"]}).to_iterable_dataset()
        dd = lib.IterableDatasetDict({"a": it})
        cast = it.cast(
            lib.Features({"x": lib.Value("int8"), "s": lib.ClassLabel(names=["a", "b"])})
        )
        return (
            it.num_columns,
            list(it.cast_column("x", lib.Value("float32"))),
            cast.features,
            list(cast),
            dd.column_names,
            dd.num_columns,
            {k: list(v) for k, v in dd.rename_columns({"s": "t"}).items()},
            {k: list(v) for k, v in dd.cast_column("x", lib.Value("float64")).items()},
        )

    same(snippet)


def test_to_iterable_dataset_num_shards_and_node_splits():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": list(range(10))})
        it = ds.to_iterable_dataset(num_shards=4)
        split = split_by_node if lib is datasets else lib.split_dataset_by_node
        return (
            it.num_shards,
            [[r["x"] for r in it.shard(2, i)] for i in range(2)],
            [[r["x"] for r in split(it, rank=i, world_size=2)] for i in range(2)],
            [[r["x"] for r in split(it.skip(3).take(4), rank=i, world_size=2)] for i in range(2)],
            [
                [
                    r["x"]
                    for r in split(ds.to_iterable_dataset().skip(1).take(5), rank=i, world_size=3)
                ]
                for i in range(3)
            ],
        )

    same(snippet)


def test_iterable_map_keeps_numpy_arrays():
    def snippet(lib):
        it = lib.Dataset.from_dict({"x": [1, 2, 3]}).to_iterable_dataset()
        arrays = it.map(lambda r: {"y": np.array([r["x"], 1], dtype=np.int32)})
        seen = arrays.map(lambda r: {"t": type(r["y"]).__name__, "d": str(r["y"].dtype)})
        batched = arrays.map(lambda b: {"n": [len(v) for v in b["y"]]}, batched=True, batch_size=2)
        return list(arrays), list(seen), list(batched), list(arrays.iter(batch_size=2))

    same(snippet)


def test_iterable_select_columns_and_plain_state_dict():
    def gen():
        yield from ({"a": i, "b": -i} for i in range(5))

    def snippet(lib):
        it = lib.IterableDataset.from_generator(gen)
        mapped = it.map(lambda r: {"c": r["a"] * 2})
        rows = lib.Dataset.from_dict({"x": list(range(6))}).to_iterable_dataset(num_shards=2)
        seen = []
        for i, row in enumerate(rows):
            seen.append(row["x"])
            if i == 2:
                state = rows.state_dict()
                break
        again = lib.Dataset.from_dict({"x": list(range(6))}).to_iterable_dataset(num_shards=2)
        again.load_state_dict(state)
        return (
            list(it.select_columns(["a"])),
            list(mapped.select_columns("c")),
            seen,
            [r["x"] for r in again],
        )

    same(snippet)


# ------------------------------------------------------------------------------ other methods
def test_set_format_from_format_after_set_transform():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"x": [1, 2]})
        ds.set_transform(lambda b: {"y": [v * 10 for v in b["x"]]})
        ds.set_format(**ds.format)
        numpy = lib.Dataset.from_dict({"x": [1, 2]}).with_format("numpy", columns=["x"])
        numpy.set_format(**numpy.format)
        return ds[0], ds.format["type"], numpy[:], numpy.format["type"]

    same(snippet)


def test_flatten_undecoded_image_and_to_pandas_json():
    def snippet(lib):
        image = lib.Dataset.from_dict(
            {"i": [{"bytes": b"12", "path": "p.png"}]},
            features=lib.Features({"i": lib.Image(decode=False)}),
        )
        js = lib.Dataset.from_dict(
            {"j": [{"a": 1}, [1, 2], None]}, features=lib.Features({"j": lib.Json()})
        )
        return image.flatten(), js.to_pandas(), next(iter(js.to_pandas(batched=True, batch_size=2)))

    same(snippet)


def test_add_item_new_and_all_null_columns_from_list_first_row():
    def snippet(lib):
        return (
            lib.Dataset.from_dict({"x": [1]}).add_item({"x": 2, "y": "a"}),
            lib.Dataset.from_dict({"x": [1], "y": [None]}).add_item({"x": 2, "y": "a"}),
            lib.Dataset.from_list([{"a": 1}, {"a": 2, "b": 3}]),
            lib.Dataset.from_list([{"a": 1, "b": None}, {"b": "x"}]),
        )

    same(snippet)


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([1, 2, -3], "string"),
        ([1.5, 2.0, 1e20, 0.1], "string"),
        ([True, False], "string"),
        (np.array([1.5, 2.0]), "string"),
        (["1.5", " 2 ", "1e3", "nan"], "float32"),
        (["0", "12", " -7 ", "1_000"], "int64"),
        ([1, "0"], "int64"),
    ],
    ids=["int-str", "float-str", "bool-str", "np-float-str", "str-float", "str-int", "mixed-int"],
)
def test_conversions_into_declared_values(values, dtype):
    same(
        lambda lib: lib.Dataset.from_dict(
            {"x": values}, features=lib.Features({"x": lib.Value(dtype)})
        )
    )


def test_conversions_that_fail_in_both():
    same_error(
        lambda lib: lib.Dataset.from_dict(
            {"x": ["2.5"]}, features=lib.Features({"x": lib.Value("int64")})
        )
    )
    same_error(
        lambda lib: lib.Dataset.from_dict(
            {"x": ["abc"]}, features=lib.Features({"x": lib.Value("float32")})
        )
    )


def test_int64_pixels_that_fit_are_stored():
    import warnings

    def snippet(lib):
        feats = lib.Features({"i": lib.Image()})
        gray = np.array([[3, 1], [200, 0]], dtype=np.int64)
        colour = np.arange(12, dtype=np.int64).reshape(2, 2, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # datasets warns that it downcasts
            ds = lib.Dataset.from_dict({"i": [gray, colour]}, features=feats)
        return ds.with_format("numpy")[0]["i"], ds.with_format("numpy")[1]["i"]

    same(snippet)


# ------------------------------------------------------------------------------ progress bars
def test_progress_bars_on_large_jobs(tmp_path, capfd):
    n = jaxfeed._base.settings.PROGRESS_MIN_ROWS

    def jobs(lib, where):
        ds = lib.Dataset.from_dict({"x": list(range(n))})
        ds.to_csv(str(where / "a.csv"))
        return [
            lambda: ds.map(lambda b: {"y": b["x"]}, batched=True, desc="Doubling"),
            lambda: ds.filter(lambda b: [True] * len(b["x"]), batched=True, desc="Keeping"),
            lambda: ds.save_to_disk(str(where / "saved")),
            lambda: ds.to_parquet(str(where / "a.parquet")),
            lambda: ds.to_csv(str(where / "b.csv")),
            lambda: lib.load_dataset(
                "csv", data_files=str(where / "a.csv"), cache_dir=str(where / "cache")
            ),
        ]

    shown = {}
    for lib in (datasets, jaxfeed):
        where = tmp_path / lib.__name__
        where.mkdir()
        lib.enable_progress_bars()
        try:
            work = jobs(lib, where)
            capfd.readouterr()
            shown[lib.__name__] = []
            for job in work:
                job()
                err = capfd.readouterr().err
                shown[lib.__name__].append("/s]" in err)  # a tqdm line
                titles = shown.setdefault(f"{lib.__name__} titles", [])
                titles += [t for t in ("Doubling", "Keeping") if t in err]
            lib.disable_progress_bars()
            for job in work[:2]:
                job()
                assert capfd.readouterr().err == "", lib.__name__
        finally:
            lib.disable_progress_bars()
    assert shown["jaxfeed"] == shown["datasets"] == [True] * 6
    assert shown["jaxfeed titles"] == shown["datasets titles"] == ["Doubling", "Keeping"]
    # small jobs stay quiet in jaxfeed (a bar appears past PROGRESS_MIN_ROWS rows)
    jaxfeed.enable_progress_bars()
    try:
        jaxfeed.Dataset.from_dict({"x": [1, 2]}).map(lambda r: {"y": 1})
        assert capfd.readouterr().err == ""
    finally:
        jaxfeed.disable_progress_bars()


def test_norm_sees_splits_as_strings():
    assert norm(jaxfeed.Split.TRAIN) == norm(datasets.Split.TRAIN)
