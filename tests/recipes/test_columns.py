"""Which columns a run learns from, without the command: free text against a category of
repeated values (issue 64.2); the columns an engine writes (64.3)."""

import pytest

from jaxfeed import Dataset
from jaxfeed.recipes.columns import choose_columns
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.text.text_columns import free_text, string_profile


def test_free_text_is_words_that_mostly_do_not_repeat():
    team = "Core Team <core@example.org>"
    half = [f"review {i} of a film" for i in range(20)] + [
        f"review {i} of a film" for i in range(20)
    ]
    ds = Dataset.from_dict({
        "review": [f"the film number {i} was good" for i in range(40)],  # unique: free text
        "maintainer": [team] * 28 + [f"Dev {i} <dev{i}@example.org>" for i in range(12)],
        "half": half,  # every value twice: half the rows repeat one, still free text
        "y": [0, 1] * 20,
    })  # fmt: skip
    assert free_text(ds, "review") and free_text(ds, "half")
    assert not free_text(ds, "maintainer")
    assert string_profile(ds, "half").repeated == 0.5
    assert string_profile(ds, "maintainer").why() == (
        "a category, not free text: 13 distinct values in 40 rows (68% of rows repeat a value; "
        "free text repeats in at most 50%)"
    )
    table = choose_columns(ds.select_columns(["maintainer", "y"]), None, "y")
    assert table.kind == "table" and table.inputs == ["maintainer"]
    assert table.notes == [
        f"columns: 'maintainer' is {string_profile(ds, 'maintainer').why()} (--text-column "
        "maintainer reads it as text)"
    ]
    assert choose_columns(ds, None, "y").inputs == ["review"]


def test_engine_columns_are_found_by_what_they_hold():
    """Lists of floats are arrays, lists of integers token ids (``input_ids`` before another
    list of integers), binary image files images; bytes that are no images are named (64.3)."""
    import io

    import PIL.Image
    import pyarrow as pa

    from jaxfeed import DatasetDict
    from jaxfeed.recipes.columns import read_image_bytes

    png = io.BytesIO()
    PIL.Image.new("RGB", (4, 4)).save(png, "PNG")
    ids = pa.array([[1, 2], [3]], pa.list_(pa.int32()))
    ds = Dataset.from_dict({"attention_mask": ids, "input_ids": ids, "y": [0, 1]})
    tokens = choose_columns(ds, None, "y")
    assert (tokens.kind, tokens.inputs) == ("tokens", ["input_ids"])
    assert tokens.excluded == [
        ("attention_mask", "lists of integers; the token ids are 'input_ids'")
    ]
    vectors = Dataset.from_dict({"e": [[0.5, 1.0], [1.5, 2.0]], "y": [0, 1]})
    assert choose_columns(vectors, None, "y").kind == "array"
    assert choose_columns(vectors, ["e"], "y").kind == "array"
    blobs = Dataset.from_dict({"blob": [b"\x00\x01", b"\x02"], "image": [png.getvalue()] * 2,
                               "y": [0, 1]})  # fmt: skip
    data, notes = read_image_bytes(DatasetDict({"train": blobs, "test": blobs}))
    assert notes == ["columns: 'image' holds image files (PNG) as bytes: read as images"]
    assert all(type(d.features["image"]).__name__ == "Image" for d in data.values())
    assert choose_columns(data["train"], None, "y").inputs == ["image"]
    with pytest.raises(ConfigError, match=r"'blob': bytes that are not images jaxfeed reads"):
        choose_columns(data["train"].select_columns(["blob", "y"]), None, "y")
