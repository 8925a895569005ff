"""``jaxfeed train --model ./ckpt`` end to end on tiny random Hub checkpoints saved by
``transformers`` (no download): one run per modality (stopped by SIGTERM and resumed), then eval,
predict on raw inputs, the export and ``load_exported`` agreeing with predict, ``jaxfeed export
--format hf`` loaded by ``transformers`` with equal logits, and bad input refused before anything
is written to the run folder."""

import contextlib
import csv
import json
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import forkserver  # noqa: E402
from cli_helpers import jaxfeed, run_main  # noqa: E402
from hub_checkpoints import VOCAB, save_checkpoint  # noqa: E402
from jaxfeed import load_exported  # noqa: E402
from jaxfeed.recipes.sources.hub_checkpoint import RECORDED  # noqa: E402

MAX_LENGTH = 12  # the tokenizer's model_max_length: texts are cut to it
OWN_TRUNCATION = 20  # the truncation tokenizer.json itself holds: the run's length wins over it


def save_wordpiece(folder: Path, model_max_length: int = MAX_LENGTH) -> None:
    """A BERT-style tokenizer.json over :data:`VOCAB` (made with ``tokenizers``: the same file
    ``BertTokenizerFast`` writes) and its tokenizer_config.json."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )  # fmt: skip
    tok.enable_truncation(OWN_TRUNCATION)  # as many Hub tokenizer.json files carry their own
    tok.save(str(folder / "tokenizer.json"))
    settings = {"model_max_length": model_max_length, "pad_token": "[PAD]",
                "tokenizer_class": "BertTokenizer"}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))


def text_checkpoint(folder: Path, task: str = "masked-lm", **overrides) -> Path:
    """A tiny BERT (a masked-LM checkpoint, as bert-base-uncased: the classifier is new)."""
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(folder, "bert", task, tokenizer=False, **overrides)
    save_wordpiece(folder)
    return folder


def review(rng: random.Random, label: str) -> str:
    """Filler words w20-w44 and one word that gives the class away (w5-w9 or w10-w14); some
    rows are longer than the tokenizer's model_max_length."""
    words = [f"w{rng.randint(20, 44)}" for _ in range(rng.randint(3, 12))]
    marker = rng.randint(5, 9) if label == "pos" else rng.randint(10, 14)
    words.insert(rng.randrange(len(words) + 1), f"w{marker}")
    return " ".join(words)


def write_reviews(path: Path, rows: int = 160, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "stars"])
        for _ in range(rows):
            label = rng.choice(["neg", "pos"])
            writer.writerow([review(rng, label), label])
    return path


