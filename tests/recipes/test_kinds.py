"""The input kinds (jaxfeed.recipes.kinds): the registry chooses one per run, the built-in
model table, and --model decoded once (ModelSpec)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from cli_helpers import run_main
from jaxfeed import Dataset
from jaxfeed.data.dataset import DatasetDict
from jaxfeed.recipes.config import BUILTIN_MODELS, ConfigError, RunConfig
from jaxfeed.recipes.config.model_spec import ModelSpec, parse_model
from jaxfeed.recipes.data import choose_splits
from jaxfeed.recipes.kinds.builtins import BUILTINS
from jaxfeed.recipes.kinds.registry import KINDS, kind_for, kind_of
from jaxfeed.recipes.kinds.table import TableOptions
from jaxfeed.recipes.spec import INPUTS, TARGETS, Preprocessing


@pytest.mark.parametrize(
    ("text", "source", "name", "path"),
    [
        ("cnn", "builtin", "cnn", None),
        ("transformer_lm", "builtin", "transformer_lm", None),
        ("net.py:Net", "file", "Net", "net.py"),
        ("/abs/dir/net.py:Net", "file", "Net", "/abs/dir/net.py"),
        ("pkg.nets.Net", "module", "pkg.nets.Net", None),
        ("hf:org/model", "hub", "hf:org/model", None),
        ("./ckpt", "hub", "./ckpt", "./ckpt"),
        ("~/ckpt", "hub", "~/ckpt", "~/ckpt"),
    ],
)
def test_model_spec_sources(text, source, name, path):
    spec = parse_model(text)
    assert (spec.source, spec.name, spec.path) == (source, name, path)
    assert spec.text == text
    assert RunConfig(model=text).model_spec == spec


def test_model_spec_init_args_and_default():
    spec = RunConfig(model={"class_path": "mlp", "init_args": {"hidden": [8]}}).model_spec
    assert spec == ModelSpec("builtin", "mlp", {"hidden": [8]})
    assert RunConfig().model_spec is None
    assert parse_model("hf:org/a-model").short == "a-model"
    assert parse_model("dir/net.py:Net").short == "Net"


def test_builtin_names_come_from_the_table():
    assert tuple(BUILTINS) == BUILTIN_MODELS
    assert {b.class_name for b in BUILTINS.values()} <= {
        "CNN", "MLP", "AudioCNN", "TransformerClassifier", "TransformerLM", "LinearModel",
        "NGramModel",
    }  # fmt: skip


def test_registry_chooses_the_kind():
    assert {k: type(v).__name__ for k, v in KINDS.items()} == {
        "image": "ImageKind", "array": "ArrayKind", "table": "TableKind",
        "audio": "AudioKind", "text": "TextKind", "lm": "LMKind", "tokens": "TokensKind",
    }  # fmt: skip
    assert kind_for("text", "lm") is KINDS["lm"]
    assert kind_for("tokens", "classification") is KINDS["tokens"]
    assert kind_for("text", "classification") is KINDS["text"]
    assert kind_for("image", "classification") is KINDS["image"]
    prep = Preprocessing("table", ["a"], "y", [1], "regression")
    assert kind_of(prep) is KINDS["table"]


def test_defaults_units_and_next_steps():
    assert {k: v.default_model for k, v in KINDS.items()} == {
        "image": "cnn", "array": "cnn", "table": "mlp", "audio": "audio_cnn",
        "text": "transformer", "lm": "transformer", "tokens": "transformer",
    }  # fmt: skip
    assert [k for k, v in KINDS.items() if v.unit == "texts"] == ["lm"]
    assert KINDS["lm"].next_step("o").startswith("generate:")
    assert KINDS["table"].next_step("o").startswith("predict:")


def test_unknown_kind_is_refused_when_planned():
    run_data = SimpleNamespace(
        columns=SimpleNamespace(inputs=["blob"], label="y"),
        splits=SimpleNamespace(train=None),
        task="classification",
    )

    kind = kind_for("binary", "classification")
    with pytest.raises(
        ConfigError, match="cannot learn from the input column 'blob': it is binary"
    ):
        kind.plan(run_data, RunConfig())


def test_flags_that_do_not_apply():
    with pytest.raises(ConfigError, match="--sample-rate: the input column holds image data"):
        KINDS["image"].check(RunConfig(sample_rate=16000))
    with pytest.raises(ConfigError, match="--image-size: the input column holds audio"):
        KINDS["audio"].check(RunConfig(image_size="32"))
    KINDS["audio"].check(RunConfig(sample_rate=16000))


@pytest.mark.parametrize(("field", "value"), [("sample_rate", 16000), ("clip_seconds", 1.0)])
def test_the_audio_flags_are_refused_by_every_other_kind(field, value):
    """--sample-rate and --clip-seconds shape clips only: every other kind refuses each of them
    (an image, table or text run would otherwise ignore it without a word)."""
    flag = "--" + field.replace("_", "-")
    for name, kind in KINDS.items():
        config = RunConfig(**{field: value})
        if name == "audio":
            kind.check(config)
            continue
        with pytest.raises(ConfigError, match=f"^{flag}: the input column holds {name} data"):
            kind.check(config)


@pytest.mark.parametrize("kind", ["table", "array"])
def test_a_regression_target_is_standardised_on_the_train_split_only(kind):
    """The validation rows carved out of the train data do not enter the target's mean and
    deviation (the train split keeps an indices mapping over the whole table)."""
    values = [float(i) ** 2 for i in range(40)]
    x = [[float(i)] for i in range(40)] if kind == "array" else [float(i) for i in range(40)]
    ds = Dataset.from_dict({"x": x, "y": values})
    train = choose_splits(DatasetDict({"train": ds}), "train", None, 0.25, None, 0).train
    options = TableOptions() if kind == "table" else None
    prep, _ = KINDS[kind].plan_columns(train, ["x"], "y", "regression", None, options)
    y = np.asarray(train.with_format("numpy")["y"], np.float64)
    assert len(y) == 30
    assert (prep.target_mean, prep.target_std) == pytest.approx((y.mean(), y.std()))


# ---------------------------------------------------------------------------------- every kind
def _sample(kind: str, root):
    """A few rows of data of ``kind``, as a file or folder the command reads, and its task."""
    import wave

    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    if kind in ("image", "audio"):
        for label in ("a", "b"):
            (root / label).mkdir(parents=True)
            for i in range(6):
                if kind == "image":
                    pixels = rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)
                    PILImage.fromarray(pixels).save(root / label / f"{i}.png")
                    continue
                with wave.open(str(root / label / f"{i}.wav"), "wb") as w:
                    w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
                    w.writeframes((rng.normal(0, 0.1, 1600) * 32767).astype("<i2").tobytes())
        return str(root), None
    if kind == "array":
        return "digits", None
    if kind == "table":
        rows = [f"{i},{i % 3},{'x' if i % 2 else 'y'},{'a' if i % 2 else 'b'}" for i in range(24)]
        (root / "t.csv").write_text("n,m,c,label\n" + "\n".join(rows) + "\n")
        return str(root / "t.csv"), None
    if kind == "tokens":  # a Spark job's pre-tokenized ids
        import pyarrow as pa
        import pyarrow.parquet as pq

        ids = [rng.integers(0, 30, rng.integers(2, 9)).tolist() for _ in range(24)]
        labels = ["p" if i % 2 else "n" for i in range(24)]
        pq.write_table(pa.table({"input_ids": ids, "label": labels}), root / "t.parquet")
        return str(root / "t.parquet"), None
    words = ["alpha beta", "gamma delta epsilon", "zeta eta", "theta iota kappa lambda"]
    if kind == "text":
        rows = [f"{words[i % 4]} {i},{'p' if i % 2 else 'n'}" for i in range(24)]
        (root / "t.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
        return str(root / "t.csv"), None
    (root / "corpus.txt").write_text("\n".join(f"{words[i % 4]} {i}" for i in range(40)) + "\n")
    return str(root / "corpus.txt"), "lm"


@pytest.fixture(scope="module", params=sorted(KINDS))
def planned(request, tmp_path_factory):
    """Each kind's run on a sample of its data, planned by the kind alone (no model source
    hands it anything): its run data, preprocessing and notes."""
    from jaxfeed.recipes.run_data import load_run_data

    data, task = _sample(request.param, tmp_path_factory.mktemp(request.param))
    config = RunConfig(data=data, task=task, seq_len=8 if task == "lm" else None)
    run_data = load_run_data(config, None, kind_for)
    kind = kind_for(run_data.columns.kind, run_data.task)
    assert kind is KINDS[request.param]
    config = kind.before_plan(config, resumed=False)
    prep, notes = kind.plan(run_data, config)
    return kind, config, run_data, prep, notes


def test_each_kind_plans_its_inputs_and_says_what_it_chose(planned):
    kind, config, run_data, prep, notes = planned
    assert prep.kind == kind.name and notes and all(isinstance(n, str) for n in notes)
    assert kind.describe(prep, run_data)
    resolved = kind.resolved_options(config, prep, run_data)
    assert resolved.model_spec is not None and resolved.task == run_data.task
    assert kind.default_model in BUILTINS and kind.name in BUILTINS[kind.default_model].kinds


def test_each_kinds_loader_gives_batches_of_its_planned_shape(planned):
    from jaxfeed import DataLoader

    kind, config, run_data, prep, _ = planned
    ds = kind.prepare(prep, run_data.splits.train)
    loader = DataLoader(ds, 4, transform=prep, **kind.loader_options(prep, train=True))
    batch = next(iter(loader))
    key = "input_ids" if kind.tokens else INPUTS  # token kinds name their columns
    assert tuple(batch[key].shape[1:]) == tuple(prep.input_shape), batch[key].shape
    assert len(batch[key]) == 4 and (kind.name == "lm" or len(batch[TARGETS]) == 4)
    options = kind.trainer_options(config, prep, None)
    assert {"loss", "metrics"} <= set(options)


def test_each_kind_is_only_its_inputs(planned):
    """The Hub checkpoint is the model source's (jaxfeed.recipes.sources): no kind carries a
    hook for it, only ``hub_task``, the Hub task that learns from it (data)."""
    from jaxfeed.models.hub.family import TASKS

    kind = planned[0]
    for hook in ("plan_pretrained", "pretrained_options", "wrap_pretrained", "build_model",
                 "default_epochs", "scores_pretrained", "fine_tune_defaults"):  # fmt: skip
        assert not hasattr(kind, hook), hook
    assert kind.hub_task is None or kind.hub_task in TASKS
    assert "RUN" in kind.next_step("RUN")


def test_a_run_of_any_other_kind_refuses_clip_seconds(planned, tmp_path, capsys):
    """``jaxfeed train --clip-seconds`` on image, array, table, text or corpus data stops with
    the flag named, before anything is written (the audio kind takes it: its plan reads it)."""
    kind, config = planned[:2]
    if kind.name == "audio":
        kind.check(dataclasses.replace(config, clip_seconds=1.0))
        return
    out, task = tmp_path / "run", ["--task", config.task] if config.task else []
    status, _, err = run_main(
        capsys, "train", "--data", config.data, "--out", str(out), *task, "--clip-seconds", "1"
    )
    message = f"--clip-seconds: the input column holds {kind.name} data, not audio"
    assert status == 2 and message in err.strip().splitlines()[-1] and "Traceback" not in err, err
    assert not out.exists() or not any(out.iterdir())
