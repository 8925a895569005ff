"""Issue 54, item 2: ``--task lm`` on a corpus put end to end keeps the file's order in train and
validation (blocks of consecutive lines), as run_clm groups after concatenating."""

from __future__ import annotations

import numpy as np

from jaxfeed import Dataset
from jaxfeed.data.dataset import DatasetDict
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.data import choose_splits
from jaxfeed.recipes.kinds.registry import kind_for
from jaxfeed.recipes.run_data import load_run_data


def test_a_corpus_split_in_blocks_keeps_its_line_order(tmp_path):
    path = tmp_path / "numbered.txt"
    path.write_text("".join(f"line {i}\n" for i in range(300)))
    data = load_run_data(RunConfig(data=str(path), task="lm"), None, kind_for)
    numbers = {}
    for name in ("train", "eval"):
        texts = getattr(data.splits, name)["text"][:]
        numbers[name] = np.array([int(t.split()[1]) for t in texts])
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


def test_a_split_that_cannot_be_stratified_says_why():
    """Item 11: a class with a single row makes the split random; the note says so."""
    ds = Dataset.from_dict({"x": list(range(21)), "label": [0] * 10 + [1] * 10 + [2]})
    note = choose_splits(DatasetDict({"train": ds}), "train", None, 0.2, "label", 0).note
    assert "(5 rows, at random, not stratified: 1 class has a single row, seed 0)" in note
    ds = Dataset.from_dict({"x": list(range(20)), "label": list(range(10)) * 2})
    note = choose_splits(DatasetDict({"train": ds}), "train", None, 0.2, "label", 0).note
    assert "at random, not stratified: fewer validation rows than the 10 classes" in note
