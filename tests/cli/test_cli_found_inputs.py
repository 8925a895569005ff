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
import pytest

from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported
from jaxfeed.serving import SpecError

SMALL = ["--model", "transformer", "--model.init_args.dim", "32", "--model.init_args.depth", "1",
         "--model.init_args.num_heads", "2"]  # fmt: skip
# one stage of 8 channels, not the kind's three (32, 64, 128) and its linear rival: what these
# tests check is how the images are found and read (14.4 -> 9.9 CPU s a run, a cold XLA cache)
SMALL_CNN = ["--model", "cnn", "--model.init_args.widths", "[8]"]


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


# ---------------------------------------------------------------------------------- 64.4, D26, D23
def write_png(path, shade):
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.new("RGB", (8, 8), (shade, 255 - shade, 0)).save(path)


def write_wav(path):
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(8000)
        clip.writeframes(b"\0\0" * 800)


def test_a_folder_names_the_files_it_does_not_read(tmp_path, capsys):
    """64.4 and 63's D26: SVGs, audio clips and captions beside the images of class folders were
    dropped without a word (captions as many as the images made the folder a text file, D23);
    two class folders of SVGs only made 'one class' with no word on why."""
    icons = tmp_path / "icons"
    for c, shade in (("go", 0), ("py", 250)):
        for i in range(4):
            write_png(icons / c / f"{i}.png", shade)
            write_wav(icons / c / f"{i}.wav")
            (icons / c / f"{i}.txt").write_text(f"caption of icon {i}\n")
            (icons / c / f"{i}.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(icons), "--epochs", "1", "--out", str(out), *SMALL_CNN)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"data {icons}: detected image folder" in done.stdout
    (skipped,) = lines_of(done.stdout, "skipped ")
    assert skipped.startswith("skipped 24 files an image folder does not read: 8 "), skipped
    assert all(f"8 .{s}" in skipped for s in ("svg", "wav", "txt")), skipped
    assert "convert the .svg files to train on them" in skipped
    assert "give the " in skipped and "files a folder of their own" in skipped  # clips, texts
    assert preprocess(out)["kind"] == "image"
    svgs = tmp_path / "svgs"
    for i in range(3):
        write_png(svgs / "go" / f"{i}.png", 0)
        for c in ("py", "rust"):
            (svgs / c).mkdir(parents=True, exist_ok=True)
            (svgs / c / f"{i}.svg").write_text("<svg/>")
    # refused before training: in this process (no JAX start of its own)
    status, _, err = run_main(
        capsys, "train", "--data", str(svgs), "--out", str(tmp_path / "svg-run")
    )
    assert status == 2, err
    assert (
        "the label column 'label' has one class ('go'); the sub-folders 'py', 'rust' hold no "
        "file an image folder reads (6 .svg)" in err
    ), err


def test_class_folders_of_txt_files_train_a_text_classifier(tmp_path):
    """63's D23: class sub-folders of .txt files were read as lines of text without labels, and
    the run asked for --label-column, which no column could answer."""
    rng = random.Random(0)
    texts = tmp_path / "texts"
    for c, words in (("pos", ["great", "lovely", "superb"]), ("neg", ["awful", "dull", "poor"])):
        (texts / c).mkdir(parents=True)
        for i in range(12):
            body = " ".join(rng.choice(["the", "film", "was", "quite", *words]) for _ in range(8))
            (texts / c / f"{i}.txt").write_text(f"{body}\nsecond line {i}\n")
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(texts), "--epochs", "1", "--out", str(out), *SMALL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"data {texts}: detected folder of texts by class" in done.stdout
    assert "text: column 'text' is one text per file, labelled by its sub-folder" in done.stdout, (
        done.stdout
    )
    assert "label 'label' (2 classes)" in done.stdout
    assert preprocess(out)["kind"] == "text"


# ---------------------------------------------------------------------------------- 64.3, D24
def png_bytes(shade: int) -> bytes:
    out = io.BytesIO()
    PIL.Image.new("RGB", (8, 8), (shade, 0, 255 - shade)).save(out, "PNG")
    return out.getvalue()


def test_a_parquet_of_image_bytes_trains_on_images(tmp_path):
    """64.3: Ray's Parquet of PNG bytes and a label was refused ('no image, array, numeric or
    text column')."""
    data = tmp_path / "images.parquet"
    labels = [i % 2 for i in range(16)]
    images = pa.array([png_bytes(200 * y + i) for i, y in enumerate(labels)], pa.binary())
    pq.write_table(pa.table({"image": images, "label": labels}), data)
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), "--epochs", "1", "--out", str(out), *SMALL_CNN)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "columns: 'image' holds image files (PNG) as bytes: read as images" in done.stdout
    assert "images: 8x8, mode RGB" in done.stdout
    assert preprocess(out)["kind"] == "image"


