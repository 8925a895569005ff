"""``jaxfeed train`` on tables in its own process: the budget line counts ``--max-steps``; a
table too small to split well says what the split and the budget did (a validation row rounded
up, a class only in validation, a batch of half the rows). A cell that is not a float32 is
refused before any training, in this process (no JAX start per case)."""

import numpy as np

from cli_helpers import jaxfeed, run_main


def line_of(stdout: str, start: str) -> str:
    return next(s for s in stdout.splitlines() if s.startswith(start))


def test_the_budget_counts_max_steps_and_a_tiny_table_says_what_it_did(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(189, 2))  # 170 train rows: 17 batches of 10
    table = tmp_path / "t.csv"
    table.write_text("a,b,label\n" + "".join(f"{a:.3f},{b:.3f},{int(a + b > 0)}\n" for a, b in x))
    done = jaxfeed("train", "--data", str(table), "--epochs", "10", "--max-steps", "20",
                   "--batch-size", "10", "--out", str(tmp_path / "run"), timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    budget = line_of(done.stdout, "budget: ")
    assert "20 steps (--max-steps, given; the 10 epochs given would make 170)" in budget, budget
    assert "10 epochs = 170 steps (given)" not in budget
    assert "10 epochs (at most 20 steps), batch 10" in line_of(done.stdout, "model ")
    two = tmp_path / "two.csv"
    two.write_text("a,b,label\n1.0,2.0,x\n3.0,4.0,y\n")
    done = jaxfeed("train", "--data", str(two), "--epochs", "1", "--out", str(tmp_path / "two"),
                   timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    split = line_of(done.stdout, "validation split: ")
    assert (
        "(1 row of 2, rounded up, at random, not stratified: 2 classes have a single row" in split
    )
    assert "warning: the train part holds 1 of the 2 classes (" in split, split
    assert "--val-split 0 to train on all of them" in split
    budget = line_of(done.stdout, "budget: ")
    assert "batch 1 (half the rows: a tiny set)" in budget, budget
    assert "warning: 1 train rows are too few to learn much from" in budget


def test_a_cell_of_inf_or_past_float32_is_named_by_its_row_in_the_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [f"{a:.3f},{b:.3f},{int(a + b > 0)}" for a, b in rng.normal(size=(40, 2))]
    cases = [  # row 7 lands in the train part, row 2 in the validation split (seed 0)
        (7, "inf", "input column 'a' is empty or not finite at row 7 of the data (counting from 0"),
        (7, "1e308", "input column 'a' holds 1e+308 at row 7 of the data (counting from 0, in its "
         "files), beyond the float32 range"),
        (2, "-inf", "input column 'a' is empty or not finite at row 2 of the data (counting from 0"),
    ]  # fmt: skip
    for row, value, message in cases:
        table = tmp_path / f"{value}.csv"
        bad = list(rows)
        bad[row] = f"{value}," + rows[row].split(",", 1)[1]
        table.write_text("a,b,label\n" + "\n".join(bad) + "\n")
        status, _, err = run_main(capsys, "train", "--data", str(table), "--out",
                                  str(tmp_path / value))  # fmt: skip
        assert status == 2, err
        assert len(err.strip().splitlines()) == 1 and message in err, err
        assert not (tmp_path / value).exists()
