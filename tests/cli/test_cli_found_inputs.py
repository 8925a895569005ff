"""``jaxfeed train`` on data a user brings as it is (issues 63 and 64), in its own process: a
table whose name column repeats is a table, not text; engine-prepared Parquet (image bytes,
token ids, embeddings) trains; files a folder holds but the run does not read are counted and
named; a folder of class sub-folders of ``.txt`` files is text classification."""

import io
import json
import random
import wave

import numpy as np
import PIL.Image
import pyarrow as pa
import pyarrow.parquet as pq

from cli_helpers import jaxfeed


def lines_of(stdout: str, start: str) -> list[str]:
    return [s for s in stdout.splitlines() if s.startswith(start)]


def preprocess(out) -> dict:
    return json.loads((out / "config.json").read_text())["preprocess"]


# ---------------------------------------------------------------------------------- 64.2
def write_packages(path, rows=200, seed=0):
    """An OS's installed packages, as ``dpkg-query`` lists them: the section follows the size;
    most packages have one maintainer (a name and an e-mail: four words), a few have their own."""
    rng = random.Random(seed)
    sections = ["libs", "utils", "python", "devel"]
    lines = ["package,maintainer,installed_size,priority,section"]
    for i in range(rows):
        s = rng.randrange(4)
        maintainer = (
            "Ubuntu Core Developers <ubuntu-devel@lists.example.com>"
            if rng.random() < 0.7
            else f"Jane Doe{rng.randrange(40)} <jane{i % 40}@example.org>"
        )
        size = s * 1000 + rng.randrange(300)
        lines.append(f"pkg{i},{maintainer},{size},{['optional', 'required'][s % 2]},{sections[s]}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_table_with_a_repeated_name_column_is_a_table_and_says_why(tmp_path):
    """64.2: the old code took ``maintainer`` (four words a row, most rows one value) as free
    text and dropped every other column."""
    data = write_packages(tmp_path / "packages.csv")
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), "--label-column", "section", "--epochs", "1",
                   "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert not lines_of(done.stdout, "text: "), done.stdout
    (why,) = lines_of(done.stdout, "columns: ")
    assert why.startswith("columns: 'maintainer' is a category, not free text: "), why
    assert "% of rows repeat a value; free text repeats in at most 50%)" in why, why
    assert "(--text-column maintainer reads it as text)" in why
    (inputs,) = lines_of(done.stdout, "inputs: ")
    assert "1 numeric (installed_size), standardised" in inputs, inputs
    assert "2 categorical (maintainer: " in inputs and "priority: 2 values" in inputs, inputs
    (excluded,) = lines_of(done.stdout, "excluded: ")
    assert "package (unique per row: an identifier)" in excluded
    assert preprocess(out)["kind"] == "table"