def train_sigterm_resume(argv: list[str], out: Path, stop_after: int) -> tuple[str, str]:
    """``jaxfeed train ARGV --out OUT``, stopped by SIGTERM once ``metrics.jsonl`` holds epoch
    ``stop_after`` (its line is printed then), then ``--resume``d: the two stdouts.

    The first command runs as every ``jaxfeed(...)`` does (forked from the fork server: no
    ~3.3 CPU s of imports, curves drawn in-process; a real subprocess otherwise); the SIGTERM
    goes to that command's own process, found among the children of the server or of this
    worker once it wrote the row (by a pidfd: never to a process that reused its pid)."""
    done: list = []
    first = threading.Thread(target=lambda: done.append(
        jaxfeed("train", *argv, "--out", str(out), timeout=300)
    ))  # fmt: skip
    first.start()
    pidfd = None
    try:
        while first.is_alive() and not epoch_ended(out, stop_after):
            time.sleep(0.01)
        pidfd = command_pidfd()  # it runs: it wrote the row (a look at /proc costs ~10 ms)
        if first.is_alive() and pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    finally:
        first.join(timeout=300)
        if pidfd is not None:
            os.close(pidfd)
    (stopped,) = done
    assert stopped.returncode == 143, stopped.stdout + stopped.stderr[-3000:]
    assert f"epoch {stop_after}/" in stopped.stdout, stopped.stdout
    resumed = jaxfeed("train", "--out", str(out), "--resume", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return stopped.stdout, resumed.stdout


def epoch_ended(out: Path, epoch: int) -> bool:
    """Whether the run's ``metrics.jsonl`` holds the row of ``epoch``."""
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return False
    for line in lines:
        with contextlib.suppress(ValueError):  # the last line may be half-written
            if json.loads(line).get("epoch") == epoch:
                return True
    return False


def command_pidfd() -> int | None:
    """A pidfd of the ``jaxfeed`` command running now: a child of this worker's fork server, or
    a child of this process run as ``python -m jaxfeed.cli``; None if there is none."""
    client = getattr(forkserver, "_SERVER", {}).get("client")
    server = client.proc.pid if client is not None else None
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid, parent = int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
            if (parent == server and pid != server) or (
                parent == os.getpid() and argv[1:3] == [b"-m", b"jaxfeed.cli"]
            ):
                return os.pidfd_open(pid)
    return None


# ---------------------------------------------------------------------------------- text
@pytest.fixture(scope="module")
def text_ckpt(tmp_path_factory):
    return text_checkpoint(tmp_path_factory.mktemp("hub") / "tiny-bert")


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    return write_reviews(tmp_path_factory.mktemp("text") / "reviews.csv")


@pytest.fixture(scope="module")
def text_run(text_ckpt, reviews, tmp_path_factory):
    """Fine-tune the tiny BERT: stopped by SIGTERM after epoch 1, resumed to epoch 3."""
    out = tmp_path_factory.mktemp("runs") / "reviews"
    argv = ["--data", str(reviews), "--text-column", "review", "--label-column", "stars",
            "--model", str(text_ckpt), "--batch-size", "16", "--lr", "3e-3"]  # fmt: skip
    first, resumed = train_sigterm_resume(argv, out, 1)
    return out, first, resumed


def test_text_run_uses_the_checkpoint_tokenizer_and_records_the_checkpoint(text_ckpt, text_run):
    out, first, resumed = text_run
    assert "tokenizer: the checkpoint's tokenizer.json (50 tokens)" in first
    assert f"longer than {MAX_LENGTH} tokens are cut" in first, first  # model_max_length
    # --lr given, --epochs and the warmup the fine-tuning defaults (printed)
    assert "fine-tuning: --lr 0.003, --epochs 3, --warmup-steps 2 " in first
    assert f"pretrained: bert from {text_ckpt}" in first
    assert "epoch 3/3" in resumed and "epoch 1/3" not in resumed
    saved = json.loads((out / "config.json").read_text())
    record = saved["pretrained"]
    assert record["model"] == str(text_ckpt) and record["model_type"] == "bert"
    assert (
        set(record["sha256"])
        == {  # every file of the checkpoint the run may read
            p.name for p in text_ckpt.iterdir() if p.name in RECORDED or p.suffix == ".safetensors"
        }
        >= {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}
    )
    import hashlib

    weights = (text_ckpt / "model.safetensors").read_bytes()
    assert record["sha256"]["model.safetensors"] == hashlib.sha256(weights).hexdigest()
    assert saved["options"]["epochs"] == 3 and saved["options"]["lr"] == 0.003
    # the run carries the tokenizer as data: the checkpoint's own bytes
    assert (out / "tokenizer.json").read_bytes() == (text_ckpt / "tokenizer.json").read_bytes()
    assert (
        saved["preprocess"]["text"]["pad_id"] == 0
        and saved["preprocess"]["text"]["max_length"] <= MAX_LENGTH
    )


def test_text_eval_predict_and_export_agree(text_run, tmp_path, capsys):
    out, _, _ = text_run
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    assert json.loads(shown)["accuracy"] >= 0.0
    texts = ["w5 w30 w31", "w12 w40 w41 w42", "w7 w7 w20"]
    status, shown, err = run_main(capsys, "predict", str(out), *texts, "--json")
    assert status == 0, err
    predicted = json.loads(shown)
    served = load_exported(out / "model")
    labels = served.config["labels"]
    assert labels == ["neg", "pos"]
    printed = [[{t["label"]: t["probability"] for t in p["top"]}[n] for n in labels]
               for p in predicted]  # fmt: skip
    np.testing.assert_allclose(served(texts), printed, atol=1e-6)  # raw texts in, as predict


def test_a_text_longer_than_the_run_is_cut_to_its_length_by_predict_and_the_export(
    text_run, capsys
):
    """The run's tokenizer.json holds its own truncation (longer than the run's max_length):
    predict and the export both cut a long text to the run's length, as training did."""
    from jaxfeed import Dataset
    from jaxfeed.text import load_tokenizer, tokenize

    out, _, _ = text_run
    max_length = json.loads((out / "config.json").read_text())["preprocess"]["text"]["max_length"]
    served = load_exported(out / "model")
    assert served.tokenizer.truncation["max_length"] == OWN_TRUNCATION != max_length
    long = " ".join(f"w{i}" for i in (5, *range(20, 44)))  # 25 words, over both lengths
    status, shown, err = run_main(capsys, "predict", str(out), long, "--json")
    assert status == 0, err
    (row,) = json.loads(shown)
    printed = [{t["label"]: t["probability"] for t in row["top"]}[n] for n in ("neg", "pos")]
    np.testing.assert_allclose(served([long])[0], printed, atol=1e-6)
    # the token ids of training's tokenization (cut at the run's max_length) give the same
    tokens = tokenize(Dataset.from_dict({"review": [long]}), load_tokenizer(out / "tokenizer.json"),
                      "review", max_length=max_length)  # fmt: skip
    ids = np.array(tokens["input_ids"], np.int32)
    assert ids.shape == (1, max_length)
    logits = np.asarray(served(input_ids=ids, attention_mask=np.ones_like(ids)), np.float64)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(probabilities / probabilities.sum(-1, keepdims=True), [printed],
                               atol=1e-5)  # fmt: skip


def test_export_hf_loads_in_transformers_with_equal_logits(text_run, tmp_path, capsys):
    out, _, _ = text_run
    target = tmp_path / "hf"
    status, _, err = run_main(capsys, "export", str(out), "--format", "hf", "--out", str(target))
    assert status == 0, err
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in target.iterdir()
    }
    import torch

    model = transformers.AutoModelForSequenceClassification.from_pretrained(target).eval()
    assert model.config.id2label == {0: "neg", 1: "pos"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(target)
    texts = ["w5 w30 w31", "w12 w40 w41 w42 w43 w44"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = model(**batch).logits.numpy()
    served = load_exported(out / "model")
    mine = served(input_ids=batch["input_ids"].numpy().astype(np.int32),
                  attention_mask=batch["attention_mask"].numpy().astype(np.int32))  # fmt: skip
    np.testing.assert_allclose(np.asarray(mine), reference, atol=1e-4)
    # a second export into the same folder is refused
    status, _, err = run_main(capsys, "export", str(out), "--format", "hf", "--out", str(target))
    assert status == 2 and "exists and is not empty" in err


def test_resume_refuses_a_checkpoint_whose_files_changed(text_run, text_ckpt, tmp_path, capsys):
    out, _, _ = text_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    moved = tmp_path / "ckpt"
    shutil.copytree(text_ckpt, moved)
    config = json.loads((run / "config.json").read_text())
    config["options"]["model"] = config["pretrained"]["model"] = str(moved)
    (run / "config.json").write_text(json.dumps(config))
    data = bytearray((moved / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one weight's last byte
    (moved / "model.safetensors").write_bytes(bytes(data))
    before = sorted(p.name for p in run.rglob("*"))
    status, _, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "4")
    assert status == 2
    assert "changed since the run started: model.safetensors (changed)" in err, err
    assert sorted(p.name for p in run.rglob("*")) == before  # nothing written


def test_bad_checkpoints_are_refused_before_anything_is_written(
    reviews, text_ckpt, tmp_path, capsys
):
    base = ["train", "--data", str(reviews), "--label-column", "stars", "--max-steps", "1"]
    cases = []
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append((empty, "has no config.json"))
    three = text_checkpoint(tmp_path / "three", "sequence-classification")  # a 3-class head
    cases.append((three, "num_labels=2 disagrees with the checkpoint's classification head "))
    broken = tmp_path / "broken"
    shutil.copytree(text_ckpt, broken)
    (broken / "tokenizer.json").write_text("not a tokenizer")
    cases.append((broken, "tokenizer.json"))
    for i, (folder, message) in enumerate(cases):
        out = tmp_path / f"run{i}"
        status, _, err = run_main(capsys, *base, "--model", str(folder), "--out", str(out))
        assert status == 2, err
        assert message in err, err
        assert not out.exists(), f"{folder}: {sorted(out.iterdir())}"
        if folder == three:  # says how to ask for a new head
            assert "--model.init_args.ignore_mismatched_sizes true" in err, err


# ---------------------------------------------------------------------------------- images
@pytest.fixture(scope="module")
def vit_ckpt(tmp_path_factory):
    """A tiny bare ViT (as google/vit-base-patch16-224-in21k: the classifier is new) and its
    ViTImageProcessor (32x32, ImageNet's 0.5 mean and std)."""
    import torch

    folder = tmp_path_factory.mktemp("hub") / "tiny-vit"
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=37, image_size=32, patch_size=8)  # fmt: skip
    transformers.ViTModel(config).save_pretrained(folder)
    transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """Two classes of 20 images of mixed sizes, some grey."""
    import PIL.Image

    root = tmp_path_factory.mktemp("pets")
    rng = np.random.default_rng(0)
    for name, level in (("cat", 30), ("dog", 220)):
        (root / name).mkdir()
        for i in range(20):
            h, w = ((24, 24), (40, 30), (32, 36))[i % 3]
            pixels = np.clip(rng.normal(level, 15, (h, w, 3)), 0, 255).astype(np.uint8)
            image = PIL.Image.fromarray(pixels)
            (image.convert("L") if i % 4 == 0 else image).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def image_run(vit_ckpt, pets, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "pets"
    argv = ["--data", str(pets), "--model", str(vit_ckpt), "--batch-size", "8", "--epochs", "6",
            "--lr", "1e-3"]  # fmt: skip
    first, resumed = train_sigterm_resume(argv, out, 1)
    return out, first, resumed


def test_image_run_takes_the_checkpoint_size_and_learns(vit_ckpt, image_run):
    out, first, resumed = image_run
    assert "inputs [32, 32, 3]" in first  # the preprocessor's 32x32, RGB
    assert f"pretrained: vit from {vit_ckpt}" in first
    assert "epoch 6/6" in resumed and "epoch 1/6" not in resumed
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["image_size"] == "32x32" and saved["options"]["image_mode"] == "RGB"
    processor = (vit_ckpt / "preprocessor_config.json").read_bytes()
    assert (out / "preprocessor_config.json").read_bytes() == processor  # kept, as data
    assert set(saved["pretrained"]["sha256"]) == {
        "model.safetensors", "config.json", "preprocessor_config.json"
    }  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("eval_accuracy", 0.0) for r in rows) >= 0.75  # dark cats, light dogs


def test_image_predict_export_and_hf_agree(image_run, pets, tmp_path, capsys):
    import PIL.Image
    import torch

    out, _, _ = image_run
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    evaluated = json.loads(shown)  # the held-out rows of a folder without test/: validation
    assert evaluated["split"] == "validation" and evaluated["checkpoint"]["which"] == "best"
    assert evaluated["labels"] == ["cat", "dog"] and evaluated["accuracy"] >= 0.75
    files = [pets / "cat" / "1.png", pets / "dog" / "2.png", pets / "dog" / "4.png"]
    status, shown, err = run_main(capsys, "predict", str(out), *map(str, files), "--json")
    assert status == 0, err
    predicted = json.loads(shown)
    assert [p["label"] for p in predicted] == ["cat", "dog", "dog"]
    served = load_exported(out / "model")
    labels = served.config["labels"]
    printed = [[{t["label"]: t["probability"] for t in p["top"]}[n] for n in labels]
               for p in predicted]  # fmt: skip
    images = [np.asarray(PIL.Image.open(f)) for f in files]
    np.testing.assert_allclose(served(images), printed, atol=1e-6)
    status, shown, err = run_main(capsys, "export", str(out), "--format", "hf", "--out",
                                  str(tmp_path / "hf"))  # fmt: skip
    assert status == 0, err
    model = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "hf").eval()
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    square = [np.random.default_rng(i).integers(0, 256, (32, 32, 3), np.uint8) for i in range(2)]
    with torch.no_grad():  # 32x32 already: no resize, the rescale and normalisation compared
        logits = model(**processor(square, return_tensors="pt")).logits.numpy()
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(served(np.stack(square)), expected, atol=1e-5)


def test_image_size_other_than_the_checkpoint_is_refused(vit_ckpt, pets, tmp_path, capsys):
    out = tmp_path / "run"
    status, _, err = run_main(capsys, "train", "--data", str(pets), "--model", str(vit_ckpt),
                              "--image-size", "64", "--out", str(out))  # fmt: skip
    assert status == 2 and "takes 32x32 images (its preprocessor_config.json)" in err, err
    assert not out.exists()
    bad = tmp_path / "bad-vit"
    shutil.copytree(vit_ckpt, bad)
    config = json.loads((bad / "preprocessor_config.json").read_text())
    config["size"] = {"height": 30, "width": 30}
    (bad / "preprocessor_config.json").write_text(json.dumps(config))
    status, _, err = run_main(capsys, "train", "--data", str(pets), "--model", str(bad),
                              "--out", str(out))  # fmt: skip
    assert status == 2 and "asks for 30x30 images, which the model cannot take" in err, err
    assert not out.exists()


# ---------------------------------------------------------------------------------- audio
AST = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
       "intermediate_size": 37, "patch_size": 8, "frequency_stride": 6, "time_stride": 5,
       "max_length": 40, "num_mel_bins": 16}  # fmt: skip


