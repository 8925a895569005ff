"""Run folders that travel: a moved run serves its export without its model file or any code
from the folder; exports take raw inputs; predict over folders, to files and into closed pipes."""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import PIL.Image
import pytest

from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported
from jaxfeed.cli import main
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.serving.evaluate import evaluate, predict
from jaxfeed.recipes.train import train

MODEL_FILE = """
import os

from flax import nnx

if os.environ.get("JAXFEED_TEST_MARK"):  # proves when this file is imported
    with open(os.environ["JAXFEED_TEST_MARK"], "a") as f:
        f.write("imported\\n")


class Tiny(nnx.Module):
    def __init__(self, num_classes, input_shape, *, rngs):
        size = 1
        for d in input_shape:
            size *= d
        self.linear = nnx.Linear(size, num_classes, rngs=rngs)

    def __call__(self, x):
        return self.linear(x.reshape((x.shape[0], -1)))
"""


def _images(root, classes=("cat", "dog"), n=8):
    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(n):
            pixels = np.clip(rng.normal(40 + 150 * c, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
            image = PIL.Image.fromarray(pixels)
            (image.convert("L") if i % 4 == 1 else image).save(root / name / f"{i}.png")
    return root


def test_a_moved_run_serves_its_export_with_its_model_file_gone_and_runs_no_code(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # restored after the test
    work = tmp_path / "work"
    work.mkdir()
    _images(work / "imgs")
    (work / "net.py").write_text(MODEL_FILE)
    result = jaxfeed(
        "train", "--data", "imgs", "--model", "net.py:Tiny", "--epochs", "2", "--lr", "0.05",
        "--batch-size", "8",
        "--out", "run", cwd=work,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    saved = json.loads((work / "run" / "config.json").read_text())
    assert saved["options"]["data"] == str(work / "imgs")
    assert saved["options"]["model"] == f"{work / 'net.py'}:Tiny"
    assert saved["model_code"]["file"] == "code/net.py"
    assert (work / "run" / "code" / "net.py").read_text() == MODEL_FILE

    shutil.copytree(work / "imgs", tmp_path / "inputs" / "deep" / "er")  # predict recurses
    (tmp_path / "inputs" / "top.png").write_bytes((work / "imgs" / "cat" / "0.png").read_bytes())
    (tmp_path / "moved").mkdir()
    run = tmp_path / "moved" / "run"
    shutil.move(work / "run", run)
    (work / "net.py").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    mark = tmp_path / "imported.txt"
    env = {"JAXFEED_TEST_MARK": str(mark)}

    # eval and predict in this process (no JAX start); the fixture restores the folder
    os.chdir(elsewhere)
    monkeypatch.setenv("JAXFEED_TEST_MARK", str(mark))
    assert main(["eval", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"]["source"] == "model/"
    shutil.move(work / "imgs", work / "away")  # predict needs neither the data nor the model file
    folder = tmp_path / "inputs"
    status, shown, err = run_main(capsys, "predict", str(run), str(folder), "--json")
    assert status == 0, err
    shutil.move(work / "away", work / "imgs")
    predicted = json.loads(shown)
    files = sorted(str(p) for p in folder.rglob("*.png"))
    assert len(files) == 17 and files[-1] == str(folder / "top.png")
    assert [p["input"] for p in predicted] == files  # recursive, sorted
    assert not mark.exists()  # no code of the run folder ran

    # the export takes raw images (numpy, the training size) and gives what predict printed
    served = load_exported(run / "model")
    raw = [np.asarray(PIL.Image.open(f).convert("RGB")) for f in files]
    probabilities = served(raw)
    printed = np.array([[t["probability"] for t in sorted(p["top"], key=lambda t: t["class"])]
                        for p in predicted])  # fmt: skip
    np.testing.assert_allclose(probabilities, printed, atol=1e-6)
    labels, scores = served.predict(raw)
    assert labels == [p["label"] for p in predicted]
    np.testing.assert_allclose(scores, [p["score"] for p in predicted], atol=1e-6)

    # another checkpoint needs the model's code: refused without --trust-code, saying so
    assert main(["eval", str(run), "--checkpoint", "last"]) == 2
    assert "--trust-code" in capsys.readouterr().err
    assert main(["train", "--out", str(run), "--resume", "--epochs", "3"]) == 2
    refused = capsys.readouterr().err
    assert "--trust-code" in refused and "code/net.py" in refused and not mark.exists()
    resumed = jaxfeed(
        "train", "--out", str(run), "--resume", "--epochs", "3", "--trust-code",
        cwd=elsewhere, env=env,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert mark.read_text() == "imported\n"  # the run's copy, with the explicit opt-in

    # one row per input to CSV and JSON Lines; a closed pipe ends quietly
    for name in ("preds.csv", "preds.jsonl"):
        out = elsewhere / name
        assert main(["predict", str(run), str(folder), "--output", str(out)]) == 0
        if name.endswith(".csv"):
            rows = list(csv.DictReader(out.open()))
        else:
            rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["input"] for r in rows] == files and set(rows[0]) == {"input", "label", "score"}
    piped = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m jaxfeed.cli predict "{run}" "{work / "imgs"}" '
         f'"{work / "imgs"}" | head -1; echo "status ${{PIPESTATUS[0]}}" >&2'],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert len(piped.stdout.splitlines()) == 1
    assert "Traceback" not in piped.stderr and "Error" not in piped.stderr, piped.stderr
    assert piped.stderr.strip().splitlines()[-1] in ("status 0", "status 141")


def _table(path, n=90, seed=0):
    rng = np.random.default_rng(seed)
    rows = ["id,city,rooms,area,colour"]
    for i in range(n):
        city = ["oslo", "rome", "lima"][i % 3]
        area = rng.uniform(20, 200)
        colour = "red" if area + 60 * (city == "rome") > 120 else "blue"
        rows.append(f"{i},{city},{1 + i % 4},{'' if i == 5 else f'{area:.1f}'},{colour}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_table_of_categories_trains_serves_raw_rows_and_keeps_its_vocabulary(tmp_path, capsys):
    data = _table(tmp_path / "t.csv")
    config = RunConfig(
        data=str(data),
        label_column="colour",
        epochs=3,
        lr=0.05,
        batch_size=8,
        out=str(tmp_path / "run"),
    )
    with pytest.raises(Exception, match=r"'area' is empty or not finite at row .*--missing impute"):
        train(config, say=print, verbose=0)
    config.missing = "impute"
    result = train(config, say=print, verbose=0)
    said = capsys.readouterr().out
    assert "2 categorical (city: 3 values, rooms: 4 values), one-hot with an unknown slot" in said
    assert "excluded: id (unique per row: an identifier)" in said
    assert "missing values: imputed 1 cells in 1 columns" in said
    saved = json.loads((result.out / "config.json").read_text())
    assert saved["preprocess"]["categories"] == {"city": ["lima", "oslo", "rome"],
                                                 "rooms": ["1", "2", "3", "4"]}  # fmt: skip
    new = tmp_path / "new.csv"
    new.write_text(
        "id,city,rooms,area,colour\n0,rome,2,150,red\n1,paris,7,,blue\n2,oslo,1,30,blue\n"
    )
    predicted, _ = predict(str(result.out), [str(new)], top_k=2)
    served = load_exported(result.out / "model")
    rows = {"city": ["rome", "paris", "oslo"], "rooms": [2, 7, 1], "area": [150.0, None, 30.0]}
    labels, scores = served.predict(rows)
    assert labels == [p["label"] for p in predicted]
    np.testing.assert_allclose(scores, [p["score"] for p in predicted], atol=1e-6)
    x = served.spec.model_inputs(rows)
    # city (3 values + unknown), rooms (4 + unknown), area: unseen values in the unknown slots
    assert x.shape == (3, 4 + 5 + 1) and x[1, 3] == 1.0 and x[1, 8] == 1.0
    area = served.spec.columns[2]
    assert x[1, 9] == pytest.approx((area.fill - area.mean) / area.std)  # imputed: train mean
    report = evaluate(str(result.out), data=str(new), plot=False)
    assert report["split"] == "all" and report["rows"] == 3 and report["task"] == "classification"
    assert report["checkpoint"]["source"] == "model/"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--data", "nonexist.csv"], "no such file or folder: nonexist.csv"),
        (["train", "--data", "imgz"], "no such file or folder: imgz (nearest: imgs)"),
        (["predict", "run", "missing.png"], "no such file or folder: missing.png"),
        (["train", "--data", "one"], "has one class ('cat'); a classifier needs two or more"),
        (["train", "--data", "imgs", "--image-mode", "same"], "mix modes: L (/"),
        (  # the classes come from train only: a label seen only in test is refused, named
            ["train", "--data", "unseen", "--label-column", "label"],
            "split 'test', row 1: label 'maybe' of column 'label' is not one of the classes of "
            "the train split (['no', 'yes'])",
        ),
        (["train", "--data", "flat"], "needs one sub-folder per class (FOLDER/cat/1.png"),
        (  # an image folder's classes are those of all its splits: each must occur in train
            ["train", "--data", "split_imgs"],
            "split 'test', row 0: label 'bird' of column 'label' never occurs in the train split",
        ),
    ],
)
def test_clear_errors(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _images(tmp_path / "imgs")
    _images(tmp_path / "one", classes=("cat",))
    (tmp_path / "flat").mkdir()  # images with no class sub-folders
    for i, image in enumerate(sorted((tmp_path / "imgs").rglob("*.*"))):
        shutil.copy(image, tmp_path / "flat" / f"{i}{image.suffix}")
    _images(tmp_path / "split_imgs" / "train", n=2)
    _images(tmp_path / "split_imgs" / "test", classes=("bird", "cat"), n=2)
    (tmp_path / "unseen").mkdir()
    (tmp_path / "unseen" / "train.csv").write_text("a,label\n" + "1,yes\n2,no\n" * 5)
    (tmp_path / "unseen" / "test.csv").write_text("a,label\n1,yes\n3,maybe\n")
    (tmp_path / "run").mkdir()
    record = {"format": "jaxfeed-run", "version": 2, "options": {}, "task": "classification",
              "labels": ["a", "b"], "preprocess": {}}  # fmt: skip
    (tmp_path / "run" / "config.json").write_text(json.dumps(record))
    assert main([*args, "--out", str(tmp_path / "out")] if args[0] == "train" else args) == 2
    err = capsys.readouterr().err
    assert message in err, err
    if "nonexist" in message:
        assert "hub" not in err.lower()  # a path, not a Hub id
