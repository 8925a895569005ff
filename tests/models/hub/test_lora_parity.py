"""LoRA adapters against ``peft`` on tiny random checkpoints (Llama, GPT-2, BERT, ViT): an adapter
``peft`` saved gives equal logits in jaxfeed, one jaxfeed saved loads in ``peft`` with equal
logits, the merged checkpoint equals ``merge_and_unload()``; int8 weights stay within the
documented tolerance; bad adapters and settings are refused, naming the value or the file."""

import json
import re
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


def peft_adapter(folder: Path, family: str, out: Path, targets: list[str] | None = None):
    """A peft LoRA model of ``family`` (on ``targets``, default the family's case) with random
    (non-zero) B, saved to ``out``."""
    cased, task_type = CASES[family]
    targets = targets or cased
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


def test_an_int8_model_merges_into_the_checkpoints_full_precision_weights(bases, tmp_path):
    """save_pretrained(merge=True) of an int8 model: float32 weights equal to peft's
    merge_and_unload() of the same adapter on the full-precision checkpoint (int8 rounding
    would move the logits by about 1e-2, not 1e-4)."""
    from safetensors.numpy import load_file

    reference = peft_adapter(bases / "llama", "llama", tmp_path / "adapter")
    int8 = from_pretrained(bases / "llama", adapter=tmp_path / "adapter", quantize="int8")
    out = save_pretrained(int8, tmp_path / "merged", merge=True)
    tensors = load_file(out / "model.safetensors")
    assert {str(v.dtype) for v in tensors.values()} == {"float32"}
    unloaded = reference.merge_and_unload().eval()
    theirs = {k: v.detach().numpy() for k, v in unloaded.state_dict().items()}
    for name, value in tensors.items():
        np.testing.assert_allclose(value, theirs[name], atol=1e-5, err_msg=name)
    x = inputs("llama")
    merged = torch_base(out, "llama")
    assert np.abs(torch_logits(merged, x) - torch_logits(unloaded, x)).max() < TOL


def test_default_targets_are_pefts(bases, tmp_path):
    """LoRA() without targets adapts the layers PEFT's LoraConfig() adapts (BERT: query and
    value): the saved adapter holds the tensors PEFT's own default adapter holds."""
    from peft.utils import get_peft_model_state_dict
    from safetensors.numpy import load_file

    for family in ("llama", "gpt2", "bert"):
        task_type = CASES[family][1]
        default = peft.LoraConfig(r=2, task_type=task_type)
        theirs = peft.get_peft_model(torch_base(bases / family, family), default)
        want = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(theirs).items()
                if ".lora_" in k}  # fmt: skip
        out = save_pretrained(from_pretrained(bases / family, lora=LoRA(rank=2)),
                              tmp_path / family)  # fmt: skip
        got = {k: v.shape for k, v in load_file(out / "adapter_model.safetensors").items()
               if ".lora_" in k}  # fmt: skip
        assert got == want, family
        config = json.loads((out / "adapter_config.json").read_text())
        assert config["target_modules"] == sorted(theirs.peft_config["default"].target_modules)


def test_an_adapter_saved_before_the_vit_renames_loads(bases, tmp_path):
    """transformers < 5 named ViT's modules as its checkpoints still do (``query``, ``value``
    under ``encoder.layer.N.attention.attention``): a PEFT adapter of then, with those
    target_modules and tensor names, loads with the logits of the same adapter under today's
    names."""
    from safetensors.numpy import load_file, save_file

    reference = peft_adapter(bases / "vit", "vit", tmp_path / "new", targets=["q_proj", "v_proj"])
    old_names = {"q_proj": "query", "v_proj": "value"}
    tensors = {
        re.sub(r"\.layers\.(\d+)\.attention\.([qv]_proj)\.",
               lambda m: f".encoder.layer.{m[1]}.attention.attention.{old_names[m[2]]}.", k): v
        for k, v in load_file(tmp_path / "new" / "adapter_model.safetensors").items()
    }  # fmt: skip
    assert len(tensors) == 8 and all(".attention.attention." in k for k in tensors), tensors
    config = json.loads((tmp_path / "new" / "adapter_config.json").read_text())
    config["target_modules"] = ["query", "value"]
    (tmp_path / "old").mkdir()
    save_file(tensors, tmp_path / "old" / "adapter_model.safetensors")
    (tmp_path / "old" / "adapter_config.json").write_text(json.dumps(config))
    model = from_pretrained(bases / "vit", adapter=tmp_path / "old")
    x = inputs("vit")
    assert np.abs(jax_logits(model, x) - torch_logits(reference, x)).max() < TOL


def test_adapter_dropout_is_off_at_inference(bases):
    """from_pretrained's model is inference-ready: LoRA(dropout=0.5) changes nothing until the
    model trains (the logits equal those of the same adapters without dropout)."""
    x = inputs("llama")
    dropped, plain = (from_pretrained(bases / "llama", lora=LoRA(rank=2, dropout=p))
                      for p in (0.5, 0.0))  # fmt: skip
    randomise_adapters(plain)
    same = variables(plain)
    for path, var in variables(dropped).items():
        if path.endswith(("lora_a", "lora_b")):
            var.set_value(same[path].get_value())
    expected = jax_logits(plain, x)
    assert np.abs(expected - jax_logits(from_pretrained(bases / "llama"), x)).max() > 1e-2
    np.testing.assert_allclose(jax_logits(dropped, x), expected, atol=TOL)
    dropped.train()
    assert np.abs(jax_logits(dropped, x) - expected).max() > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 0}, "rank must be a positive int, got 0"),
        ({"rank": 2, "alpha": 0}, "alpha must be a finite number above 0, at most 1e.06, got 0"),
        ({"rank": 2, "alpha": float("inf")}, "alpha must be a finite number above 0.*got inf"),
        ({"rank": 2, "alpha": float("nan")}, "alpha must be a finite number above 0.*got nan"),
        ({"rank": 2, "alpha": 1e300}, "alpha must be a finite number above 0.*got 1e.300"),
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
