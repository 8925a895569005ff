"""LoRA adapters against ``peft`` on tiny random checkpoints (Llama, GPT-2, BERT, ViT): an adapter
``peft`` saved gives equal logits in jaxfeed, one jaxfeed saved loads in ``peft`` with equal
logits, the merged checkpoint equals ``merge_and_unload()``; int8 weights stay within the
documented tolerance; bad adapters and settings are refused, naming the value or the file."""

import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft: Any = None  # imported by _import_peft when this file's first test runs, not at collection

sys.path.insert(0, str(Path(__file__).parent))
from lm_checkpoints import save_checkpoint as save_lm  # noqa: E402

from jaxfeed.models import LoRA, from_pretrained, save_pretrained  # noqa: E402
from jaxfeed.models.hub.files import CheckpointError  # noqa: E402
from jaxfeed.models.hub.weights import variables  # noqa: E402

TOL = 1e-4
INT8_TOL = 0.05  # the docs' figure for int8 logits (measured ~0.013 on these checkpoints)
# family -> (peft target_modules, task_type)
CASES = {
    "llama": (["q_proj", "v_proj", "down_proj"], "CAUSAL_LM"),
    "gpt2": (["c_attn", "c_proj"], "CAUSAL_LM"),
    "bert": (["query", "value", "dense"], "SEQ_CLS"),
    "vit": (["q_proj", "v_proj", "fc1"], None),  # transformers >= 5 names ViT's modules so
}
# jaxfeed takes the checkpoint's module names too (ViT's query/key/value/dense)
JAX_TARGETS = {**{k: v[0] for k, v in CASES.items()}, "vit": ["query", "value", "dense"]}


def _vit(folder: Path):
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=37, image_size=32, patch_size=8,
                                    num_labels=3)  # fmt: skip
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(folder)


def _bert(folder: Path):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=24, num_labels=3)  # fmt: skip
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)


@pytest.fixture(scope="module", autouse=True)
def _import_peft():
    """peft for this file's tests (and a skip without it), imported when they run: at
    collection its import took about 4 s of every xdist worker."""
    global peft  # the helpers below use the module's name
    peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    save_lm("llama", root / "llama")
    save_lm("gpt2", root / "gpt2")
    _bert(root / "bert")
    _vit(root / "vit")
    return root


def torch_base(folder: Path, family: str):
    cls = {"llama": transformers.AutoModelForCausalLM, "gpt2": transformers.AutoModelForCausalLM,
           "bert": transformers.AutoModelForSequenceClassification,
           "vit": transformers.AutoModelForImageClassification}[family]  # fmt: skip
    return cls.from_pretrained(folder).eval()


def inputs(family: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if family == "vit":
        return {"pixel_values": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
    vocab = 50 if family == "bert" else 97
    ids = rng.integers(3, vocab, (2, 6))
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def torch_logits(model, x) -> np.ndarray:
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v) for k, v in x.items()}).logits.numpy()


def jax_logits(model, x) -> np.ndarray:
    return np.asarray(model(**{k: jnp.asarray(v) for k, v in x.items()}))


def peft_adapter(folder: Path, family: str, out: Path):
    """A peft LoRA model of ``family`` with random (non-zero) B, saved to ``out``."""
    targets, task_type = CASES[family]
    torch.manual_seed(1)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type=task_type)
    model = peft.get_peft_model(torch_base(folder, family), config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    model.save_pretrained(out)
    return model.eval()


def randomise_adapters(model, seed: int = 2) -> None:
    key = jax.random.key(seed)
    for i, (path, var) in enumerate(sorted(variables(model).items())):
        if path.endswith("lora_b"):
            v = var.get_value()
            var.set_value(0.5 * jax.random.normal(jax.random.fold_in(key, i), v.shape, v.dtype))


@pytest.mark.parametrize("family", sorted(CASES))
def test_peft_adapter_loads_with_equal_logits_and_merges_as_peft(bases, family, tmp_path):
    reference = peft_adapter(bases / family, family, tmp_path / "adapter")
    x = inputs(family)
    model = from_pretrained(bases / family, adapter=tmp_path / "adapter")
    expected = torch_logits(reference, x)
    assert np.abs(jax_logits(model, x) - expected).max() < TOL
    # merged: the full checkpoint equals peft's merge_and_unload()
    save_pretrained(model, tmp_path / "merged", merge=True)
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    merged = torch_base(tmp_path / "merged", family)
    unloaded = reference.merge_and_unload().eval()
    assert np.abs(torch_logits(merged, x) - torch_logits(unloaded, x)).max() < TOL


@pytest.mark.parametrize("family", sorted(CASES))
def test_saved_adapter_loads_in_peft_with_equal_logits(bases, family, tmp_path):
    targets = JAX_TARGETS[family]
    model = from_pretrained(bases / family, lora=LoRA(rank=2, alpha=6, targets=targets))
    x = inputs(family)
    before = jax_logits(model, x)
    assert np.abs(before - torch_logits(torch_base(bases / family, family), x)).max() < TOL
    randomise_adapters(model)
    out = save_pretrained(model, tmp_path / "adapter")
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json",
                                                     "adapter_model.safetensors"]  # fmt: skip
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["fan_in_fan_out"]) == (2, 6, family == "gpt2")
    loaded = peft.PeftModel.from_pretrained(torch_base(bases / family, family), out).eval()
    after = jax_logits(model, x)
    assert np.abs(after - before).max() > 1e-2  # the adapters do something
    assert np.abs(torch_logits(loaded, x) - after).max() < TOL


