"""``jaxfeed train --task lm --model ./ckpt`` end to end on a tiny random Llama-shape checkpoint
saved by ``transformers`` (no download) and a generated corpus: one run, stopped by SIGTERM after
its first epoch and resumed, shared by every test: validation perplexity before and after,
``generate RUN`` (plain and ``--chat``) on the fine-tuned weights, ``export --format hf`` loaded by
``transformers`` with equal logits, a changed checkpoint refused on ``--resume``, and the
checkpoints and tasks that do not fit refused before anything is written."""

import contextlib
import csv
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytestmark = pytest.mark.slow  # two training processes (SIGTERM, resume): about 40 s of CPU

from cli_helpers import jaxfeed, run_main  # noqa: E402
from jaxfeed.cli import main  # noqa: E402
from jaxfeed.models import from_pretrained, preprocessor  # noqa: E402
from jaxfeed.text import generate  # noqa: E402
from models.hub.chat_templates import checkpoint as with_tokenizer  # noqa: E402
from models.hub.lm_checkpoints import save_checkpoint  # noqa: E402

EPOCHS = 3
TEMPLATE = "<s>{{ messages[0]['content'] }} t3{% if add_generation_prompt %} t4{% endif %}"
ARGV = ["--seq-len", "32", "--batch-size", "8", "--epochs", str(EPOCHS), "--lr", "3e-3"]


