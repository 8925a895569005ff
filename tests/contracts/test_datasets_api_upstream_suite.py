"""Differential tests against `datasets` for the upstream tests that
``tools/upstream/run_datasets_suite.py`` found failing (issue 39, second round), each named after
the upstream test that shows it."""

from __future__ import annotations

import gc
import os

import pyarrow as pa

from datasets_diff import same

_MESSAGES = [
    {"role": "user", "content": "lights on"},
    {
        "role": "assistant",
        "tool_calls": [
            {"type": "function", "function": {"name": "light", "arguments": {"room": "hall"}}},
            {"type": "function", "function": {"name": "music", "arguments": {"playlist": "e"}}},
        ],
    },
]
_MIXED = {
    "mixed_type": [-1, 1, "foo"],
    "mix_struct_and_non_struct": [{"a": 0}, [0]],
    "mixed_dict_keys": [{"a": 0}, {"b": 0}, {"c": 0}],
    "mixed_dict_keys2": [[{"a": 0}, {"b": 0}], [{"c": 0}, {"d": 0}]],
    "nested": [{"a": 1, "b": [1, "x"]}, {"a": 2, "b": None}],
    "messages": _MESSAGES,
    "empty_struct": [{}],
    "plain": [{"a": 1}, None],
}


# upstream: test_arrow_dataset.py::MiscellaneousDatasetTest::test_from_dict_on_mixed_types
def test_from_dict_on_mixed_types_stores_json_where_types_mix():
    def snippet(lib):
        out = [
            lib.Dataset.from_dict({name: values}, on_mixed_types="use_json")
            for name, values in _MIXED.items()
        ]
        out.append(lib.Dataset.from_dict({"a": [{"a": 0}, {"b": 0}]}))  # default: one struct
        out.append(
            lib.Dataset.from_list([{"a": {"x": 1}}, {"a": {"y": 2}}], on_mixed_types="use_json")
        )
        return out

    same(snippet)


# upstream: test_arrow_dataset.py::BaseDatasetTest::test_map_on_mixed_types
def test_map_on_mixed_types_stores_json_at_the_mixed_paths():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"i": [0, 1]})
        return ds.map(lambda row: _MIXED, remove_columns=["i"])

    same(snippet)


# upstream: test_arrow_dataset.py::test_map_cases[False]
def test_map_rows_returning_fewer_keys_keep_values_changed_in_place():
    def snippet(lib):
        def f(x):
            x["a"]["c"] = -1 if x["a"]["b"] < 2 else x["a"]["b"]
            return dict(x) if x["a"]["b"] < 2 else {}

        ds = lib.Dataset.from_dict({"a": [{"b": 0}, {"b": 1}, {"b": 2}, {"b": 3}]})
        return ds.map(f)

    same(snippet)


# upstream: test_arrow_dataset.py::BaseDatasetTest::test_keep_features_after_loading_from_cache
def test_map_cache_file_name_lists_the_file_written(tmp_path):
    def snippet(lib):
        folder = tmp_path / lib.__name__
        ds = lib.Dataset.from_dict({"a": [1, 2, 3], "b": ["x", "y", "z"]})
        out = ds.map(lambda r: {"c": r["a"] * 2}, cache_file_name=str(folder / "one.arrow"))
        return out, [os.path.relpath(c["filename"], folder) for c in out.cache_files]

    same(snippet)


# upstream: test_arrow_dataset.py::BaseDatasetTest::test_pickle_after_many_transforms_on_disk
# (its on-disk dataset is `map(cache_file_name=...)` without a function)
def test_map_without_function_writes_and_removes_columns(tmp_path):
    def snippet(lib):
        folder = tmp_path / lib.__name__
        ds = lib.Dataset.from_dict({"a": [1, 2, 3], "b": ["x", "y", "z"]})
        copied = ds.map(cache_file_name=str(folder / "two.arrow"))
        return [
            (d, [os.path.relpath(c["filename"], folder) for c in d.cache_files])
            for d in (
                copied,
                ds.map(remove_columns=["a"]),
                ds.map(batched=True, remove_columns=["b"]),
                copied.map(remove_columns=["b"], cache_file_name=str(folder / "three.arrow")),
                ds.map(keep_in_memory=True),
            )
        ] + [  # a formatted batch comes back whole: remove_columns has nothing to remove
            (d.map(remove_columns=["a"]), d.map(cache_file_name=str(folder / f"{fmt}.arrow")))
            for fmt in ("arrow", "pandas", "numpy")
            for d in [ds.with_format(fmt)]
        ]

    same(snippet)


# upstream: test_arrow_dataset.py::BaseDatasetTest::test_filter_empty and
# test_pickle_after_many_transforms_on_disk (`_indices`, which code written for `datasets` reads)
def test_indices_is_datasets_one_column_view():
    def snippet(lib):
        ds = lib.Dataset.from_dict({"a": list(range(5))})
        empty = ds.filter(lambda r: False)
        picked = ds.map(lambda r: {"b": r["a"]}).select([1, 0])
        return (
            ds._indices is None,
            empty._indices.column_names,
            empty._indices == empty.filter(lambda r: False)._indices,
            picked._indices["indices"].to_pylist(),
            str(picked._indices.schema.field(0).type),
        )

    same(snippet)


def _arrow_bytes_after(make):
    """``make()`` and the Arrow memory it left allocated. The garbage collector is off meanwhile,
    so no earlier object's buffers are freed inside the window (a full ``gc.collect()`` first
    did the same, but took ~1 s a call in a test worker holding a large heap)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        before = pa.total_allocated_bytes()
        kept = make()
        return kept, pa.total_allocated_bytes() - before
    finally:
        if enabled:
            gc.enable()


# upstream: test_arrow_dataset.py::test_dataset_from_generator_keep_in_memory
def test_from_generator_cache_dir_memory_maps_its_rows(tmp_path):
    def rows():
        for i in range(3000):
            yield {"x": i, "s": f"row {i}"}

    def snippet(lib):
        cache = str(tmp_path / lib.__name__)
        out = []
        for keep in (False, True):
            ds, grew = _arrow_bytes_after(
                lambda keep=keep: lib.Dataset.from_generator(
                    rows, cache_dir=cache, keep_in_memory=keep
                )
            )
            out.append((ds, grew > 0, len(ds.cache_files)))
        return out

    same(snippet)


# upstream: test_arrow_dataset.py::test_dataset_from_csv_keep_in_memory (and
# test_dataset_dict.py::test_datasetdict_from_csv_keep_in_memory)
def test_from_csv_keep_in_memory_holds_rows_in_arrow_memory(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n" + "".join(f"{i},{i / 2}\n" for i in range(300)))

    def snippet(lib):
        cache = str(tmp_path / lib.__name__)
        out = []
        for keep in (False, True):
            ds, grew = _arrow_bytes_after(
                lambda keep=keep: lib.Dataset.from_csv(
                    str(tmp_path / "a.csv"), cache_dir=cache, keep_in_memory=keep
                )
            )
            dd, grew_dict = _arrow_bytes_after(
                lambda keep=keep: lib.DatasetDict.from_csv(
                    {"train": str(tmp_path / "a.csv")}, cache_dir=cache, keep_in_memory=keep
                )
            )
            out.append((ds, grew > 0, dd, grew_dict > 0))
        return out

    same(snippet)
