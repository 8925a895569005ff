"""The command on text: a generated sentiment corpus (the label depends on word choice) trained
once per module, then eval, predict (texts, .txt, CSV), the export on token ids, resume after
SIGTERM, and bad input refused before anything is written."""

import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported
from jaxfeed.text import load_tokenizer

GOOD = ["great", "wonderful", "excellent", "superb", "lovely", "brilliant"]
BAD = ["awful", "terrible", "boring", "dreadful", "poor", "weak"]
FILLER = ["the", "film", "plot", "actors", "music", "story", "was", "really", "and", "quite",
          "a", "ending"]  # fmt: skip
SMALL = ["--model", "transformer", "--model.init_args.dim", "32", "--model.init_args.depth", "1",
         "--model.init_args.num_heads", "2"]  # fmt: skip


def review(rng, label):
    words = [rng.choice(FILLER) for _ in range(rng.randint(4, 12))]
    for _ in range(rng.randint(1, 2)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(GOOD if label == "pos" else BAD))
    return " ".join(words)


def write_reviews(path, rows=400, seed=0):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "review", "genre", "stars"])
        for i in range(rows):
            label = rng.choice(["neg", "pos"])
            writer.writerow([i, review(rng, label), rng.choice(["drama", "comedy"]), label])
    return path


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    return write_reviews(tmp_path_factory.mktemp("text") / "reviews.csv")