def test_lists_of_integers_train_as_token_ids(tmp_path):
    """64.3: Spark's pre-tokenized ``input_ids`` (List(int32)) was refused, found or given
    ('it is unsupported List(Value('int32'))')."""
    rng = np.random.default_rng(0)
    labels = [i % 2 for i in range(48)]
    ids = [(rng.integers(1, 20, rng.integers(3, 9)) + 20 * y).tolist() for y in labels]
    data = tmp_path / "tokens.parquet"
    pq.write_table(
        pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())), "stars": labels}), data
    )
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), "--label-column", "stars", "--input-columns",
                   "input_ids", "--epochs", "1", "--out", str(out), *SMALL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = lines_of(done.stdout, "tokens: ")
    assert "column 'input_ids' holds token ids (lists of integers), read as they are" in line
    assert "a vocabulary of 40 (the data's ids)" in line, line
    assert "inputs: token ids (up to 8), label 'stars' (2 classes)" in done.stdout
    assert not (out / "tokenizer.json").exists()
    saved = preprocess(out)
    assert saved["kind"] == "tokens" and saved["text"]["vocab_size"] == 40
    served = load_exported(out / "model")  # ids in, as the run read them
    predicted, _ = served.predict({"input_ids": [[21, 22, 23], [1, 2]]})
    assert len(predicted) == 2 and set(predicted) <= {"0", "1"}
    with pytest.raises(SpecError, match="row 0 of token ids holds 40; the model's ids are 0 to 39"):
        served.predict([[1, 40]])


def test_lists_of_floats_train_as_arrays(tmp_path, capsys):
    """63's D24: a Parquet list<double> column (embeddings) was refused as 'unsupported' with no
    way forward; a row of another length is named."""
    rng = np.random.default_rng(0)
    labels = [i % 2 for i in range(40)]
    vectors = [(rng.normal(size=4) + 2 * y).tolist() for y in labels]
    data = tmp_path / "embeddings.parquet"
    pq.write_table(pa.table({"embedding": pa.array(vectors, pa.list_(pa.float64())),
                             "label": labels}), data)  # fmt: skip
    out = tmp_path / "run"
    done = jaxfeed("train", "--data", str(data), "--epochs", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "inputs: 'embedding' arrays (4,) float64" in done.stdout
    assert "model mlp (nnx)" in done.stdout  # vectors: no image for the cnn
    assert preprocess(out)["kind"] == "array"
    status, shown, err = run_main(capsys, "predict", str(out), str(data), "--json")
    assert status == 0, err
    assert len(json.loads(shown)) == 40
    vectors[7] = vectors[7][:3]
    odd = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"embedding": pa.array(vectors, pa.list_(pa.float64())),
                             "label": labels}), odd)  # fmt: skip
    status, _, err = run_main(capsys, "train", "--data", str(odd), "--out", str(tmp_path / "o"))
    assert status == 2 and "split 'train', row 7: column 'embedding' holds 3 numbers where" in err
