"""``jaxfeed export RUN --format hf`` restores the run's weights only: a run fine-tuned with
``--epochs 1`` (whose warmup schedule a rebuilt optimizer cannot match) exports, the files are
the ones the trainer's full restore wrote, and a run without checkpoints is refused in one line."""

import csv
import json
import random
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from cli_helpers import jaxfeed, run_main  # noqa: E402
from hub_checkpoints import save_checkpoint  # noqa: E402
from jaxfeed import load_exported  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / "tiny-bert"
    save_checkpoint(folder, "bert", "masked-lm")  # a tokenizer with model_max_length 8
    return folder


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    """Filler words and one word that gives the class away (w5-w9: pos, w10-w14: neg)."""
    rng, path = random.Random(0), tmp_path_factory.mktemp("text") / "reviews.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "stars"])
        for _ in range(96):
            label = rng.choice(["neg", "pos"])
            words = [f"w{rng.randint(20, 44)}" for _ in range(rng.randint(2, 5))]
            words.append(f"w{rng.randint(5, 9) if label == 'pos' else rng.randint(10, 14)}")
            writer.writerow([" ".join(words), label])
    return path


def train(ckpt, reviews, out, *flags):
    done = jaxfeed("train", "--data", str(reviews), "--text-column", "review", "--label-column",
                   "stars", "--model", str(ckpt), "--batch-size", "16", *flags, "--out", str(out),
                   timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


@pytest.fixture(scope="module")
def one_epoch(ckpt, reviews, tmp_path_factory):
    return train(ckpt, reviews, tmp_path_factory.mktemp("runs") / "one", "--epochs", "1")


def test_a_run_fine_tuned_for_one_epoch_exports(one_epoch, tmp_path, capsys):
    run, shown = one_epoch
    # the fine-tuning defaults warm up over 10% of the steps: a schedule with a step count, which
    # an optimizer rebuilt for one step per epoch (a constant learning rate) does not have
    assert "--epochs 1, --warmup-steps 1 " in shown, shown
    target = tmp_path / "hf"  # the exports of this file run in this process (no JAX start each)
    status, _, err = run_main(capsys, "export", str(run), "--format", "hf", "--out", str(target))
    assert status == 0, err[-3000:]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in target.iterdir()
    }
    import torch

    model = transformers.AutoModelForSequenceClassification.from_pretrained(target).eval()
    assert model.config.id2label == {0: "neg", 1: "pos"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(target)
    batch = tokenizer(["w5 w30 w31", "w12 w40 w41 w42"], padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = model(**batch).logits.numpy()
    served = load_exported(run / "model")  # the run's own export, of its best (only) step
    mine = served(input_ids=batch["input_ids"].numpy().astype(np.int32),
                  attention_mask=batch["attention_mask"].numpy().astype(np.int32))  # fmt: skip
    np.testing.assert_allclose(np.asarray(mine), reference, atol=1e-4)


def test_the_files_are_those_of_the_trainers_restore(ckpt, reviews, tmp_path, capsys):
    """On a run the trainer can restore whole, the export is the same bytes as before. (The
    fine-tuning defaults, as the module's one-epoch run: its train step is compiled already.)"""
    from jaxfeed.models.hub import save_pretrained
    from jaxfeed.recipes.serving.saved import read_saved
    from jaxfeed.recipes.sources.hub import hub_model

    run, _ = train(ckpt, reviews, tmp_path / "two", "--epochs", "2")
    steps = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert len(steps) == 2, steps
    saved = read_saved(run)
    trainer = saved.trainer()  # the optimizer and schedule rebuilt (once)
    for which in ("best", *steps):
        status, _, err = run_main(capsys, "export", str(run), "--format", "hf", "--checkpoint",
                                  which, "--out", str(tmp_path / f"hf-{which}"))  # fmt: skip
        assert status == 0, err
        saved.restore(trainer, which)  # every weight of the checkpoint, over the last
        save_pretrained(hub_model(trainer.model), tmp_path / f"old-{which}", source=ckpt,
                        id2label={0: "neg", 1: "pos"})  # fmt: skip
        for name in ("model.safetensors", "config.json"):
            new = (tmp_path / f"hf-{which}" / name).read_bytes()
            assert new == (tmp_path / f"old-{which}" / name).read_bytes(), (which, name)
    first, last = ((tmp_path / f"hf-{s}" / "model.safetensors").read_bytes() for s in steps)
    assert first != last  # each step's own weights


def test_a_run_without_checkpoints_is_refused_in_one_line(one_epoch, tmp_path, capsys):
    run, _ = one_epoch
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(run / "config.json", bare / "config.json")
    for folder, flags, message in (
        (bare, (), "has no checkpoints yet"),
        (run, ("--checkpoint", "99"), "no step 99"),
    ):
        status, _, err = run_main(capsys, "export", str(folder), "--format", "hf", *flags,
                                  "--out", str(tmp_path / "hf"))  # fmt: skip
        assert status == 2, err[-3000:]
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "hf").exists()
    assert json.loads((bare / "config.json").read_text())["pretrained"]


def test_eval_and_predict_restore_the_weights_of_a_one_epoch_run(one_epoch, reviews, capsys):
    """eval and predict on a checkpoint (not the run's export) read its model alone: the
    optimizer they rebuild (one step per epoch, no warmup) never meets the saved one's state."""
    run, _ = one_epoch
    status, out, err = run_main(capsys, "eval", str(run), "--checkpoint", "last", "--json")
    assert status == 0, err
    assert json.loads(out)["checkpoint"]["which"] == "last", out
    status, out, err = run_main(capsys, "predict", str(run), "w5 w30 w31", "--checkpoint", "last")
    assert status == 0, err
    assert "pos" in out or "neg" in out, out


def test_two_exports_into_one_folder_and_an_export_onto_a_file(one_epoch, tmp_path, capsys):
    """Two ``export --format hf`` into one new folder: one writes it whole, the other is refused
    in one line (exit 2); ``--out FILE`` is refused in one line. (The two commands run at once,
    each in a process of its own, forked from the fork server by two threads.)"""
    from concurrent.futures import ThreadPoolExecutor

    run, _ = one_epoch
    target = tmp_path / "shared"
    cmd = ["export", str(run), "--format", "hf", "--out", str(target)]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda _: jaxfeed(*cmd, timeout=300), range(2)))
    results = [(d.returncode, d.stderr) for d in done]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "--out" in refused and len(refused.strip().splitlines()) == 1, refused
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in target.iterdir()
    }
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left
    file = tmp_path / "file"
    file.write_text("keep me")
    status, _, err = run_main(capsys, "export", str(run), "--format", "hf", "--out", str(file))
    assert status == 2, err[-3000:]
    assert "is a file" in err and len(err.strip().splitlines()) == 1, err
    assert file.read_text() == "keep me"