def write_corpus(path: Path, lines: int = 240, seed: int = 0) -> Path:
    """Runs of consecutive tokens (``t17 t18 ... t24``): a pattern the model can learn."""
    rng = random.Random(seed)
    rows = []
    for _ in range(lines):
        first = rng.randrange(5, 80)
        rows.append(" ".join(f"t{first + k}" for k in range(8)))
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A tiny random Llama (untied, grouped-query attention), a word-level tokenizer.json and a
    chat template."""
    folder = tmp_path_factory.mktemp("hub") / "tiny-llama"
    save_checkpoint("llama", folder)
    return with_tokenizer(folder, TEMPLATE)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("text") / "corpus.txt")


@pytest.fixture(scope="module")
def lm_run(ckpt, corpus, tmp_path_factory):
    """``jaxfeed train --task lm --model CKPT``, stopped by SIGTERM once epoch 1 is reported,
    then resumed to the end: ``(run folder, first stdout, resumed stdout)``."""
    out = tmp_path_factory.mktemp("runs") / "corpus"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "jaxfeed.cli", "train", "--task", "lm", "--data", str(corpus),
           "--model", str(ckpt), *ARGV, "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)  # fmt: skip
    first = []
    try:
        for line in proc.stdout:
            first.append(line)
            if line.startswith(f"epoch 1/{EPOCHS}"):
                proc.send_signal(signal.SIGTERM)
                break
        rest, err = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    first_out = "".join(first) + rest
    assert proc.returncode == 128 + signal.SIGTERM, first_out + err[-3000:]
    resumed = jaxfeed("train", "--out", str(out), "--resume", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return out, first_out, resumed.stdout


@pytest.fixture(scope="module")
def exported(lm_run, tmp_path_factory):
    target = tmp_path_factory.mktemp("export") / "tuned"
    assert main(["export", str(lm_run[0]), "--format", "hf", "--out", str(target)]) == 0  # here
    return target


def test_fine_tuning_lowers_validation_perplexity(ckpt, lm_run):
    out, first, resumed = lm_run
    assert f"pretrained: llama from {ckpt}" in first
    assert "tokenizer: the checkpoint's tokenizer.json (97 tokens)" in first  # none trained
    assert "packing: the " in first and "windows of 32 tokens" in first
    assert "fine-tuning: --lr 0.003, --epochs 3, --warmup-steps" in first
    before = float(re.search(r"before fine-tuning: validation perplexity ([\d.]+) \(the pretrained "
                             r"model\)", first).group(1))  # fmt: skip
    line = re.search(r"validation perplexity: ([\d.]+) before fine-tuning \(the pretrained model\), "
                     r"([\d.]+) after", resumed)  # fmt: skip
    assert line is not None, resumed
    assert float(line.group(1)) == pytest.approx(before, rel=1e-4)  # recorded, not re-measured
    after = float(line.group(2))
    assert after < 0.5 * before, (before, after)
    print(f"validation perplexity: {before} before, {after} after")
    record = json.loads((out / "config.json").read_text())
    kept = record["pretrained"]
    assert kept["model_type"] == "llama" and kept["folder"] == str(ckpt)
    weights = hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    assert kept["sha256"]["model.safetensors"] == weights
    assert (out / "tokenizer.json").read_bytes() == (ckpt / "tokenizer.json").read_bytes()
    # the resumed run continued from its epoch-1 checkpoint: every epoch logged once
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r["epoch"] for r in rows if "kind" not in r and "eval_loss" in r and "seconds" in r]
    assert sorted(epochs) == list(range(1, EPOCHS + 1)), epochs
    assert "preprocessing: as saved in the run" in resumed
    assert "before fine-tuning:" not in resumed  # not measured again on resume


def test_export_hf_loads_in_transformers_with_equal_logits(ckpt, exported):
    import torch

    ids = np.array([[1, 5, 6, 7, 8, 9, 10], [1, 40, 41, 42, 43, 44, 45]])
    reference = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    with torch.no_grad():
        expected = reference(torch.tensor(ids)).logits.numpy()
    mine = np.asarray(from_pretrained(exported, task="causal-lm")(input_ids=ids))
    np.testing.assert_allclose(mine, expected, atol=1e-4, rtol=1e-4)
    original = np.asarray(from_pretrained(ckpt, task="causal-lm")(input_ids=ids))
    assert np.abs(original - expected).max() > 1e-2  # the fine-tuned weights, not the checkpoint's
    assert (exported / "tokenizer.json").read_bytes() == (ckpt / "tokenizer.json").read_bytes()


def test_generate_run_uses_the_fine_tuned_weights(lm_run, ckpt, exported, capsys):
    out = lm_run[0]
    prompts = ["t20 t21 t22", "t50"]
    args = ["--temperature", "0", "--max-new-tokens", "5", "--json"]
    status, said, err = run_main(capsys, "generate", str(out), *prompts, *args)
    assert status == 0, err
    texts = [row["text"] for row in json.loads(said)]
    tok = preprocessor(ckpt)
    assert texts == generate(from_pretrained(exported), tok, prompts, 5, temperature=0)
    assert texts != generate(from_pretrained(ckpt), tok, prompts, 5, temperature=0)
    assert texts[0] == "t23 t24 t25 t26 t27"  # it learned the corpus' runs
    # --chat: each prompt rendered by the checkpoint's chat template, special tokens as written
    # (two prompts of the lengths above: the decoding compiled for them serves these too)
    status, said, err = run_main(capsys, "generate", str(out), "t20", "t50", "--chat", *args)
    assert status == 0, err
    rendered = ["<s>t20 t3 t4", "<s>t50 t3 t4"]
    expected = generate(from_pretrained(exported), tok, rendered, 5, temperature=0,
                        add_special_tokens=False)  # fmt: skip
    assert [row["text"] for row in json.loads(said)] == expected


def test_resume_refuses_a_checkpoint_whose_files_changed(lm_run, ckpt, tmp_path, capsys):
    moved = tmp_path / "ckpt"
    shutil.copytree(ckpt, moved)
    run = tmp_path / "run"
    shutil.copytree(lm_run[0], run)
    config = run / "config.json"
    config.write_text(config.read_text().replace(str(ckpt), str(moved)))
    data = bytearray((moved / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    (moved / "model.safetensors").write_bytes(bytes(data))
    before = sorted(p.name for p in run.rglob("*"))
    status, _, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "4")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "changed since the run started: model.safetensors (changed)" in err, err
    assert sorted(p.name for p in run.rglob("*")) == before  # nothing written


def test_checkpoints_and_tasks_that_do_not_fit_are_refused(ckpt, corpus, tmp_path, capsys):
    from hub_checkpoints import save_checkpoint as save_encoder

    bert = tmp_path / "bert"
    save_encoder(bert, "bert", "masked-lm")
    table = tmp_path / "reviews.csv"
    with open(table, "w", newline="") as f:
        csv.writer(f).writerows([["text", "label"]] + [[f"t{i} t{i + 1}", i % 2] for i in
                                                       range(5, 45)])  # fmt: skip
    capsys.readouterr()
    lm = ["--task", "lm", "--data", str(corpus)]
    cases = [
        ([*lm, "--model", str(bert)], f"--model {bert} is an encoder (bert): --task lm needs a "
         "causal language model"),
        (["--data", str(table), "--label-column", "label", "--model", str(ckpt)],
         f"--model {ckpt} is a causal language model (llama): it fine-tunes with --task lm"),
        ([*lm, "--model", str(ckpt), "--seq-len", "129"],
         "--seq-len 129: " + str(ckpt) + " (llama) takes at most 128 positions"),
        ([*lm, "--model", str(ckpt), "--tokenizer", str(ckpt / "tokenizer.json")],
         "brings its own tokenizer.json; drop --tokenizer"),
    ]  # fmt: skip
    for i, (argv, message) in enumerate(cases):
        out = tmp_path / f"run{i}"
        status, _, err = run_main(capsys, "train", *argv, "--max-steps", "1", "--out", str(out))
        assert status == 2 and len(err.strip().splitlines()) == 1, err
        assert message in err, err
        assert not out.exists()


def test_a_one_epoch_run_generates_and_evaluates_from_its_checkpoint(ckpt, corpus, tmp_path,
                                                                    capsys):  # fmt: skip
    """``--epochs 1`` with the fine-tuning defaults (a warmup: a step count in the optimizer
    state): ``generate RUN`` and ``eval --checkpoint last`` restore the checkpoint's model
    alone, never the optimizer state a rebuilt optimizer cannot match."""
    out = tmp_path / "one"
    done = jaxfeed("train", "--task", "lm", "--data", str(corpus), "--model", str(ckpt),
                   "--seq-len", "32", "--batch-size", "8", "--epochs", "1", "--out", str(out),
                   timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    status, said, err = run_main(capsys, "generate", str(out), "t20 t21", "--temperature", "0",
                                 "--max-new-tokens", "3", "--json")  # fmt: skip
    assert status == 0, err
    assert len(json.loads(said)) == 1
    status, said, err = run_main(capsys, "eval", str(out), "--checkpoint", "last", "--data",
                                 str(corpus), "--json")  # fmt: skip
    assert status == 0, err
    assert json.loads(said)["checkpoint"]["which"] == "last"
