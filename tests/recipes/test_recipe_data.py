"""The recipes without the command: data detection, splits, columns, tasks, configs, interrupts."""

import importlib
import json
import os
import signal
import time

import numpy as np
import PIL.Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed import ClassLabel, Dataset, DatasetDict, Features
from jaxfeed.recipes import data as datamod
from jaxfeed.recipes.columns import choose_columns
from jaxfeed.recipes.config import (
    ConfigError,
    RunConfig,
    RunRecord,
    read_config_file,
    read_run,
)
from jaxfeed.recipes.configure import configure
from jaxfeed.recipes.interrupt import in_cleanup, safe_interrupts


def _images(root, split=None, sizes=((8, 8),)):
    for c, name in enumerate(["cat", "dog"]):
        folder = root / split / name if split else root / name
        folder.mkdir(parents=True)
        for i in range(4):
            h, w = sizes[i % len(sizes)]
            PIL.Image.fromarray(np.full((h, w), 60 * c + i, np.uint8)).save(folder / f"{i}.png")


def _csv(path, n=40):
    rng = np.random.default_rng(0)
    lines = ["a,b,name,price,kind"]
    for i in range(n):
        lines.append(f"{rng.normal():.3f},{i % 7},x{i},{1.5 * i:.2f},{'ab'[i % 2]}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_detect_names_every_kind(tmp_path):
    _images(tmp_path / "flat")
    _images(tmp_path / "split", "train")
    _images(tmp_path / "split", "test")
    import soundfile

    (tmp_path / "audio" / "yes").mkdir(parents=True)
    soundfile.write(tmp_path / "audio" / "yes" / "1.wav", np.zeros(800, np.float32), 8000)
    csv = _csv(tmp_path / "t.csv")
    table = pa.table({"x": [1.0, 2.0], "label": [0, 1]})
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "t.jsonl").write_text('{"x": 1.0, "label": 0}\n{"x": 2.0, "label": 1}\n')
    with (
        pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, table.schema) as w,
    ):
        w.write_table(table)
    Dataset.from_dict({"x": [1, 2]}).save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "hub" / "data").mkdir(parents=True)
    (tmp_path / "hub" / "data" / "train.csv").write_text(csv.read_text())
    expected = {
        "flat": "image folder",
        "split": "image folder",
        "audio": "audio folder",
        "t.csv": "CSV file",
        "t.parquet": "Parquet file",
        "t.jsonl": "JSON Lines file",
        "t.arrow": "Arrow file",
        "saved": "save_to_disk folder",
        "hub": "Hub-layout folder of data files",
    }
    for name, kind in expected.items():
        source = datamod.detect(str(tmp_path / name))
        assert source.kind == kind, name
        assert kind in datamod.describe(source)
    assert sorted(datamod.detect(str(tmp_path / "split")).data) == ["test", "train"]
    assert datamod.detect("digits").kind == "built-in dataset"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="found no images"):
        datamod.detect(str(tmp_path / "empty"))


def test_a_folder_is_read_as_the_kind_of_most_of_its_files(tmp_path):
    """Images, audio clips or texts by class sub-folder: the most files, images first on a tie;
    the others counted; nothing readable refused naming what the folder holds (issue 64.4)."""
    from jaxfeed.recipes.folders import folder_kind

    def make(name, files):
        for path in files:
            (tmp_path / name / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / path).write_bytes(b"")
        return tmp_path / name

    tie = make("tie", ["a/1.png", "a/1.txt", "b/2.png", "b/2.txt"])
    assert folder_kind(tie).kind == "image folder"
    clips = make("clips", ["a/1.wav", "a/2.wav", "b/3.wav", "b/4.png"])
    found = folder_kind(clips)
    assert found.kind == "audio folder" and found.unread_classes is None
    assert found.notes == [
        "skipped 1 file an audio folder does not read: 1 .png (a run learns from one kind of "
        "file: give the .png files a folder of their own to train on them)"
    ]
    texts = make("texts", ["train/pos/1.txt", "train/neg/2.txt", "test/pos/3.txt", "x/4.png"])
    assert (folder_kind(texts).kind, folder_kind(texts).loader) == (
        "folder of texts by class", "textfolder"
    )  # fmt: skip
    loose = make("loose", ["1.txt", "2.txt", "a/3.png"])  # texts, no classes: lines of text
    assert folder_kind(loose).kind == "image folder"
    assert folder_kind(make("lines", ["1.txt", "2.txt"])).kind == "Hub-layout folder of data files"
    svg = make("svg", ["a/1.svg", "b/2.svg", "README"])
    with pytest.raises(ConfigError, match=r"found no images .*; it holds 2 \.svg, 1 without an "):
        folder_kind(svg)


