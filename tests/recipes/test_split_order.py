"""Issue 54, item 2: ``--task lm`` on a corpus put end to end keeps the file's order in train and
validation (blocks of consecutive lines), as run_clm groups after concatenating."""

from __future__ import annotations

import numpy as np
import pytest

from jaxfeed import Dataset
from jaxfeed.data.dataset import DatasetDict
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.data import choose_splits
from jaxfeed.recipes.kinds.registry import kind_for
from jaxfeed.recipes.run_data import load_run_data


@pytest.fixture(scope="module")
def numbered(tmp_path_factory):
    """A corpus of 300 lines, ``line I`` on line I (counting from 0), and its ``--task lm`` run
    data (the corpus put end to end)."""
    path = tmp_path_factory.mktemp("corpus") / "numbered.txt"
    path.write_text("".join(f"line {i}\n" for i in range(300)))
    return path, load_run_data(RunConfig(data=str(path), task="lm"), None, kind_for)


def _line_numbers(ds):
    return np.array([int(t.split()[1]) for t in ds["text"][:]])


def test_a_corpus_split_in_blocks_keeps_its_line_order(numbered):
    path, data = numbered
    numbers = {}
    for name in ("train", "eval"):
        numbers[name] = _line_numbers(getattr(data.splits, name))
        assert (np.diff(numbers[name]) > 0).all(), numbers[name][:8]  # the file's order
    assert numbers["train"][:4].tolist() == [0, 1, 2, 3]
    assert sorted([*numbers["train"], *numbers["eval"]]) == list(range(300))
    assert (np.diff(numbers["eval"]) > 1).sum() < 10  # a few blocks, not scattered lines
    assert "rows, in " in data.splits.note and "blocks of consecutive rows, the order kept" in (
        data.splits.note
    )
    # rows of a table (one text each, --sample-by line) are still split at random
    lines = load_run_data(RunConfig(data=str(path), task="lm", sample_by="line"), None, kind_for)
    assert "at random" in lines.splits.note


def test_a_corpus_splits_rows_name_the_lines_they_hold(numbered):
    """Issue 65, item 16: the rows a corpus's split records are its block split's, so that
    ``Splits.data_row`` (the row an error names) gives the line a train or validation row holds,
    not the row a random split of as many lines would have put there."""
    splits = numbered[1].splits
    for part, ds in (("train", splits.train), ("eval", splits.eval)):
        named = [splits.data_row(k, part) for k in range(ds.num_rows)]
        lines = _line_numbers(ds)
        assert named == [f"row {n} of the data (counting from 0, in its files)" for n in lines]


def test_a_split_that_cannot_be_stratified_says_why():
    """Item 11: a class with a single row makes the split random; the note says so."""
    ds = Dataset.from_dict({"x": list(range(21)), "label": [0] * 10 + [1] * 10 + [2]})
    note = choose_splits(DatasetDict({"train": ds}), "train", None, 0.2, "label", 0).note
    assert "(5 rows, at random, not stratified: 1 class has a single row, seed 0)" in note
    ds = Dataset.from_dict({"x": list(range(20)), "label": list(range(10)) * 2})
    note = choose_splits(DatasetDict({"train": ds}), "train", None, 0.2, "label", 0).note
    assert "at random, not stratified: fewer validation rows than the 10 classes" in note
