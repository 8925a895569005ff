"""Issue 64, item 12: what the command prints in small places. ``eval`` of a data folder says
how to train on it (it suggested ``train --out DATA_FOLDER``, which ``--out`` refuses); a
``--label-column`` in the wrong case is found (``did you mean``); one epoch is ``1 epoch``; text
padded to one length says so (it printed ``to 1 lengths (32,) tokens``); a 1-row validation
split is ``1 row``. A short text run and ``eval DATA_FOLDER`` in subprocesses, as a user's shell
runs them; the other refusals in this process."""

import csv
import random

import pytest

from cli.test_cli_text import SMALL, review
from cli_helpers import jaxfeed, run_main

pytest.importorskip("tokenizers")


def line_of(text: str, start: str) -> str:
    return next((line for line in text.splitlines() if line.startswith(start)), "")


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    """A table of 40 short reviews labelled by ``section``."""
    path = tmp_path_factory.mktemp("text") / "notes.csv"
    rng = random.Random(0)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["note", "section"])
        for _ in range(40):
            label = rng.choice(["neg", "pos"])
            writer.writerow([review(rng, label), label])
    return path


def test_one_epoch_and_one_padding_length_are_said_in_the_singular(notes, tmp_path):
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(notes), "--label-column", "section", "--epochs", "1",
                   "--out", str(out), *SMALL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout
    assert "batch 8 (about a tenth of the rows), 1 epoch = 5 steps (given)" in said, said
    assert ", 1 epoch, batch 8, " in line_of(said, "model ") and "1 epochs" not in said, said
    padding = line_of(said, "padding: ")
    assert padding.startswith("padding: to 16 tokens, one length; texts of "), padding
    assert "1 lengths" not in said


def test_a_label_column_in_another_case_is_found(notes, tmp_path, capsys):
    status, _, err = run_main(capsys, "train", "--data", str(notes), "--label-column", "Section",
                              "--out", str(tmp_path / "run"))  # fmt: skip
    assert status == 2, err
    assert "--label-column 'Section' is not a column (did you mean 'section'?)" in err


def test_eval_of_a_data_folder_says_how_to_train_on_it(notes, tmp_path, capsys):
    data = notes.parent
    done = jaxfeed("eval", str(data))
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"jaxfeed train --data {data} --out runs/NAME, then give runs/NAME here" in done.stderr
    assert f"jaxfeed train --out {data}" not in done.stderr  # which --out refuses: it holds data
    status, _, err = run_main(capsys, "train", "--out", str(data), "--max-steps", "1")
    assert status == 2 and "holds files that are not a jaxfeed run" in err
    status, _, err = run_main(capsys, "eval", str(tmp_path / "nothing"))
    assert status == 2
    assert f"train one with: jaxfeed train --data DATA --out {tmp_path / 'nothing'}" in err
