"""Tables and folders in the recipes, without the command: categories, identifiers, overrides,
imputation, predict's inputs; an image folder of mixed modes."""

import numpy as np
import PIL.Image
import pytest

from jaxfeed import Dataset, load_dataset
from jaxfeed.recipes.columns import choose_columns
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.kinds.table import TableOptions, plan_table
from jaxfeed.recipes.serving.evaluate import _expand

ROWS = {
    "id": list(range(100, 130)),
    "user_id": [7 * i for i in range(30)],  # unique, named like an identifier
    "size": [float(i % 13) for i in range(30)],
    "floor": [i % 3 for i in range(30)],  # few integers: categories
    "year": [1950 + 3 * i for i in range(30)],  # unique integers, not an identifier
    "city": ["oslo", "rome", None] * 10,
    "name": [f"house {i}" for i in range(30)],  # unique text: an identifier
    "price": [float(i) for i in range(30)],
}


def _plan(ds, **options):
    columns = choose_columns(ds, options.pop("inputs", None), "price")
    table = TableOptions(given=columns.given, excluded=columns.excluded, **options)
    return plan_table(ds, columns.inputs, "price", "regression", table)


def test_categories_identifiers_and_missing_cells():
    ds = Dataset.from_dict(ROWS)
    with pytest.raises(
        ConfigError, match=r"input column 'city' is empty .* at row 2\b.*--missing impute"
    ):
        _plan(ds)
    prep, notes = _plan(ds, impute=True)
    assert prep.input_columns == ["size", "floor", "year", "city"]
    assert prep.categories == {"floor": ["0", "1", "2"], "city": ["oslo", "rome"]}
    assert prep.input_shape == [1 + 4 + 1 + 3]
    assert notes[0] == ("inputs: 4 table columns: 2 numeric (size, year), standardised; "
                        "2 categorical (floor: 3 values, city: 2 values), one-hot with an unknown slot")  # fmt: skip
    assert notes[1].startswith("excluded: id (unique per row: an identifier), user_id (unique")
    assert "name (unique per row: an identifier)" in notes[1]
    assert notes[2].startswith("missing values: imputed 10 cells in 1 columns")
    x = prep.inputs(ds.select_columns(prep.input_columns).with_format("numpy")[:3])
    np.testing.assert_array_equal(x[2, 6:9], [0, 0, 1])  # the missing city: the unknown slot
    np.testing.assert_allclose(x[:, 0], (np.array([0.0, 1, 2]) - prep.mean[0]) / prep.std[0],
                               rtol=1e-6)  # fmt: skip


def test_given_columns_are_kept_and_categories_can_be_chosen():
    ds = Dataset.from_dict(ROWS)
    prep, notes = _plan(ds, inputs=["id", "size", "year"], categorical=["size"])
    assert prep.input_columns == ["id", "size", "year"] and list(prep.categories) == ["size"]
    assert len(prep.categories["size"]) == 13 and not any(n.startswith("excluded") for n in notes)
    with pytest.raises(ConfigError, match="--categorical-columns 'city' is not one of the input"):
        _plan(ds, inputs=["size"], categorical=["city"])


def test_predict_expands_folders_recursively_in_sorted_order(tmp_path):
    for name in ["b/2.png", "b/10.png", "a.png", "c/d/e.jpg", ".hidden/x.png", "notes.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    found = _expand([str(tmp_path), "other.png"], tables=False)
    names = [p[len(str(tmp_path)) + 1 :] for p in found[:-1]]
    assert names == ["a.png", "b/10.png", "b/2.png", "c/d/e.jpg"] and found[-1] == "other.png"
    with pytest.raises(ConfigError, match="is a folder with no data files"):
        _expand([str(tmp_path / "b")], tables=True)


def test_an_image_folder_of_mixed_modes_decodes_in_the_widest(tmp_path):
    for c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(3):
            image = PIL.Image.fromarray(np.full((6, 5, 3), 40 * c + i, np.uint8))
            (image.convert("L") if i == 1 else image).save(tmp_path / name / f"{i}.png")
    with pytest.warns(UserWarning, match="mix modes L, RGB .* decode as RGB, the widest"):
        ds = load_dataset("imagefolder", data_dir=str(tmp_path), split="train")
    batch = ds.with_format("numpy")[:6]["image"]
    assert isinstance(batch, np.ndarray) and batch.shape == (6, 6, 5, 3)
