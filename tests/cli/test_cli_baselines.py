"""``jaxfeed train`` fits baselines beside its model and keeps the linear one when it does better
on validation (issue 64: the defaults lost to a linear model, and nothing said so). Each run is a
subprocess on tiny data; the default model gets one epoch at a rate too small to learn
(``--epochs 1 --lr 1e-6``), so the linear model wins for certain. Eval, predict and a resume then
run in this process: they serve and rebuild the model the run chose."""

import json

import numpy as np
import pytest

from cli_helpers import jaxfeed, run_main
from small_data import image_folder, text_csv

UNTRAINED = ("--epochs", "1", "--lr", "1e-6")  # the default model learns nothing


def _table(folder, rows=160, test=40, seed=0):
    """``train.csv`` and ``test.csv``: 3 classes, linear in 5 numeric columns."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5))
    y = (x @ rng.normal(size=(5, 3)) + 0.2 * rng.normal(size=(rows, 3))).argmax(1)
    folder.mkdir()
    for name, part in (("train", slice(test, None)), ("test", slice(0, test))):
        lines = [
            ",".join(f"{v:.4f}" for v in row) + f",c{k}"
            for row, k in zip(x[part], y[part], strict=True)
        ]
        (folder / f"{name}.csv").write_text("a,b,c,d,e,label\n" + "\n".join(lines) + "\n")
    return folder


def _summary(stdout):
    """The summary table's lines, from its heading on."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("model  ", "best epoch")))
    return lines[start : start + 4]


def _rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_table_run_shows_its_baselines_and_keeps_the_linear_model(tmp_path, capsys):
    data, out = _table(tmp_path / "t"), tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), *UNTRAINED, "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    said = next(s for s in done.stdout.splitlines() if s.startswith("baselines "))
    assert said.startswith("baselines (validation accuracy): majority 0.")
    assert "; linear " in said and "logistic regression on the 5 encoded inputs" in said
    assert "the mlp is compared with the linear model on validation at the end" in said
    chose = next(s for s in done.stdout.splitlines() if s.startswith("model: "))
    assert chose.startswith("model: linear, chosen on validation accuracy (")
    assert "the mlp's checkpoints are kept in candidates/mlp/checkpoints" in chose
    header, chosen, majority, linear = _summary(done.stdout)
    assert header.startswith("model ") and "test accuracy" in header and chosen.startswith("linear")
    assert majority.startswith("baseline (majority)") and linear.startswith("baseline (linear)")
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["model"]["class_path"] == "linear"
    assert saved["choice"]["chosen"] == "linear" and saved["choice"]["candidates"] == [
        "mlp",
        "linear",
    ]
    figures = saved["baselines"]["linear"]
    assert {"eval_accuracy", "eval_loss", "l2", "rows"} <= set(figures)
    assert 0 <= saved["baselines"]["majority"]["eval_accuracy"] < figures["eval_accuracy"]
    # the baselines are scored on validation only: the test split is read once, by the chosen model
    assert not any(k.startswith("test_") for b in saved["baselines"].values() for k in b)
    assert any(p.name.isdigit() for p in (out / "candidates/mlp/checkpoints").iterdir())
    assert json.loads((out / "model/config.json").read_text())["model"]["class"] == "LinearModel"
    rows = _rows(out)
    assert rows[-1]["kind"] == "test" and rows[-2]["kind"] == "baselines"
    tested = rows[-1]["test_accuracy"]  # the chosen (linear) model's, read once
    assert f"{tested:.4f}" in chosen.split()  # the chosen row's test figure
    # eval and predict serve the linear model (model/); a resume rebuilds it from checkpoints/
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    assert json.loads(shown)["accuracy"] == pytest.approx(tested, abs=1e-4)
    status, shown, err = run_main(capsys, "eval", str(out), "--checkpoint", "last", "--json")
    assert status == 0 and json.loads(shown)["checkpoint"]["source"] == "checkpoints/", err
    new = tmp_path / "new.csv"
    new.write_text("a,b,c,d,e\n0.1,0.2,-1.0,0.5,2.0\n")
    status, shown, err = run_main(capsys, "predict", str(out), str(new), "--json")
    assert status == 0, err
    assert json.loads(shown)[0]["label"] in ("c0", "c1", "c2")
    status, shown, err = run_main(capsys, "train", "--out", str(out), "--resume")
    assert status == 0, err
    assert "already complete" in shown and _summary(shown)[1].startswith("linear"), shown


def test_a_model_named_is_trained_alone_with_the_baselines_beside_it(tmp_path):
    data, out = _table(tmp_path / "t"), tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), "--model", "mlp", *UNTRAINED, "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    said = next(s for s in done.stdout.splitlines() if s.startswith("baselines "))
    assert "compared" not in said and not any(
        s.startswith("model: ") for s in done.stdout.splitlines()
    )
    header, best, majority, linear = _summary(done.stdout)
    assert header.startswith("best epoch") and best.startswith("1 ")
    assert majority.startswith("baseline (majority)") and linear.startswith("baseline (linear)")
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["model"] == "mlp" and "choice" not in saved and "baselines" in saved
    assert not (out / "candidates").exists()


def test_a_text_run_keeps_its_bag_of_ngrams_and_serves_strings(tmp_path, capsys):
    data, out = text_csv(tmp_path / "text", rows=120, test=30), tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), *UNTRAINED, "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    said = next(s for s in done.stdout.splitlines() if s.startswith("baselines "))
    assert "a bag of token 1- to 2-grams (the run's tokenizer), hashed" in said, said
    assert "the transformer is compared with the linear model" in said
    assert any(s.startswith("model: ngram, chosen on validation") for s in done.stdout.splitlines())
    saved = json.loads((out / "config.json").read_text())
    assert (
        saved["options"]["model"]["class_path"] == "ngram" and saved["choice"]["chosen"] == "ngram"
    )
    status, shown, err = run_main(capsys, "predict", str(out), "a great film, loved it", "--json")
    assert status == 0, err
    assert json.loads(shown)[0]["label"] in ("pos", "neg")


def test_an_image_run_fits_its_baseline_on_the_pixels_and_predicts_files(tmp_path, capsys):
    data, out = image_folder(tmp_path / "img", train=12, test=4), tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), *UNTRAINED, "--augment", "none", "--out",
                   str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = next(s for s in done.stdout.splitlines() if s.startswith("baselines "))
    assert "logistic regression on pixels: 32x32 L" in said, said
    assert any(
        s.startswith("model: linear, chosen on validation") for s in done.stdout.splitlines()
    )
    image = next((data / "test" / "vertical").iterdir())
    status, shown, err = run_main(capsys, "predict", str(out), str(image), "--json")
    assert status == 0, err
    assert json.loads(shown)[0]["label"] in ("horizontal", "vertical")