def test_detect_a_cached_hub_id_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "datasets--someone--houses"
    snapshot = repo / "snapshots" / ("a" * 40)
    (snapshot / "data").mkdir(parents=True)
    _csv(snapshot / "data" / "train.csv")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    source = datamod.detect("someone/houses")
    assert source.kind == "cached Hub dataset" and source.data["train"].num_rows == 40


def test_val_split_is_stratified_and_split_expressions_work():
    labels = [0] * 80 + [1] * 20
    ds = Dataset.from_dict(
        {"x": list(range(100)), "label": labels},
        features=Features({"x": datamod.Value("int64"), "label": ClassLabel(names=["a", "b"])}),
    )
    splits = datamod.choose_splits(DatasetDict({"train": ds}), "train", None, 0.2, "label", 0)
    val = np.asarray(splits.eval.with_format("numpy")["label"])
    assert splits.eval.num_rows == 20 and (val == 1).sum() == 4 and "stratified" in splits.note
    part = datamod.choose_splits(
        DatasetDict({"train": ds}), "train[:50%]", "train[50%:]", None, None, 0
    )
    assert (part.train.num_rows, part.eval.num_rows) == (50, 50)
    with pytest.raises(ConfigError, match="--split-eval 'test'"):
        datamod.choose_splits(DatasetDict({"train": ds}), "train", "test", None, None, 0)
    # a test split is held out: validation is carved from train, stratified, and test kept apart
    with_test = DatasetDict({"train": ds, "test": ds.select(range(10))})
    held = datamod.choose_splits(with_test, "train", None, None, "label", 0)
    assert (held.eval_name, held.eval.num_rows, held.train.num_rows) == ("validation", 10, 90)
    assert held.test_name == "test" and held.test.num_rows == 10 and "test is held out" in held.note
    assert (np.asarray(held.eval.with_format("numpy")["label"]) == 1).sum() == 2
    with_val = DatasetDict({**with_test, "validation": ds.select(range(5))})
    both = datamod.choose_splits(with_val, "train", None, None, "label", 0)
    assert (both.eval_name, both.eval.num_rows, both.test_name) == ("validation", 5, "test")
    none = datamod.choose_splits(with_test, "train", None, 0.0, "label", 0)
    assert none.eval is None and none.train.num_rows == 100 and none.test.num_rows == 10
    assert datamod.choose_splits(with_test, "train+test", None, None, None, 0).test is None
    assert datamod.choose_splits(with_test, "train", "test", None, None, 0).test is None


@pytest.mark.parametrize(
    ("rows", "fraction", "in_order", "advice"),
    [
        (1, None, True, "give --val-split 0 (no validation split: the last epoch is kept) or put "
                        "the corpus on more lines"),
        (1, None, False, "give --val-split 0 (no validation split: the last epoch is kept)"),
        (4, 0.9, False, "give a smaller --val-split, or --val-split 0 (no validation split"),
    ],
)  # fmt: skip
def test_too_few_rows_for_a_validation_split_says_what_to_do(rows, fraction, in_order, advice):
    """issue 63, D22: the refusal named --val-split's value, not the way out (--val-split 0)."""
    data = DatasetDict({"train": Dataset.from_dict({"text": ["a b c"] * rows})})
    with pytest.raises(ConfigError, match=r"too few to carve a validation split from: ") as err:
        datamod.choose_splits(data, "train", None, fraction, None, 0, in_order=in_order)
    assert advice in str(err.value)


def test_columns_and_tasks_of_a_table(tmp_path):
    ds = datamod.detect(str(_csv(tmp_path / "t.csv"))).data["train"]
    columns = choose_columns(ds, None, "price")
    # every scalar column is a candidate; the plan keeps categories and leaves identifiers out
    assert columns.inputs == ["a", "b", "name", "kind"] and columns.kind == "table"
    assert datamod.infer_task(ds, "price", None) == "regression"
    assert datamod.infer_task(ds, "b", None) == "classification"  # 7 integer values
    assert datamod.infer_task(ds, "kind", None) == "classification"
    with pytest.raises(ConfigError, match="'kind' holds classes"):
        datamod.infer_task(ds, "kind", "regression")
    with pytest.raises(ConfigError, match="non-integer floats"):
        datamod.infer_task(ds, "a", "classification")
    with pytest.raises(ConfigError, match="--label-column 'nope' is not a column"):
        choose_columns(ds, None, "nope")


def test_string_labels_become_classes_with_names(tmp_path):
    ds = datamod.detect(str(_csv(tmp_path / "t.csv"))).data["train"]
    encoded, names = datamod.encode_labels({"train": ds}, "kind")
    assert names == ["a", "b"] and encoded["train"].features["kind"] == ClassLabel(names=["a", "b"])
    assert encoded["train"][:4]["kind"] == [0, 1, 0, 1]
    other = Dataset.from_dict({"kind": ["a", "c"]})
    with pytest.raises(ConfigError, match="row 1: label 'c'"):
        datamod.encode_labels({"test": other}, "kind", names)


