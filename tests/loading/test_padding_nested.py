"""Issue 42 item 24: a nested ragged column (lists of lists of different lengths) given to
``Padding`` is refused with its column, row and inner lengths named, not numpy's "setting an
array element with a sequence"."""

import pytest

from jaxfeed import DataLoader, Dataset, Padding

ROWS = {"x": [[[1, 2], [3, 4]], [[5], [6, 7, 8]]], "y": [0, 1]}  # row 1's inner lists differ


@pytest.mark.parametrize("stream", [False, True])
def test_a_nested_ragged_column_is_named_with_its_row(stream):
    ds = Dataset.from_dict(ROWS)
    source = ds.to_iterable_dataset() if stream else ds
    loader = DataLoader(source, batch_size=2, padding=Padding(), columns=["x"])
    with pytest.raises(
        ValueError,
        match=r"column 'x', row 1: a list of lists of different "
        r"lengths \(\[1, 3\]\), a nested ragged column",
    ):
        next(iter(loader))


def test_rows_of_equal_inner_lengths_are_padded_on_their_first_axis():
    ds = Dataset.from_dict({"x": [[[1, 2], [3, 4]], [[5, 6]]]})
    batch = next(iter(DataLoader(ds, batch_size=2, padding=Padding())))
    assert batch["x"].shape == (2, 2, 2) and batch["attention_mask"].tolist() == [[1, 1], [1, 0]]
