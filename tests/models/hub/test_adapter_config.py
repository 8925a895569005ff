"""PEFT adapter folders that lie, hold nonsense or ask for what jaxfeed cannot do (issue 63: D08,
D12, D14, D18, D19): each refused with one :class:`CheckpointError` naming the file and the field
(never an AttributeError, TypeError or ``re.error``), each regular expression matched in bounded
time, and an adapter read from ``adapter_model.safetensors`` whatever else its folder holds.

The checkpoint and the adapter are written by jaxfeed alone (no torch): the subject here is the
files, not parity with ``peft`` (``test_lora_parity.py``)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxfeed.models import LoRA, from_pretrained, save_pretrained
from jaxfeed.models.hub.files import CheckpointError, write_safetensors
from jaxfeed.models.hub.weights import variables
from models.hub.lm_checkpoints import save_tiny


def lora_values(model) -> dict[str, np.ndarray]:
    """The model's adapters by path (compared instead of logits: no forward pass to compile)."""
    return {p: np.asarray(v.get_value()) for p, v in variables(model).items()
            if p.endswith(("lora_a", "lora_b"))}  # fmt: skip


def assert_same_adapters(model, expected: dict[str, np.ndarray]) -> None:
    got = lora_values(model)
    assert sorted(got) == sorted(expected)
    for path, value in expected.items():
        np.testing.assert_array_equal(got[path], value, err_msg=path)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def adapter(base, tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """A jaxfeed-saved adapter (rank 2 on q_proj and v_proj, B random) and its tensors."""
    model = from_pretrained(base, lora=LoRA(rank=2, targets=["q_proj", "v_proj"]))
    key = jax.random.key(3)
    for i, (path, var) in enumerate(sorted(variables(model).items())):
        if path.endswith("lora_b"):
            value = var.get_value()
            var.set_value(jax.random.normal(jax.random.fold_in(key, i), value.shape, value.dtype))
    out = save_pretrained(model, tmp_path_factory.mktemp("adapter") / "adapter")
    return out, lora_values(model)


def variant(adapter, tmp_path, config_text: str | None = None, **changes) -> Path:
    """A copy of the adapter folder with ``adapter_config.json`` changed (``changes``) or
    replaced (``config_text``)."""
    folder = tmp_path / "variant"
    shutil.copytree(adapter[0], folder)
    path = folder / "adapter_config.json"
    if config_text is None:
        config_text = json.dumps({**json.loads(path.read_text()), **changes})
    path.write_text(config_text)
    return folder


# ------------------------------------------------------------------------------ D14
@pytest.mark.parametrize(
    ("text", "changes", "message"),
    [
        ("[1, 2]", {}, r"adapter_config.json must hold a JSON object .*got list"),
        ('"LORA"', {}, r"adapter_config.json must hold a JSON object .*got str"),
        (None, {"target_modules": [1, 2]}, r"target_modules must be a list of module names"),
        (None, {"target_modules": ["q_proj", None]}, r"target_modules must be a list of module"),
        (None, {"target_modules": "(q_proj"}, r"target_modules: '\(q_proj' is not a regular"),
        (None, {"modules_to_save": [7]}, r"modules_to_save must be a list of module names"),
        (None, {"modules_to_save": "lm_head"}, r"modules_to_save must be a list .*'lm_head'"),
        (None, {"r": 2.5}, r"r must be a positive integer \(the adapters' rank\), got 2.5"),
        (None, {"r": True}, r"r must be a positive integer .*got True"),
        (None, {"lora_alpha": "16"}, r"lora_alpha must be a number, got '16'"),
    ],
)
def test_a_config_of_the_wrong_shape_names_the_file_and_the_field(
    base, adapter, tmp_path, text, changes, message
):
    """Each escaped as AttributeError, TypeError or re.error, or was read as something else
    (r 2.5 as 2, modules_to_save "lm_head" as the letters l, m, ...)."""
    folder = variant(adapter, tmp_path, text, **changes)
    with pytest.raises(CheckpointError, match=message) as caught:
        from_pretrained(base, adapter=folder)
    assert str(folder / "adapter_config.json") in str(caught.value)


# ------------------------------------------------------------------------------ D12
@pytest.mark.parametrize("alpha", ["1e999", "1e300", "Infinity"])
def test_an_alpha_that_is_not_finite_or_too_large_is_refused_naming_the_file(
    base, adapter, tmp_path, alpha
):
    """1e999 and Infinity read as inf, 1e300 overflowed float32: each gave NaN logits."""
    text = (adapter[0] / "adapter_config.json").read_text()
    config = json.loads(text)
    text = text.replace(f'"lora_alpha": {config["lora_alpha"]}', f'"lora_alpha": {alpha}')
    folder = variant(adapter, tmp_path, text)
    with pytest.raises(CheckpointError, match=r"adapter_config.json: lora_alpha: LoRA alpha must "
                       r"be a finite number above 0, at most 1e\+06"):  # fmt: skip
        from_pretrained(base, adapter=folder)


# ------------------------------------------------------------------------------ D08
@pytest.mark.timeout(120)  # the old code spent hours in one re.fullmatch
@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(.*)*!", r"repeats a part that holds a quantifier"),
        (r"(\w+\.?)+!", r"repeats a part that holds a quantifier"),
        (r"(a|ab)*q_proj", r"repeats a choice of alternatives"),
        (r".*a.*a.*a.*a.*a!", r"holds 5 repeats .*more than 4"),
        (r"(a)\1", r"refers back to a group"),
        ("q_proj|" * 100 + "v_proj", r"a regular expression of 706 characters, more than 500"),
    ],
)
def test_a_regular_expression_target_is_bounded(base, adapter, tmp_path, pattern, message):
    folder = variant(adapter, tmp_path, target_modules=pattern)
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"adapter_config.json: target_modules: .*" + message):
        from_pretrained(base, adapter=folder)
    assert time.monotonic() - start < 30


