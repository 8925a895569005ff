"""Which columns a run learns from, without the command: free text against a category of
repeated values (issue 64.2)."""

from jaxfeed import Dataset
from jaxfeed.recipes.columns import choose_columns
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
