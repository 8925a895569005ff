"""Differential tests: map's behaviours, feature types, nulls and media vs `datasets`."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa
import pytest

from datasets_diff import datasets, jaxfeed, same, same_error


def labelled(lib):
    feats = lib.Features(
        {
            "x": lib.Value("int32"),
            "tags": lib.List(lib.ClassLabel(names=["a", "b", "c"])),
            "y": lib.ClassLabel(names=["neg", "pos"]),
        }
    )
    return lib.Dataset.from_dict(
        {"x": [1, 2, 3, 4], "tags": [[0, 1], [2], [], [1, 1]], "y": [0, 1, 1, 0]}, features=feats
    )


# ------------------------------------------------------------------------------ map
def test_map_keeps_input_features_and_infers_new_ones():
    def snippet(lib):
        ds = labelled(lib)
        return ds.map(
            lambda r: {
                "x": r["x"] + 1,
                "tags": r["tags"][::-1],
                "v": np.arange(3, dtype=np.float32),
                "m": np.ones((2, 2)),
                "s": np.float32(1.5),
                "t": np.str_("hi"),
                "i": np.int16(3),
            }
        )

    same(snippet)


def test_map_numpy_format_stores_numpy_scalars():
    def snippet(lib):
        ds = labelled(lib).with_format("numpy")
        return (
            ds.map(lambda r: {"x2": r["x"] * 2, "y": r["y"], "name": np.str_("n")}),
            ds.map(lambda b: {"x": b["x"] * 2}, batched=True, batch_size=3),
        )

    same(snippet)


def test_map_try_original_type():
    def snippet(lib):
        ds = labelled(lib)
        fn = lambda b: {"x": [v + 1 for v in b["x"]]}  # noqa: E731
        return (
            ds.map(fn, batched=True).features,
            ds.map(fn, batched=True, try_original_type=False).features,
        )

    same(snippet)


@pytest.mark.parametrize(
    "remove", [None, ["x"], ["x", "y"], ["tags", "x", "y"], "y"], ids=lambda r: str(r)
)
def test_map_remove_columns_rule(remove):
    def snippet(lib):
        ds = labelled(lib)
        return (
            ds.map(lambda r: {"y": 1 - r["y"], "new": r["x"]}, remove_columns=remove),
            ds.map(lambda r: {"x": r["x"]}, remove_columns=remove),
            ds.map(lambda b: {"z": b["x"]}, batched=True, remove_columns=remove),
        )

    same(snippet)


def test_map_returning_empty_dict_or_none():
    def snippet(lib):
        ds = labelled(lib)
        return (
            ds.map(lambda r: {}),
            ds.map(lambda r: None),
            ds.map(lambda r: None, remove_columns="x"),
        )

    same(snippet)


def test_map_with_indices_input_columns_fn_kwargs_and_row_count_change():
    def snippet(lib):
        ds = labelled(lib)
        return (
            ds.map(
                lambda x, i, k: {"z": x * k + i},
                input_columns="x",
                with_indices=True,
                fn_kwargs={"k": 10},
            ),
            ds.map(
                lambda b: {"x": [v for v in b["x"] for _ in range(2)]},
                batched=True,
                remove_columns=ds.column_names,
            ),
        )

    same(snippet)


def test_map_drop_last_batch():
    same(
        lambda lib: labelled(lib).map(lambda b: b, batched=True, batch_size=3, drop_last_batch=True)
    )


def test_map_and_filter_async_functions():
    async def add(row):
        await asyncio.sleep(0)
        return {"x10": row["x"] * 10}

    async def keep(row):
        await asyncio.sleep(0)
        return row["x"] % 2 == 0

    async def add_batch(batch):
        await asyncio.sleep(0)
        return {"n": [len(t) for t in batch["tags"]]}

    def snippet(lib):
        ds = labelled(lib)
        return ds.map(add), ds.filter(keep), ds.map(add_batch, batched=True, batch_size=3)

    same(snippet)


def test_map_tables_on_arrow_and_pandas_formats():
    def snippet(lib):
        ds = labelled(lib)
        on_arrow = ds.with_format("arrow").map(
            lambda t: t.append_column("x2", pa.compute.multiply(t["x"], 2)), batched=True
        )
        kinds = []

        def on_pandas_fn(df):
            kinds.append(type(df).__name__)
            return df.assign(x3=df["x"] * 3)

        on_pandas = ds.with_format("pandas").map(on_pandas_fn, batched=True, batch_size=2)
        per_row = ds.with_format("arrow").map(lambda t: t.select(["x"]))
        return (
            on_arrow.with_format(None),
            on_pandas.with_format(None),
            kinds,
            per_row.with_format(None),
        )

    same(snippet)


def test_map_keep_in_memory_and_cache_file_name(tmp_path):
    def snippet(lib):
        ds = labelled(lib)
        path = tmp_path / f"{lib.__name__}.arrow"
        out = ds.map(lambda r: {"z": r["x"] * 2}, cache_file_name=str(path))
        mem = ds.map(lambda r: {"z": r["x"] * 3}, keep_in_memory=True)
        return out, mem, path.is_file()

    same(snippet)


def test_map_into_an_integer_array_column_keeps_it_only_for_exact_values():
    def snippet(lib):
        ds = lib.Dataset.from_dict(
            {"img": np.full((3, 2, 2), 200, np.uint8)},
            features=lib.Features({"img": lib.Array2D((2, 2), "uint8")}),
        ).with_format("numpy")
        scaled = ds.map(lambda b: {"img": b["img"].astype(np.float32) / 255}, batched=True)
        halved = ds.map(lambda b: {"img": b["img"].astype(np.float32) / 2}, batched=True)
        return scaled.features, halved.features, halved[0]["img"].tolist()

    same(snippet)


def test_map_with_features_and_dataset_dict_map():
    def snippet(lib):
        ds = labelled(lib)
        feats = lib.Features({**ds.features, "z": lib.Value("float16")})
        dd = lib.DatasetDict({"a": ds, "b": ds.select([1])})
        return ds.map(lambda r: {"z": r["x"] / 2}, features=feats), dd.map(lambda r: {"w": 1})

    same(snippet)


# ------------------------------------------------------------------------------ features
def test_new_feature_types_store_and_read_like_datasets():
    def snippet(lib):
        feats = lib.Features(
            {
                "big": lib.LargeList(lib.Value("int64")),
                "js": lib.Json(),
                "tr": lib.Translation(languages=["fr", "en"]),
                "tv": lib.TranslationVariableLanguages(languages=["en", "fr", "de"]),
                "id": lib.Value("string", id="identifier"),
                "words": lib.Array2D((1, 2), dtype="string"),
            }
        )
        ds = lib.Dataset.from_dict(
            {
                "big": [[1, 2], []],
                "js": [{"a": 1, "b": [1, "x"]}, [1, None]],
                "tr": [{"en": "cat", "fr": "chat"}, {"en": "dog", "fr": "chien"}],
                "tv": [{"en": "cat", "fr": ["chatte", "chat"]}, {"de": "Hund"}],
                "id": ["p", "q"],
                "words": [[["a", "b"]], [["c", "d"]]],
            },
            features=feats,
        )
        return ds, ds.features, ds.data.schema.field("big").type == pa.large_list(pa.int64())

    same(snippet)


def test_sequence_is_list_and_dict_sequences():
    def snippet(lib):
        return (
            lib.Sequence(lib.Value("int32")) == lib.List(lib.Value("int32")),
            repr(lib.Sequence(lib.Value("int32"), length=2)),
            repr(lib.Sequence({"a": lib.Value("int8")})),
            lib.Features.from_dict(
                {"s": {"_type": "Sequence", "feature": {"_type": "Value", "dtype": "int32"}}}
            ),
            lib.LargeList(lib.Value("int8")) == lib.List(lib.Value("int8")),
        )

    same(snippet)


def test_encode_decode_example():
    def snippet(lib):
        label = lib.ClassLabel(names=["a", "b"])
        return (
            label.encode_example("b"),
            label.encode_example(1),
            lib.Value("int32").encode_example(np.int64(3)),
            lib.Value("float32").encode_example("2.5"),
            lib.Value("string").encode_example(5),
            lib.Json().encode_example({"k": [1, 2]}),
            lib.Json().decode_example('{"k": [1, 2]}'),
            lib.TranslationVariableLanguages(languages=["en", "fr"]).encode_example(
                {"en": "a", "fr": ["c", "b"]}
            ),
            lib.Image.dtype,
            sorted(lib.Image().encode_example(np.zeros((2, 2), np.uint8))),
            lib.Image().decode_example(lib.Image().encode_example(np.full((2, 3), 7, np.uint8))),
            label.cast_storage(pa.array(["b", "a", None])),
            label.cast_storage(pa.array([1, 0], pa.int32())),
        )

    same(snippet)
    same_error(lambda lib: lib.ClassLabel(names=["a"]).encode_example(3))
    same_error(lambda lib: lib.ClassLabel(names=["a"]).cast_storage(pa.array([5])))


# ------------------------------------------------------------------------------ nulls
def test_nulls_in_array_and_class_label_columns():
    def snippet(lib):
        feats = lib.Features(
            {"a": lib.Array2D((1, 2), "int32"), "y": lib.ClassLabel(names=["n", "p"])}
        )
        ds = lib.Dataset.from_dict(
            {"a": [[[1, 2]], None, [[5, 6]]], "y": [1, None, 0]}, features=feats
        )
        return ds, ds.data.column("a").null_count, ds.data.column("y").null_count

    same(snippet)


def test_jax_format_refuses_missing_values_naming_column_and_row():
    feats = jaxfeed.Features(
        {"a": jaxfeed.Array2D((1, 2), "int32"), "y": jaxfeed.ClassLabel(names=["n", "p"])}
    )
    ds = jaxfeed.Dataset.from_dict(
        {"a": [[[1, 2]], [[3, 4]], None], "y": [1, None, 0]}, features=feats
    )
    jx = ds.with_format("jax")
    with pytest.raises(ValueError, match=r"column 'y', row 1: the value is missing"):
        jx.select_columns("y")[:]
    with pytest.raises(ValueError, match=r"column 'a', row 2: the value is missing"):
        jx.select_columns("a")[2]
    assert int(jx[0]["y"]) == 1  # rows without a missing value still read


# ------------------------------------------------------------------------------ media
def test_pil_image_from_a_file_keeps_its_path_and_bytes(tmp_path):
    import PIL.Image

    path = tmp_path / "a.jpg"
    PIL.Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).save(path, quality=50)

    def snippet(lib):
        ds = lib.Dataset.from_dict(
            {"img": [PIL.Image.open(path)]}, features=lib.Features({"img": lib.Image()})
        )
        stored = ds.data.column("img").to_pylist()[0]
        return stored["path"], ds[0]["img"]

    same(snippet)
    ds = jaxfeed.Dataset.from_dict({"img": [PIL.Image.open(path)]})
    assert ds.data.column("img").to_pylist()[0]["bytes"] == path.read_bytes()  # not re-encoded


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_wide_integer_images_are_lossless(dtype):
    pixels = (np.arange(12).reshape(3, 4) * 4000).astype(dtype)

    def snippet(lib):
        ds = lib.Dataset.from_dict({"img": [pixels]}, features=lib.Features({"img": lib.Image()}))
        return ds.with_format("numpy")[0]["img"], ds[0]["img"].mode

    out = same(snippet)
    np.testing.assert_array_equal(out[0], pixels)


def test_pandas_format_decodes_images_and_keeps_array_shapes():
    def snippet(lib):
        feats = lib.Features({"img": lib.Image(), "arr": lib.Array2D((2, 2), "int64")})
        ds = lib.Dataset.from_dict(
            {"img": [np.zeros((2, 3), np.uint8)], "arr": [[[1, 2], [3, 4]]]}, features=feats
        )
        df = ds.with_format("pandas")[:]
        return type(df["img"][0]).__name__.endswith("ImageFile") or hasattr(
            df["img"][0], "mode"
        ), df["arr"][0].shape

    same(snippet)


def test_numpy_and_datasets_agree_on_uint8_images():
    def snippet(lib):
        ds = lib.Dataset.from_dict(
            {"img": [np.full((2, 2, 3), 9, np.uint8)] * 2},
            features=lib.Features({"img": lib.Image()}),
        )
        return ds.with_format("numpy")[:]["img"], ds.with_format("numpy")[0]["img"]

    same(snippet)


def test_features_of_files_written_by_either_library_are_read_by_the_other(tmp_path):
    hf = labelled(datasets)
    hf.to_parquet(tmp_path / "hf.parquet")
    back = jaxfeed.Dataset.from_parquet(str(tmp_path / "hf.parquet"))
    assert back.features.to_dict() == jaxfeed.Features.from_dict(hf.features.to_dict()).to_dict()
    labelled(jaxfeed).to_parquet(tmp_path / "jf.parquet")
    again = datasets.Dataset.from_parquet(
        str(tmp_path / "jf.parquet"), cache_dir=str(tmp_path / "c")
    )
    assert again.features == hf.features


def test_imagefolder_with_metadata_csv_joins_the_metadata(tmp_path):
    import PIL.Image

    (tmp_path / "train").mkdir()
    for i in range(3):
        PIL.Image.fromarray(np.full((2, 2, 3), i * 40, np.uint8)).save(
            tmp_path / "train" / f"{i}.png"
        )
    (tmp_path / "train" / "metadata.csv").write_text(
        "file_name,caption,score\n2.png,c,3\n0.png,a,1\n1.png,b,2\n"
    )

    def snippet(lib):
        kwargs = {"cache_dir": str(tmp_path / "cache")} if lib is datasets else {}
        dd = lib.load_dataset("imagefolder", data_dir=str(tmp_path), **kwargs)
        rows = sorted(dd["train"], key=lambda r: r["caption"])
        return (
            list(dd),
            dd["train"].column_names,
            [(r["caption"], r["score"], r["image"]) for r in rows],
        )

    same(snippet)