@pytest.fixture(scope="module")
def text_run(reviews, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "reviews"
    result = jaxfeed(
        "train", "--data", str(reviews), "--label-column", "stars", "--epochs", "6",
        "--lr", "0.003", "--batch-size", "32", "--out", str(out), *SMALL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def test_free_text_is_detected_tokenized_and_learned(reviews, text_run):
    out, stdout = text_run
    assert (
        "text: column 'review' is free text: a median of 10 words, 400 distinct values in 400 "
        "rows (0% of rows repeat a value) (--text-column to choose)" in stdout
    )
    assert "tokenizer: byte-level BPE trained on the train split" in stdout
    # 360 rows in batches of 32: 12 batches an epoch, too few to pay for a second pad length
    # (buckets_for: one per 32 batches), so one length
    assert re.search(r"^padding: to \d+ tokens, one length; texts of \d+-\d+ tokens", stdout,
                     flags=re.M), stdout  # fmt: skip
    assert (
        "excluded: id, genre (the text column is the input; to learn from the others as a table "
        "instead, name them in --input-columns)" in stdout
    )
    assert "360 train / 40 validation rows; inputs: token ids (up to" in stdout
    assert "model transformer(dim=32, depth=1, num_heads=2) (nnx)" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert (
        saved["options"]["text_column"] == "review"
        and saved["options"]["model"]["class_path"] == "transformer"
    )
    assert saved["task"] == "classification" and saved["labels"] == ["neg", "pos"]
    text = saved["preprocess"]["text"]
    assert text["column"] == "review" and text["tokenizer"] == "tokenizer.json"
    tokenizer = load_tokenizer(out / "tokenizer.json")
    assert tokenizer.get_vocab_size() == text["vocab_size"]
    assert tokenizer.decode(tokenizer.encode("the film was superb").ids) == "the film was superb"
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["eval_accuracy"] for r in rows if "kind" not in r) >= 0.9


def test_eval_reports_per_class_figures(text_run, capsys):
    out, _ = text_run
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    report = json.loads(shown)
    assert report["split"] == "validation" and report["rows"] == 40
    assert set(report["per_class"]) == {"neg", "pos"} and report["accuracy"] >= 0.9
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    best = next(r for r in rows if r.get("epoch") == report["checkpoint"]["epoch"])
    assert report["loss"] == pytest.approx(best["eval_loss"], abs=1e-4)  # padding changes nothing
    assert report["accuracy"] == pytest.approx(best["eval_accuracy"])


def test_predict_texts_files_and_tables_agree_with_the_export(text_run, tmp_path, capsys):
    out, _ = text_run
    lines = tmp_path / "new.txt"
    lines.write_text("a wonderful and brilliant film\n\nthe plot was awful and boring\n")
    table = tmp_path / "new.jsonl"
    table.write_text(json.dumps({"review": "superb lovely music"}) + "\n")
    status, shown, err = run_main(
        capsys, "predict", str(out), "what a superb story", str(lines), str(table), "--json"
    )
    assert status == 0, err
    predicted = json.loads(shown)
    assert [p["input"] for p in predicted] == [
        "what a superb story",
        f"{lines}:1",
        f"{lines}:3",
        f"{table}:0",
    ]
    assert [p["label"] for p in predicted] == ["pos", "pos", "neg", "pos"]
    # the export takes token ids: the run's tokenizer.json makes them, padded with its pad id
    tokenizer = load_tokenizer(out / "tokenizer.json")
    texts = ["what a superb story", "a wonderful and brilliant film",
             "the plot was awful and boring", "superb lovely music"]  # fmt: skip
    encoded = [e.ids for e in tokenizer.encode_batch(texts)]
    width = max(map(len, encoded))
    ids = np.zeros((len(texts), width), np.int32)
    mask = np.zeros((len(texts), width), np.int32)
    for i, row in enumerate(encoded):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    served = load_exported(out / "model")
    logits = np.asarray(served(input_ids=ids, attention_mask=mask))
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    labels = served.config["labels"]
    printed = [
        [{t["label"]: t["probability"] for t in p["top"]}[n] for n in labels] for p in predicted
    ]
    np.testing.assert_allclose(probabilities, printed, atol=1e-5)
    # ... and strings: the export's own tokenizer.json (data) makes the ids, as predict prints
    assert (out / "model" / "tokenizer.json").is_file()
    np.testing.assert_allclose(served(texts), printed, atol=1e-6)
    np.testing.assert_allclose(served({"review": texts, "other": [0] * 4}), printed, atol=1e-6)
    assert served.predict(texts[:1])[0] == ["pos"]
    with pytest.raises(ValueError, match="reads the text column 'review'"):
        served({"body": texts})
    long = "the film was awful and boring " * 12  # longer than a file name may be
    other = long + "but the music was superb"  # the same first 47 characters and more
    status, shown, err = run_main(capsys, "predict", str(out), long, other, "--json")
    assert status == 0, err
    rows = json.loads(shown)  # the whole text is the key (issue 54, item 3): never two alike
    assert [r["input"] for r in rows] == [long, other] and rows[0]["label"] == "neg"
    written = tmp_path / "predictions.csv"
    status, shown, err = run_main(
        capsys, "predict", str(out), long, other, "--output", str(written)
    )
    assert status == 0 and shown == "wrote 2 predictions to " + str(written) + "\n", err
    assert [r["input"] for r in csv.DictReader(written.open())] == [long, other]
    status, shown, err = run_main(capsys, "predict", str(out), long)  # shortened when printed
    assert shown.startswith(long[:47] + "...: neg ("), shown
    # a data file name that does not exist is not taken for a text
    status, _, err = run_main(capsys, "predict", str(out), str(tmp_path / "missing.txt"))
    assert status == 2 and "no such file or folder" in err


def test_a_given_tokenizer_and_resume_after_sigterm(
    reviews, text_run, process_group, tmp_path, capsys
):
    given = text_run[0] / "tokenizer.json"
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = process_group(
        [sys.executable, "-m", "jaxfeed.cli", "train", "--data", str(reviews),
         "--label-column", "stars", "--tokenizer", str(given), "--epochs", "1000",
         "--batch-size", "32", "--out", str(out), *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.is_file() and metrics.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    said, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert f"tokenizer: {given} (--tokenizer;" in said
    assert (out / "tokenizer.json").read_bytes() == given.read_bytes()
    assert "resume" in err
    steps = [json.loads(r)["step"] for r in metrics.read_text().splitlines()]
    with_steps = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert with_steps and with_steps[-1] >= steps[0]
    result = jaxfeed(
        "train", "--out", str(out), "--resume", "--max-steps", str(with_steps[-1] + 12)
    )
    assert result.returncode == 0, result.stderr
    assert "preprocessing: as saved in the run" in result.stdout
    again = [json.loads(r) for r in metrics.read_text().splitlines()]
    trained = [r for r in again if r.get("kind") not in ("baselines", "test")]  # epochs, evals
    assert trained[-1]["step"] == with_steps[-1] + 12
    status, _, err = run_main(capsys, "train", "--out", str(out), "--resume", "--seq-len", "8")
    assert status == 2 and "--seq-len 8 contradicts the run's saved seq_len" in err, err


def test_bad_text_input_is_refused_before_anything_is_written(reviews, tmp_path, capsys):
    with open(reviews, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    empty = tmp_path / "empty.csv"
    with open(empty, "w", newline="") as f:
        csv.writer(f).writerows([header] + [[*r[:1], r[1] if i % 3 == 0 else "", *r[2:]]
                                            for i, r in enumerate(body)])  # fmt: skip
    unlabelled = tmp_path / "unlabelled.csv"
    with open(unlabelled, "w", newline="") as f:
        csv.writer(f).writerows([header] + [r[:3] + ([""] if i == 7 else r[3:])
                                            for i, r in enumerate(body)])  # fmt: skip
    not_a_tokenizer = tmp_path / "tokenizer.json"
    not_a_tokenizer.write_text('{"vocab": {"a": 0}}')
    cases = [
        (["--data", str(empty), "--text-column", "review", "--label-column", "stars"],
         "the text column 'review' is empty in 266 of 400 rows (rows 1, 2, 4, 5, 7, ...); is it "
         "the text column?"),
        (["--data", str(unlabelled), "--label-column", "stars"],
         "the label column 'stars' is empty in 1 row (row 7); fill or drop such rows"),
        (["--data", str(reviews), "--label-column", "stars", "--tokenizer", str(not_a_tokenizer)],
         f"--tokenizer {not_a_tokenizer}: {not_a_tokenizer} is not a tokenizer.json"),
        (["--data", str(reviews), "--label-column", "stars", "--tokenizer", str(reviews)],
         "is not a tokenizer.json: it is not JSON text"),
        (["--data", str(reviews), "--label-column", "stars", "--model", "cnn"],
         "--model cnn does not fit this run's token ids of text"),
    ]  # fmt: skip
    for i, (args, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        status, _, err = run_main(capsys, "train", *args, "--out", str(out))
        assert status == 2 and message in err, (args, err)
        assert not out.exists(), args


def test_regression_on_text(tmp_path, capsys):
    rng = random.Random(1)
    path = tmp_path / "scores.jsonl"
    with open(path, "w") as f:
        for _ in range(200):
            good = rng.randint(0, 3)
            words = [rng.choice(FILLER) for _ in range(6)] + [rng.choice(GOOD) for _ in range(good)]
            rng.shuffle(words)
            f.write(json.dumps({"body": " ".join(words), "score": 1.5 * good + 2.0}) + "\n")
    out = tmp_path / "run"
    result = jaxfeed(
        "train", "--data", str(path), "--text-column", "body", "--label-column", "score",
        "--epochs", "6", "--lr", "0.003", "--batch-size", "32", "--out", str(out), *SMALL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "text: column 'body' (--text-column)" in result.stdout
    assert "target 'score' (regression)" in result.stdout and "validation RMSE" in result.stdout
    status, shown, err = run_main(capsys, "eval", str(out), "--json")  # in this process: cheaper
    assert status == 0, err
    report = json.loads(shown)
    assert report["task"] == "regression" and report["r2"] > 0.5, report
    status, shown, err = run_main(
        capsys, "predict", str(out), "great superb lovely film", "the film", "--json"
    )
    assert status == 0, err
    values = [p["prediction"] for p in json.loads(shown)]
    assert values[0] > values[1] + 1.5  # in the label's units: 1.5 a good word
    served = load_exported(out / "model")  # strings in, the label's units out, as predict
    np.testing.assert_allclose(served(["great superb lovely film", "the film"]), values, atol=1e-6)


def test_free_text_or_category_and_a_few_empty_texts_left_out(reviews, tmp_path):
    from jaxfeed import Dataset
    from jaxfeed.recipes.columns import choose_columns
    from jaxfeed.recipes.config import RunConfig
    from jaxfeed.recipes.kinds.registry import kind_for
    from jaxfeed.recipes.run_data import load_run_data

    cities = Dataset.from_dict(
        {"city": ["New York City", "Los Angeles West"] * 20, "y": [0, 1] * 20}
    )  # three words, but two values: a category of a table
    assert choose_columns(cities, None, "y").kind == "table"
    assert choose_columns(cities, None, "y", text_column="city").kind == "text"
    with open(reviews, newline="") as f:
        rows = list(csv.reader(f))
    rows[4][1], rows[11][1] = "", "   "  # rows 3 and 10 of the data
    few = tmp_path / "few.csv"
    with open(few, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    run_data = load_run_data(RunConfig(data=str(few), label_column="stars"), None, kind_for)
    assert run_data.notes == [
        "text: left out 2 rows of split 'train' whose 'review' is empty (rows 3, 10)"
    ]
    assert run_data.splits.train.num_rows + run_data.splits.eval.num_rows == 398
    assert run_data.columns.kind == "text" and run_data.labels == ["neg", "pos"]


# ---------------------------------------------------------------------------------- issue 42
def _copy_run(text_run, tmp_path):
    """A copy of the module's run, to damage without touching the others' fixture."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(text_run[0], run)
    return run


def test_a_replaced_tokenizer_is_refused_and_runs_without_a_digest_still_serve(
    text_run, tmp_path, capsys
):
    """Item 5: predict with another tokenizer.json printed NaN or confident nonsense."""
    import hashlib
    import shutil

    from jaxfeed import Dataset
    from jaxfeed.text import train_tokenizer

    out = text_run[0]
    text = json.loads((out / "config.json").read_text())["preprocess"]["text"]
    assert text["sha256"] == hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    run = _copy_run(text_run, tmp_path)
    corpus = Dataset.from_dict({"text": [f"entirely other words number {i}" for i in range(50)]})
    other = train_tokenizer(corpus, "text", vocab_size=270, kind="bpe")
    assert other.get_vocab_size() != text["vocab_size"]
    (run / "tokenizer.json").write_text(other.to_str())
    status, shown, err = run_main(capsys, "predict", str(run), "a superb film")
    assert status == 2 and "Traceback" not in err, err[-2000:]
    assert len(err.strip().splitlines()) == 1 and not shown
    assert (
        f"{run / 'tokenizer.json'} is not the tokenizer this run was trained with (its SHA-256 "
        "differs from the one in config.json)" in err
    )
    # a run of an earlier jaxfeed recorded no digest: the vocabulary size still tells
    config = json.loads((run / "config.json").read_text())
    del config["preprocess"]["text"]["sha256"]
    (run / "config.json").write_text(json.dumps(config))
    status, shown, err = run_main(capsys, "predict", str(run), "a superb film")
    assert status == 2 and not shown
    assert (
        f"tokenizer.json has {other.get_vocab_size()} tokens, but the run's model was trained on "
        f"a vocabulary of {text['vocab_size']}" in err
    )
    # and with its own tokenizer it serves as before
    shutil.copy(out / "tokenizer.json", run / "tokenizer.json")
    status, shown, err = run_main(capsys, "predict", str(run), "a superb lovely film", "--json")
    assert status == 0, err
    assert json.loads(shown)[0]["label"] == "pos"


def test_an_image_or_audio_file_given_to_a_text_run_is_named(text_run, tmp_path, capsys):
    """Item 6: "photo.png: neg (0.559)", the path classified as a text."""
    import PIL.Image
    import soundfile

    out = text_run[0]
    photo = tmp_path / "photo.png"
    PIL.Image.fromarray(np.zeros((8, 8), np.uint8)).save(photo)
    status, shown, err = run_main(capsys, "predict", str(out), str(photo))
    assert status == 2 and "Traceback" not in err and not shown, err[-2000:]
    assert err.strip().splitlines() == [
        f"jaxfeed predict: error: {photo} is an image; this run reads texts: give a text, .txt "
        "files (one text a line) or tables with a 'review' column"
    ]
    clip = tmp_path / "clip.wav"
    soundfile.write(clip, np.zeros(800, np.float32), 8000)
    status, shown, err = run_main(capsys, "predict", str(out), str(clip))
    assert status == 2 and not shown and f"{clip} is an audio file; this run reads texts" in err
    other = tmp_path / "notes.pdf"
    other.write_bytes(b"%PDF-1.4")
    status, _, err = run_main(capsys, "predict", str(out), str(other))
    assert status == 2 and f"{other} is a .pdf file; this run reads texts" in err