def ast_checkpoint(folder: Path, labels: int | None = None, **extractor) -> Path:
    """A tiny bare AST (the classifier is new; ``labels``: an ASTForAudioClassification with that
    many classes, as MIT/ast-finetuned-audioset's 527) and its ASTFeatureExtractor (16 kHz, 16 mel
    bins, 40 frames = 0.415 s)."""
    import torch

    torch.manual_seed(0)
    if labels is None:
        transformers.ASTModel(transformers.ASTConfig(**AST)).save_pretrained(folder)
    else:
        config = transformers.ASTConfig(**AST, num_labels=labels)
        transformers.ASTForAudioClassification(config).save_pretrained(folder)
    options = {"num_mel_bins": 16, "max_length": 40, **extractor}
    transformers.ASTFeatureExtractor(**options).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def ast_ckpt(tmp_path_factory):
    return ast_checkpoint(tmp_path_factory.mktemp("hub") / "tiny-ast")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Three classes of 8 chirps and tones of 0.3-0.6 s (longer than the checkpoint's 0.415 s:
    cut), a quarter at 16 kHz, the others at 8 kHz (resampled to the checkpoint's rate)."""
    from audio_clips import make_folder

    return make_folder(tmp_path_factory.mktemp("clips"), per_class=8, seconds=(0.3, 0.6))


@pytest.fixture(scope="module")
def audio_run(ast_ckpt, clips, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "clips"
    argv = ["--data", str(clips), "--model", str(ast_ckpt), "--batch-size", "8", "--epochs", "3",
            "--lr", "1e-3"]  # fmt: skip
    first, resumed = train_sigterm_resume(argv, out, 1)
    return out, first, resumed


def test_audio_run_uses_the_checkpoint_front_end(ast_ckpt, audio_run):
    out, first, resumed = audio_run
    assert "resampled to 16,000 Hz (the checkpoint's rate): 18 clips" in first, first
    assert "clips: 0.415 s (40 frames, the checkpoint's max_length)" in first
    assert (
        "features: the checkpoint's front end (AST's Kaldi-style log-mel filterbank), 16" in first
    )
    assert "inputs [40, 16]" in first
    assert f"pretrained: audio-spectrogram-transformer from {ast_ckpt}" in first
    assert "epoch 3/3" in resumed and "epoch 1/3" not in resumed
    saved = json.loads((out / "config.json").read_text())
    audio = saved["preprocess"]["audio"]
    assert audio["front_end"] == "ast" and audio["sample_rate"] == 16000
    assert (audio["num_mel_bins"], audio["max_length"]) == (16, 40)
    processor = (ast_ckpt / "preprocessor_config.json").read_bytes()
    assert (out / "preprocessor_config.json").read_bytes() == processor  # kept, as data
    assert set(saved["pretrained"]["sha256"]) == {
        "model.safetensors", "config.json", "preprocessor_config.json"
    }  # fmt: skip


def test_audio_eval_predict_export_and_hf_agree(audio_run, clips, tmp_path, capsys):
    import soundfile
    import torch

    out, _, _ = audio_run
    status, shown, err = run_main(capsys, "eval", str(out), "--json")
    assert status == 0, err
    assert 0.0 <= json.loads(shown)["accuracy"] <= 1.0
    files = [clips / "rising" / "0.wav", clips / "falling" / "1.wav", clips / "steady" / "4.wav"]
    status, shown, err = run_main(capsys, "predict", str(out), *map(str, files), "--json")
    assert status == 0, err
    predicted = json.loads(shown)
    served = load_exported(out / "model")
    labels = served.config["labels"]
    assert labels == ["falling", "rising", "steady"]
    assert served.config["preprocessing"]["audio"]["front_end"] == "ast"
    printed = [[{t["label"]: t["probability"] for t in p["top"]}[n] for n in labels]
               for p in predicted]  # fmt: skip
    decoded = [soundfile.read(f, dtype="float32") for f in files]  # 16 kHz and 8 kHz clips
    raw = [{"array": a, "sampling_rate": r} for a, r in decoded]
    np.testing.assert_allclose(served(raw), printed, atol=1e-6)  # raw clips in, as predict
    # the Hub-format export, in transformers with its own extractor, on the 16 kHz clips
    status, _, err = run_main(capsys, "export", str(out), "--format", "hf", "--out",
                              str(tmp_path / "hf"))  # fmt: skip
    assert status == 0, err
    model = transformers.AutoModelForAudioClassification.from_pretrained(tmp_path / "hf").eval()
    extractor = transformers.AutoFeatureExtractor.from_pretrained(tmp_path / "hf")
    waves = [a for a, r in decoded if r == 16000] + [decoded[1][0][::2].repeat(2)]
    assert model.config.id2label == dict(enumerate(labels))
    with torch.no_grad():
        batch = extractor(waves, sampling_rate=16000, return_tensors="pt")
        logits = model(**batch).logits.numpy()
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(served(waves), expected, atol=1e-4)


def test_audio_checkpoint_errors_before_anything_is_written(ast_ckpt, clips, tmp_path, capsys):
    import wave

    base = ["train", "--data", str(clips), "--max-steps", "1"]
    other_bins = ast_checkpoint(tmp_path / "bins", num_mel_bins=24)  # the model takes 16
    audioset_like = ast_checkpoint(tmp_path / "head", labels=5)  # a head of 5 classes, not 3
    cases = [
        ([*base, "--model", str(ast_ckpt), "--sample-rate", "8000"],
         "--sample-rate 8000: --model " + str(ast_ckpt) + " takes audio at 16,000 Hz"),
        ([*base, "--model", str(ast_ckpt), "--clip-seconds", "1"],
         "--clip-seconds 1: --model " + str(ast_ckpt) + " takes clips of 0.415 s"),
        ([*base, "--model", str(other_bins)],
         "num_mel_bins=24 but the model's config.json has num_mel_bins=16"),
        ([*base, "--model", str(audioset_like), "--val-split", "0"],  # 3 rows: < 8 devices
         "--model.init_args.ignore_mismatched_sizes true"),
    ]  # fmt: skip
    short = tmp_path / "short"
    shutil.copytree(clips, short)
    with wave.open(str(short / "rising" / "0.wav"), "wb") as w:  # 20 ms: less than one frame
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.zeros(320, "<i2").tobytes())
    cases.append(
        (["train", "--data", str(short), "--model", str(ast_ckpt)],
         "lasts 20.0 ms: --model " + str(ast_ckpt) + "'s front end needs 25 ms at least")
    )  # fmt: skip
    zero = tmp_path / "zero"
    shutil.copytree(clips, zero)
    data = bytearray((zero / "steady" / "2.wav").read_bytes())
    data[24:28] = (0).to_bytes(4, "little")  # the header's sample rate
    (zero / "steady" / "2.wav").write_bytes(bytes(data))
    cases.append(
        (["train", "--data", str(zero), "--model", str(ast_ckpt)],
         "header declares a sample rate of 0 Hz")
    )  # fmt: skip
    for i, (argv, message) in enumerate(cases):
        out = tmp_path / f"run{i}"
        status, _, err = run_main(capsys, *argv, "--out", str(out))
        assert status == 2, err
        assert message in err, err
        assert not out.exists(), f"{argv}: {sorted(out.iterdir())}"


# ---------------------------------------------------------------------------------- hf: ids
def test_a_hub_id_is_resolved_pinned_and_recorded(text_ckpt, tmp_path, monkeypatch):
    """``--model hf:org/tiny`` through a fake Hub on 127.0.0.1: what the run records (id, the
    resolved commit, each file's SHA-256), and a changed file refused as on --resume."""
    import hashlib

    hub_constants = pytest.importorskip("huggingface_hub.constants")
    from hub_server import FakeModelHub
    from jaxfeed.recipes.config import ConfigError
    from jaxfeed.recipes.sources.hub_checkpoint import check_unchanged, open_checkpoint
    from remote_servers import serve

    commit = "3" * 40
    files = {p.name: p.read_bytes() for p in text_ckpt.iterdir() if p.is_file()}
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with serve(FakeModelHub({"org/tiny": {commit: files}})) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setattr(hub_constants, "ENDPOINT", url)
        monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            url + "/{repo_id}/resolve/{revision}/{filename}")  # fmt: skip
        checkpoint = open_checkpoint("hf:org/tiny")
    record = checkpoint.record()
    assert record["model"] == "hf:org/tiny" and record["repo_id"] == "org/tiny"
    assert record["commit"] == commit and record["model_type"] == "bert"
    assert (
        record["sha256"]["model.safetensors"]
        == hashlib.sha256(files["model.safetensors"]).hexdigest()
    )
    check_unchanged(record, checkpoint)  # the same files: accepted
    changed = {**record, "sha256": {**record["sha256"], "tokenizer.json": "0" * 64}}
    with pytest.raises(ConfigError, match=r"changed since the run started: tokenizer.json"):
        check_unchanged(changed, checkpoint)
