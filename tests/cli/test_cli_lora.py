"""``jaxfeed train --task lm --model ./ckpt --lora 4 --quantize int8`` end to end on a tiny random
Llama: the run records the LoRA options, only the adapters train, ``--resume`` continues it,
``generate`` runs on it, ``export --format hf`` writes a PEFT adapter folder that ``peft`` loads
with equal logits (``--merge``: the merged checkpoint, equal to ``merge_and_unload``); the flags
that would train nothing are refused before anything is written."""

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("qwix")

from cli.test_cli_hub_lm import TEMPLATE, write_corpus  # noqa: E402
from cli_helpers import jaxfeed, run_main  # noqa: E402
from jaxfeed.cli import main  # noqa: E402
from jaxfeed.models import from_pretrained  # noqa: E402
from models.hub.chat_templates import checkpoint as with_tokenizer  # noqa: E402
from models.hub.lm_checkpoints import save_checkpoint, save_tiny  # noqa: E402

ARGV = ["--seq-len", "32", "--batch-size", "8", "--lr", "1e-2", "--lora", "4",
        "--lora-targets", "q_proj,v_proj,down_proj", "--lora-dropout", "0.05"]  # fmt: skip


@pytest.fixture(scope="module")
def peft():
    """peft, imported by the tests that load an adapter in it, not when the file is collected
    (its import took about 4 s of each xdist worker's collection)."""
    return pytest.importorskip("peft")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / "tiny-llama"
    save_checkpoint("llama", folder)
    ckpt = with_tokenizer(folder, TEMPLATE)
    corpus = write_corpus(tmp_path_factory.mktemp("text") / "corpus.txt", lines=120)
    out = tmp_path_factory.mktemp("runs") / "lora"
    first = jaxfeed("train", "--task", "lm", "--data", str(corpus), "--model", str(ckpt), *ARGV,
                    "--quantize", "int8", "--epochs", "1", "--out", str(out), timeout=300)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = jaxfeed("train", "--out", str(out), "--resume", "--epochs", "2", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return ckpt, out, first.stdout + resumed.stdout


@pytest.mark.slow  # a training process or two: about a minute of CPU
def test_lora_run_records_its_options_resumes_and_generates(lora_run, capsys):
    _ckpt, out, stdout = lora_run
    record = json.loads((out / "config.json").read_text())
    options = {k: record["options"][k] for k in ("lora", "lora_alpha", "lora_targets",
                                                  "lora_dropout", "quantize")}  # fmt: skip
    assert options == {"lora": 4, "lora_alpha": None, "lora_targets": ["q_proj", "v_proj",
                       "down_proj"], "lora_dropout": 0.05, "quantize": "int8"}  # fmt: skip
    assert "epoch 2/2" in stdout, stdout
    code, text, err = run_main(capsys, "generate", str(out), "t5 t6", "--max-new-tokens", "3")
    assert code in (0, None), err
    assert text.startswith("t5 t6")


@pytest.mark.slow  # the module's run: a training process or two
def test_lora_run_checkpoints_hold_the_adapters_not_the_frozen_model(lora_run):
    """Issue 63 D13: each saved step held the whole frozen (int8) model; now the adapters, the
    other variables and their optimizer state, the frozen weights by their fingerprint."""
    _ckpt, out, _ = lora_run
    steps = [p for p in (out / "checkpoints").iterdir() if p.name.isdigit()]
    assert steps
    for step in steps:
        meta = json.loads((step / "meta" / "metadata").read_text())
        assert meta["frozen"]["parameters"] > 0 and meta["frozen"]["base"]["folder"]
        model = [p for p in meta["shapes"] if p.startswith("['model']")]
        assert model and all(p.endswith(("['lora_a']", "['lora_b']")) or "['rngs']" in p
                             for p in model), model  # fmt: skip
        held = sum(np.prod(shape) * np.dtype(dtype).itemsize
                   for shape, dtype in meta["shapes"].values())  # fmt: skip
        assert held < meta["frozen"]["bytes"], (held, meta["frozen"])  # a tiny model's 42 KB


@pytest.mark.slow  # a training process or two: about a minute of CPU
def test_a_lora_int8_run_says_it_is_one(lora_run):
    """Issue 64, item 6: the run says its adapters, what trains of what, the frozen weights'
    bytes and int8; the fine-tuning line quotes LoRA's default rate; a run of few steps says
    why the model may barely move. The tiny Llama (hidden 32, MLP 48, 2 layers, 97 tokens):
    adapters of rank 4 on q (32->32), v (32->16) and down (48->32) are 4 x (64 + 48 + 80) = 768
    a layer, 1,536 in all; of the 22,176 frozen, the blocks' seven linear layers hold 7,680
    weights a layer (15,360 bytes as int8), their 224 output channels' float32 scales 1,792
    bytes, and the embeddings, head and norms 6,368 float32 (25,472 bytes): 42,624 bytes."""
    _ckpt, _out, stdout = lora_run
    assert (
        "LoRA: rank 4, alpha 8 (the update scaled by 2), dropout 0.05, on q_proj, v_proj, "
        "down_proj (6 layers); 1,536 of 23,712 parameters train (6.48%: the adapters); 22,176 "
        "frozen in 41.6 KB, 15,360 of them (the blocks' linear weights) int8 (--quantize): "
        "15.0 KB with per-channel scales beside, 60.0 KB in float32"
    ) in stdout, stdout
    assert "(defaults for LoRA adapters on a pretrained model: --lr 0.0002, --epochs 3" in stdout
    note = re.search(r"note: (\d+) optimizer steps are few for LoRA: the adapters start at "
                     r"zero.*give more --epochs(.*)", stdout)  # fmt: skip
    assert note and int(note[1]) < 10 and note[2] == "", stdout  # --lr 1e-2: no higher rate said


@pytest.mark.slow  # a training process or two: about a minute of CPU
def test_export_writes_an_adapter_peft_loads_and_merges(lora_run, peft, tmp_path):
    ckpt, out, _ = lora_run
    adapter = tmp_path / "adapter"
    assert main(["export", str(out), "--format", "hf", "--out", str(adapter)]) == 0
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["target_modules"]) == (
        4,
        8.0,
        ["down_proj", "q_proj", "v_proj"],
    )
    ids = np.array([[1, 5, 6, 7, 8, 9]])
    ours = np.asarray(from_pretrained(ckpt, adapter=adapter)(input_ids=ids))
    base = transformers.AutoModelForCausalLM.from_pretrained(ckpt).eval()
    tuned = peft.PeftModel.from_pretrained(base, adapter).eval()
    with torch.no_grad():
        theirs = tuned(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(ours - theirs).max() < 1e-4
    from safetensors.numpy import load_file

    # issue 64, item 8: the folder's tokenizer loads with its special tokens and chat template
    # (it had tokenizer.json alone: AutoTokenizer loaded it without eos or pad)
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in adapter.iterdir()}
    tokenizer = transformers.AutoTokenizer.from_pretrained(adapter)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<s>", "</s>",
                                                                              "<pad>")  # fmt: skip
    assert tokenizer.chat_template == TEMPLATE and tokenizer.pad_token_id == 0
    tensors = load_file(adapter / "adapter_model.safetensors")
    assert all(np.abs(v).max() > 0 for k, v in tensors.items() if "lora_B" in k)  # trained
    merged = tmp_path / "merged"
    assert main(["export", str(out), "--format", "hf", "--out", str(merged), "--merge"]) == 0
    assert (merged / "model.safetensors").is_file() and not (
        merged / "adapter_config.json"
    ).exists()
    full = transformers.AutoModelForCausalLM.from_pretrained(merged).eval()
    with torch.no_grad():
        unloaded = tuned.merge_and_unload()(torch.from_numpy(ids)).logits.numpy()
        np.testing.assert_allclose(full(torch.from_numpy(ids)).logits.numpy(), unloaded,
                                   atol=1e-4)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--quantize", "int8"], "--quantize freezes the weights, so nothing would train"),
        (["--lora", "4"], "--lora 4: adapters train on a pretrained model's frozen weights"),
        (["--lora", "0"], "--lora"),
        (["--lora", "4", "--lora-dropout", "1.5"], "--lora-dropout"),
    ],
)
def test_flags_that_train_nothing_are_refused(argv, message, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", lines=20)
    code, _, err = run_main(capsys, "train", "--task", "lm", "--data", str(corpus), *argv,
                            "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_empty_lora_targets_are_one_line_naming_the_flag_before_anything_starts(tmp_path, capsys):
    """issue 63, D20: ``--lora-targets ""`` (or ``,``) failed after JAX started, with exit 1 and
    "ValueError: LoRA targets must be module names, got []", naming no flag."""
    ckpt = with_tokenizer(save_tiny(tmp_path / "tiny-llama"))
    corpus = write_corpus(tmp_path / "corpus.txt", lines=20)
    argv = ["train", "--task", "lm", "--data", str(corpus), "--model", str(ckpt), "--lora", "4"]
    done = jaxfeed(*argv, "--lora-targets", "", "--out", str(tmp_path / "run"), timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "jaxfeed train: error: --lora-targets: LoRA targets must be module names (q_proj, value, "
        "...), got []"
    ]
    assert done.stdout == "" and not (tmp_path / "run").exists()  # no data read, no folder
    code, out, err = run_main(capsys, *argv, "--lora-targets", ",", "--out", str(tmp_path / "r2"))
    assert code == 2 and err.startswith("jaxfeed train: error: --lora-targets: ") and out == ""
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r2").exists()


@pytest.mark.slow  # a training process or two: about a minute of CPU
def test_text_classification_lora_run_evals_predicts_and_exports_for_peft(peft, tmp_path, capsys):
    """A BERT masked-LM checkpoint on labelled texts with --lora: the new classifier trains with
    the adapters, eval and predict serve the run, the adapter folder carries the head."""
    from cli.test_cli_hub import text_checkpoint, write_reviews

    ckpt = text_checkpoint(tmp_path / "tiny-bert")
    reviews = write_reviews(tmp_path / "reviews.csv", rows=80)
    out = tmp_path / "run"
    run = jaxfeed("train", "--data", str(reviews), "--text-column", "review", "--label-column",
                  "stars", "--model", str(ckpt), "--batch-size", "16", "--epochs", "1",
                  "--lora", "2", "--out", str(out), timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    for command in (["eval", str(out), "--json"], ["predict", str(out), "w5 w30", "--json"]):
        code, _, err = run_main(capsys, *command)
        assert code == 0, err
    adapter = tmp_path / "adapter"
    assert main(["export", str(out), "--format", "hf", "--out", str(adapter)]) == 0
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_CLS" and "classifier" in config["modules_to_save"]
    base = transformers.AutoModelForSequenceClassification.from_pretrained(ckpt, num_labels=2)
    tuned = peft.PeftModel.from_pretrained(base, adapter).eval()
    ids = np.array([[2, 5, 30, 3]])
    with torch.no_grad():
        theirs = tuned(input_ids=torch.from_numpy(ids)).logits.numpy()
    ours = from_pretrained(ckpt, task="sequence-classification", num_labels=2, adapter=adapter)
    assert np.abs(np.asarray(ours(input_ids=ids)) - theirs).max() < 1e-4


@pytest.mark.slow  # a training process or two: about a minute of CPU
def test_image_lora_int8_run_predicts_and_exports_for_peft(peft, tmp_path, capsys):
    """A bare ViT on a folder of images with --lora --quantize int8: the adapter folder (with
    the new classifier) loads in peft with the logits of jaxfeed's float32 model."""
    from cli.test_cli_hub import pets, vit_ckpt

    ckpt, images = (
        vit_ckpt.__wrapped__(FakeFactory(tmp_path)),
        pets.__wrapped__(FakeFactory(tmp_path)),
    )
    out = tmp_path / "run"
    run = jaxfeed("train", "--data", str(images), "--model", str(ckpt), "--batch-size", "8",
                  "--epochs", "1", "--lora", "2", "--lora-targets", "query,value",
                  "--quantize", "int8", "--out", str(out), timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    code, _, err = run_main(capsys, "predict", str(out), str(next(images.rglob("*.png"))))
    assert code == 0, err
    adapter = tmp_path / "adapter"
    assert main(["export", str(out), "--format", "hf", "--out", str(adapter)]) == 0
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["target_modules"] == ["q_proj", "v_proj"], config  # transformers 5's names
    assert config["modules_to_save"] == ["classifier"]
    base = transformers.AutoModelForImageClassification.from_pretrained(ckpt, num_labels=2)
    tuned = peft.PeftModel.from_pretrained(base, adapter).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        theirs = tuned(pixel_values=torch.from_numpy(x)).logits.numpy()
    ours = from_pretrained(ckpt, task="image-classification", num_labels=2, adapter=adapter)
    assert np.abs(np.asarray(ours(pixel_values=x)) - theirs).max() < 1e-4


class FakeFactory:
    """``tmp_path_factory`` enough for the image fixtures of ``test_cli_hub`` called directly."""

    def __init__(self, root):
        self.root = root

    def mktemp(self, name):
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path