def test_new_head_is_saved_as_modules_to_save(bases, tmp_path):
    """A base checkpoint (no classifier) fine-tuned for classification: the new head travels in
    the adapter (PEFT's modules_to_save) and trains with the adapters."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32)  # fmt: skip
    transformers.BertModel(config).save_pretrained(tmp_path / "bare")
    with pytest.warns(UserWarning, match="newly initialised"):
        model = from_pretrained(tmp_path / "bare", task="sequence-classification", num_labels=3,
                                lora=LoRA(rank=2))  # fmt: skip
    assert {"classifier.kernel", "classifier.bias"} <= set(model.trainable_with_lora)
    randomise_adapters(model)
    out = save_pretrained(model, tmp_path / "adapter")
    assert json.loads((out / "adapter_config.json").read_text())["modules_to_save"] == [
        "classifier"
    ]
    x = inputs("bert")
    base = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "bare", num_labels=3
    )
    loaded = peft.PeftModel.from_pretrained(base, out).eval()
    assert np.abs(torch_logits(loaded, x) - jax_logits(model, x)).max() < TOL
    again = from_pretrained(tmp_path / "bare", task="sequence-classification", num_labels=3,
                            adapter=out)  # fmt: skip
    assert np.abs(jax_logits(again, x) - jax_logits(model, x)).max() < TOL


def test_int8_logits_within_the_documented_tolerance(bases, tmp_path):
    peft_adapter(bases / "llama", "llama", tmp_path / "adapter")
    x = inputs("llama")
    full = from_pretrained(bases / "llama", adapter=tmp_path / "adapter")
    int8 = from_pretrained(bases / "llama", adapter=tmp_path / "adapter", quantize="int8")
    layer = int8.layers[0].attention.key
    assert layer.kernel[...].dtype == jnp.int8 and layer.lora_a is None
    assert int8.layers[0].attention.query.lora_a[...].dtype == jnp.float32
    diff = np.abs(jax_logits(int8, x) - jax_logits(full, x)).max()
    assert 0 < diff < INT8_TOL * np.abs(jax_logits(full, x)).max()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 0}, "rank must be a positive int, got 0"),
        ({"rank": 2, "alpha": 0}, "alpha must be a positive number, got 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"dropout": -0.1}, r"dropout must be in \[0, 1\), got -0.1"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoRA(**kwargs)


def test_bad_targets_rank_and_quantize_are_refused(bases):
    with pytest.raises(ValueError, match=r"'qkv' matches no linear layer.*q_proj, up_proj, v_proj"):
        from_pretrained(bases / "llama", lora=LoRA(targets=["qkv"]))
    with pytest.raises(ValueError, match="rank 64 is larger than the layer"):
        from_pretrained(bases / "llama", lora=LoRA(rank=64))
    with pytest.raises(ValueError, match="quantize='int8' freezes the weights"):
        from_pretrained(bases / "llama", quantize="int8")


def test_bad_adapter_folders_are_refused(bases, tmp_path):
    from safetensors.numpy import load_file, save_file

    peft_adapter(bases / "llama", "llama", tmp_path / "good")
    tensors = load_file(tmp_path / "good" / "adapter_model.safetensors")
    config = (tmp_path / "good" / "adapter_config.json").read_text()

    def folder(name, tensors, config=config):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(config)
        if tensors is not None:
            save_file(tensors, tmp_path / name / "adapter_model.safetensors")
        return tmp_path / name

    missing = folder("missing", dict(list(tensors.items())[1:]))
    with pytest.raises(CheckpointError, match=r"adapter_model.safetensors.*missing base_model"):
        from_pretrained(bases / "llama", adapter=missing)
    extra = folder("extra", {**tensors, "base_model.model.x.lora_A.weight": np.zeros((4, 4))})
    with pytest.raises(CheckpointError, match=r"extra base_model.model.x.lora_A.weight"):
        from_pretrained(bases / "llama", adapter=extra)
    pickled = folder("pickled", None)
    (pickled / "adapter_model.bin").write_bytes(b"not read")
    with pytest.raises(CheckpointError, match=r"only pickled weights \(adapter_model.bin\)"):
        from_pretrained(bases / "llama", adapter=pickled)
    rank = folder("rank", tensors, config.replace('"r": 4', '"r": 2'))
    with pytest.raises(CheckpointError, match=r"has shape .*\(another base model or rank\)"):
        from_pretrained(bases / "llama", adapter=rank)
    with pytest.raises(CheckpointError, match="match no layer of this gpt2 model"):
        from_pretrained(bases / "gpt2", adapter=tmp_path / "good")


def test_adapters_on_some_layers_leave_the_stack_and_load_in_peft(bases, tmp_path):
    """Adapters on layer 0's q_proj only: the layers must differ, so the stack becomes a list
    of layers (the others stay plain), and the adapter saved loads in peft with equal logits."""
    from flax import nnx

    from jaxfeed.models.stacked import Stack

    whole = from_pretrained(bases / "llama", lora=LoRA(rank=2, targets=["q_proj"]))
    assert isinstance(whole.layers, Stack)  # every layer alike: still one stack
    model = from_pretrained(
        bases / "llama", lora=LoRA(rank=2, targets=["layers.0.self_attn.q_proj"])
    )
    assert isinstance(model.layers, nnx.List)
    assert model.hub_lora_modules == ("model.layers.0.self_attn.q_proj",)
    assert model.layers[1].attention.query.__class__ is nnx.Linear
    randomise_adapters(model)
    out = save_pretrained(model, tmp_path / "adapter")
    loaded = peft.PeftModel.from_pretrained(torch_base(bases / "llama", "llama"), out).eval()
    x = inputs("llama")
    assert np.abs(torch_logits(loaded, x) - jax_logits(model, x)).max() < TOL