def test_an_export_never_copies_a_file_linked_from_outside_the_checkpoint(one_epoch, ckpt,
                                                                           tmp_path, capsys):  # fmt: skip
    """A checkpoint whose tokenizer_config.json became a link to a file elsewhere (the same
    bytes: the recorded hashes agree) is refused in one line; nothing is exported."""
    run, _ = one_epoch
    moved, copied = tmp_path / "ckpt", tmp_path / "run"
    shutil.copytree(ckpt, moved)
    shutil.copytree(run, copied)
    config = copied / "config.json"
    config.write_text(config.read_text().replace(str(ckpt), str(moved)))
    elsewhere = tmp_path / "elsewhere.json"
    shutil.move(moved / "tokenizer_config.json", elsewhere)
    (moved / "tokenizer_config.json").symlink_to(elsewhere)
    target = tmp_path / "hf"
    status, _, err = run_main(capsys, "export", str(copied), "--format", "hf", "--out", str(target))
    assert status == 2, err[-3000:]
    assert "tokenizer_config.json" in err and "is a link to" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not target.exists()


def test_an_export_of_a_checkpoint_without_tokenizer_settings_names_its_special_tokens(tmp_path):
    """Issue 64, item 8: a checkpoint with tokenizer.json but no tokenizer_config.json (what an
    adapter folder held): the export writes one from config.json's token ids, so
    AutoTokenizer loads it with its eos and pad tokens."""
    from jaxfeed.recipes.serving.hub_export import tokenizer_settings

    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    save_checkpoint(ckpt, "bert", "masked-lm")
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "eos_token_id": 3, "pad_token_id": 0}))
    (ckpt / "tokenizer_config.json").unlink()
    out.mkdir()
    shutil.copy(ckpt / "tokenizer.json", out / "tokenizer.json")
    before = transformers.AutoTokenizer.from_pretrained(out)
    assert (before.eos_token, before.pad_token) == (None, None)
    assert tokenizer_settings(out, ckpt) == ["tokenizer_config.json"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    vocab = json.loads((ckpt / "tokenizer.json").read_text())["model"]["vocab"]
    names = {i: t for t, i in vocab.items()}
    assert (tokenizer.eos_token, tokenizer.pad_token) == (names[3], names[0])
    assert tokenizer.pad_token_id == 0 and tokenizer.eos_token_id == 3