def test_peft_style_regular_expressions_still_load(base, adapter, tmp_path):
    for pattern in (r".*\.(q_proj|v_proj)", r"^(?!.*mlp).*\.(q|v)_proj$",
                    r"model\.layers\.\d+\.self_attn\.(q_proj|v_proj)"):  # fmt: skip
        folder = variant(adapter, tmp_path, target_modules=pattern)
        assert_same_adapters(from_pretrained(base, adapter=folder), adapter[1])
        shutil.rmtree(folder)


# ------------------------------------------------------------------------------ D18
@pytest.mark.parametrize("beside", ["model.safetensors", "index", "other.safetensors"])
def test_an_adapter_folder_is_read_from_its_adapter_file_whatever_else_it_holds(
    base, adapter, tmp_path, beside
):
    """A folder holding a merged model beside the adapter (as some uploads do) was read from
    model.safetensors (or the index) and refused as not fitting."""
    folder = variant(adapter, tmp_path)
    if beside == "index":
        shutil.copy(base / "model.safetensors", folder / "model-00001-of-00001.safetensors")
        weight_map = {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    else:
        shutil.copy(base / "model.safetensors", folder / beside)
    assert_same_adapters(from_pretrained(base, adapter=folder), adapter[1])


def test_a_folder_with_a_model_but_no_adapter_weights_is_refused_saying_so(base, adapter, tmp_path):
    folder = variant(adapter, tmp_path)
    (folder / "adapter_model.safetensors").rename(folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"holds model.safetensors but no adapter_model"):
        from_pretrained(base, adapter=folder)


# ------------------------------------------------------------------------------ D19
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"bias": "all"}, r"bias='all' asks for trained biases, which jaxfeed cannot follow"),
        ({"exclude_modules": ["v_proj"]}, r"exclude_modules=\['v_proj'\] asks for excluded"),
        ({"trainable_token_indices": [3, 4]}, r"trainable_token_indices=\[3, 4\] asks for"),
        ({"layers_to_transform": 0}, r"layers_to_transform=0 asks for adapters on some layers"),
        ({"layer_replication": [[0, 2]]}, r"layer_replication=\[\[0, 2\]\] asks for replicated"),
        ({"target_modules": "all-linear"}, r"target_modules 'all-linear' is PEFT's shorthand"),
    ],
)
def test_settings_jaxfeed_cannot_follow_are_named(base, adapter, tmp_path, changes, message):
    """They were read as plain LoRA (a wrong model) or refused as "does not fit: extra"."""
    folder = variant(adapter, tmp_path, **changes)
    with pytest.raises(CheckpointError, match=message):
        from_pretrained(base, adapter=folder)


def test_tensors_of_a_kind_jaxfeed_cannot_apply_are_named(base, adapter, tmp_path):
    """PEFT's adapters on the embedding layer (target_modules naming embed_tokens)."""
    from safetensors.numpy import load_file

    folder = variant(adapter, tmp_path, target_modules=["q_proj", "v_proj", "embed_tokens"])
    tensors = load_file(folder / "adapter_model.safetensors")
    name = "base_model.model.model.embed_tokens.lora_embedding_A"
    tensors.update({name: np.zeros((2, 97), np.float32), name[:-1] + "B": np.zeros((16, 2))})
    write_safetensors(folder / "adapter_model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"holds adapters on an embedding layer .*jaxfeed "
                       "cannot apply"):  # fmt: skip
        from_pretrained(base, adapter=folder)
