"""Issue 42 item 19 (the tokenizer half) and its class: a tokenizer file or a JSON data file that
nests deeply or is not UTF-8 is refused with a ValueError naming the file, never a RecursionError,
a UnicodeDecodeError or a Rust panic."""

import os

import pytest

from jaxfeed import Dataset, load_dataset
from jaxfeed.text import load_tokenizer

TOKENIZER_FILES = {
    "nested.json": b"[" * 100_000 + b"]" * 100_000,
    "nested-model.json": b'{"model": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    "nested-lines.json": b'{"model": ' + b"[\n" * 5_000 + b"]\n" * 5_000 + b"}",
    "binary.json": bytes(range(256)) * 16,
    "utf16.json": '{"model": {}}'.encode("utf-16"),
    "latin1.json": '{"model": {"type": "BPE"}, "x": "\xe9"}'.encode("latin-1"),
    "bad-model.json": b'{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}',
}


@pytest.mark.parametrize("name", sorted(TOKENIZER_FILES))
def test_a_broken_tokenizer_file_is_named(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(TOKENIZER_FILES[name])
    with pytest.raises(ValueError, match=rf"{tmp_path}{os.sep}{name} is not a (valid )?tokenizer"):
        load_tokenizer(path)


DATA_FILES = {
    "deep.json": '{"x": ' + "[" * 50_000 + "]" * 50_000 + "}",  # one document, one line
    "deep-lines.json": '{"x": ' + "[\n" * 3_000 + "]\n" * 3_000 + "}",  # over many lines
    "deep-array.json": "[" * 50_000 + "]" * 50_000,
}


@pytest.mark.parametrize("how", ["load", "stream", "from_json"])
@pytest.mark.parametrize("name", sorted(DATA_FILES))
def test_a_deeply_nested_json_data_file_is_named(tmp_path, name, how):
    path = tmp_path / name
    path.write_text(DATA_FILES[name])
    with pytest.raises(ValueError, match=rf"{path}"):
        if how == "load":
            load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path))
        elif how == "stream":
            list(load_dataset("json", data_files=str(path), split="train", streaming=True))
        else:
            Dataset.from_json(str(path))
