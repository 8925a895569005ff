"""``jaxfeed train`` on data a user brings as it is (issues 63 and 64), in its own process: a
table whose name column repeats is a table, not text; engine-prepared Parquet (image bytes,
token ids, embeddings) trains; files a folder holds but the run does not read are counted and
named; a folder of class sub-folders of ``.txt`` files is text classification."""

import json
import random
import wave

import PIL.Image

from cli_helpers import jaxfeed

SMALL = ["--model", "transformer", "--model.init_args.dim", "32", "--model.init_args.depth", "1",
         "--model.init_args.num_heads", "2"]  # fmt: skip


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


def test_a_folder_names_the_files_it_does_not_read(tmp_path):
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
    done = jaxfeed("train", "--data", str(icons), "--epochs", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"data {icons}: detected image folder" in done.stdout
    (skipped,) = lines_of(done.stdout, "skipped ")
    assert skipped.startswith("skipped 24 files an image folder does not read: 8 "), skipped
    assert all(f"8 .{s}" in skipped for s in ("svg", "wav", "txt")), skipped
    assert "convert the others to train on them" in skipped  # the .svg
    assert "give the " in skipped and "files a folder of their own" in skipped  # clips, texts
    assert preprocess(out)["kind"] == "image"
    svgs = tmp_path / "svgs"
    for i in range(3):
        write_png(svgs / "go" / f"{i}.png", 0)
        for c in ("py", "rust"):
            (svgs / c).mkdir(parents=True, exist_ok=True)
            (svgs / c / f"{i}.svg").write_text("<svg/>")
    done = jaxfeed("train", "--data", str(svgs), "--out", str(tmp_path / "svg-run"))
    assert done.returncode == 2, done.stderr
    assert (
        "the label column 'label' has one class ('go'); the sub-folders 'py', 'rust' hold no "
        "file an image folder reads (6 .svg)" in done.stderr
    ), done.stderr


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