def test_config_file_and_flags(tmp_path):
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("epochs: 4\nlr: 0.01\nschedule: cosine\ninput_columns: [a, b]\n")
    config = configure({"epochs": 2}, str(yaml_file))
    assert (config.epochs, config.lr, config.schedule, config.input_columns) == (
        2,
        0.01,
        "cosine",
        ["a", "b"],
    )
    (tmp_path / "bad.json").write_text('{"epochs": 0}')
    with pytest.raises(ConfigError, match=r"bad\.json: epochs must be an integer >= 1, got 0"):
        configure({}, str(tmp_path / "bad.json"))
    (tmp_path / "typo.json").write_text('{"epoch": 3}')
    with pytest.raises(ConfigError, match="unknown option 'epoch' \\(did you mean 'epochs'"):
        read_config_file(tmp_path / "typo.json") and configure({}, str(tmp_path / "typo.json"))
    (tmp_path / "broken.yaml").write_text("epochs: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        configure({}, str(tmp_path / "broken.yaml"))


def _saved_run(folder, **options):
    folder.mkdir()
    record = RunRecord(
        RunConfig(**options),
        {"task": "classification", "labels": ["a"], "preprocess": {"kind": "array"}},
    )
    (folder / "config.json").write_text(record.to_json())
    return folder


def test_resume_reads_the_saved_config_and_refuses_contradictions(tmp_path):
    run = _saved_run(tmp_path / "run", model="mlp", lr=0.01, epochs=3)
    before = (run / "config.json").read_bytes()
    config = configure({"out": str(run), "resume": True, "epochs": 6})
    assert (config.model, config.lr, config.epochs) == ("mlp", 0.01, 6)
    with pytest.raises(ConfigError, match="--model 'cnn' contradicts the run's saved model 'mlp'"):
        configure({"out": str(run), "resume": True, "model": "cnn"})
    assert (run / "config.json").read_bytes() == before
    with pytest.raises(ConfigError, match=r"has no config\.json"):
        configure({"out": str(tmp_path / "nothing"), "resume": True})


def test_runs_of_the_first_version_still_load(tmp_path):
    legacy = {
        "data": "digits", "data_dir": None, "split_train": "train", "split_eval": "test",
        "input_column": "image", "label_column": "label", "input_shape": [8, 8], "input_dtype": "uint8",
        "image_mode": None, "labels": [str(i) for i in range(10)], "model": "cnn", "api": "nnx",
        "epochs": 4, "batch_size": 64, "lr": 0.001, "weight_decay": 0.0001, "seed": 0,
        "deterministic": False, "num_workers": 0, "jaxfeed": "0.1.0",
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(legacy))
    record = read_run(tmp_path)
    assert record.version == 1 and record.options.input_columns == ["image"]
    assert record.resolved["best_metric"] == "eval_accuracy"
    assert record.resolved["preprocess"]["input_shape"] == [8, 8]
    (tmp_path / "config.json").write_text(json.dumps({"format": "jaxfeed-run", "version": 99}))
    with pytest.raises(ConfigError, match="version 99; this jaxfeed reads versions up to 2"):
        read_run(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"labels": []}))
    with pytest.raises(ConfigError, match="was not written by jaxfeed train"):
        read_run(tmp_path)


def _xla_gc_callback():  # named like JAX's GC callback, where a KeyboardInterrupt would be lost
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # the handler runs here: it must defer, not raise
        pass
    return "finished"


def test_interrupt_in_a_gc_callback_is_redelivered_after_it():
    with safe_interrupts():
        assert _xla_gc_callback() == "finished"
        with pytest.raises(KeyboardInterrupt):
            time.sleep(5)
    assert not in_cleanup(None)


ONE_ROW = Dataset.from_dict({"x": [1]})  # built before pandas is hidden (pyarrow checks for it)


@pytest.mark.parametrize(
    ("module", "call", "extra"),
    [
        (
            "huggingface_hub",
            lambda: importlib.import_module("jaxfeed.data.load.hub").download("a/b"),
            "hub",
        ),
        ("pandas", ONE_ROW.to_pandas, "pandas"),
        ("soundfile", lambda: __import__("jaxfeed").Audio().decode_one(b"RIFF", None), "audio"),
    ],
)
def test_a_missing_extra_is_named(module, call, extra, monkeypatch):
    from jaxfeed._base.extras import MissingExtraError

    monkeypatch.setitem(__import__("sys").modules, module, None)  # as if not installed
    with pytest.raises(MissingExtraError, match=rf"pip install 'jaxfeed\[{extra}\]'"):
        call()
