"""Issue 42 item 17: a CSV or JSON Lines cell larger than Arrow's read block (~8 MB here) is read
with a larger block, in the cache's conversion, in streaming and in ``Dataset.from_json``; a row
beyond the largest block is refused with the file and its line named."""

import json

import pytest

from jaxfeed import Dataset, load_dataset
from jaxfeed.data.formats import files as files_module

BIG = 9_000_000  # one cell over 8 MB


def _write(tmp_path, kind, size):
    big = "x" * size
    if kind == "csv":
        path = tmp_path / "big.csv"
        path.write_text(f"id,text\n1,short\n2,{big}\n3,end\n")
    else:
        path = tmp_path / "big.jsonl"
        rows = [{"id": 1, "text": "short"}, {"id": 2, "text": big}, {"id": 3, "text": "end"}]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_a_cell_over_8mb_is_read(tmp_path, kind):
    path = _write(tmp_path, kind, BIG)
    ds = load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "c"))
    assert ds["id"] == [1, 2, 3] and len(ds[1]["text"]) == BIG and ds[2]["text"] == "end"
    stream = load_dataset(kind, data_files=str(path), split="train", streaming=True)
    assert [(r["id"], len(r["text"])) for r in stream] == [(1, 5), (2, BIG), (3, 3)]
    if kind == "json":
        assert Dataset.from_json(str(path))["id"] == [1, 2, 3]


@pytest.mark.parametrize("kind", ["csv", "json"])
@pytest.mark.parametrize("streaming", [False, True])
def test_a_row_over_the_largest_block_names_the_file_and_line(
    tmp_path, monkeypatch, kind, streaming
):
    monkeypatch.setattr(files_module, "MAX_BLOCK_BYTES", 1 << 20)
    path = _write(tmp_path, kind, BIG)
    name, line = path.name.replace(".", r"\."), 3 if kind == "csv" else 2  # CSV: its header
    with pytest.raises(ValueError, match=rf"{kind} file .*{name}: line {line} \(9 MB\) is larger"):
        ds = load_dataset(
            kind,
            data_files=str(path),
            split="train",
            cache_dir=str(tmp_path / "c"),
            streaming=streaming,
        )
        list(ds)
