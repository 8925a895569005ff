"""Checkpoint files that lie, link out or hold nonsense (issue 52): each one refused with an
error naming the file, the field or the tensor, before anything large is allocated."""

import json
import math
import os
import struct
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hub_checkpoints import save_checkpoint
from jaxfeed.models import from_pretrained, preprocessor, save_pretrained
from jaxfeed.models.hub import CheckpointError
from jaxfeed.models.hub import weights as weights_module
from jaxfeed.models.hub.audio_features import ASTFeatureExtractor
from jaxfeed.models.hub.files import Weights, read_header, write_safetensors
from jaxfeed.models.hub.image_processing import ImageProcessor
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.serving.hub_generate import chat_template
from jaxfeed.recipes.sources.hub_checkpoint import check_unchanged, open_checkpoint
from jaxfeed.train.generation import generation_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    save_checkpoint(folder, "bert", "sequence-classification")
    return folder


def copy(checkpoint, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for p in checkpoint.iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    return folder


def edit(folder, name="config.json", **changes):
    values = json.loads((folder / name).read_text())
    values.update(changes)
    (folder / name).write_text(json.dumps(values))


def header_file(path, header, data=b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


# ------------------------------------------------------------------------------ item 1: links
def test_every_checkpoint_file_linking_outside_is_refused(checkpoint, tmp_path):
    outside = copy(checkpoint, tmp_path / "outside")
    (outside / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    (outside / "generation_config.json").write_text('{"max_new_tokens": 3}')
    # a lone safetensors file of another name
    lone = copy(checkpoint, tmp_path / "lone")
    (lone / "model.safetensors").unlink()
    os.symlink(outside / "model.safetensors", lone / "weights.safetensors")
    with pytest.raises(CheckpointError, match=r"weights\.safetensors.* is a link to .*outside"):
        Weights(lone)
    for name in ("tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        folder = copy(checkpoint, tmp_path / name)
        (folder / name).unlink(missing_ok=True)
        os.symlink(outside / name, folder / name)
        with pytest.raises(ValueError, match=rf"{name}.* is a link to"):
            if name == "tokenizer_config.json":
                preprocessor(folder)
            elif name == "chat_template.jinja":
                chat_template(folder, "the model")
            else:
                generation_config(SimpleNamespace(hub_source=SimpleNamespace(folder=folder)))
        # save_pretrained never copies the linked file's contents into the export
        model = from_pretrained(folder) if name != "tokenizer_config.json" else None
        if model is not None:
            out = tmp_path / f"saved-{name}"
            with pytest.raises(CheckpointError, match=rf"{name}.* is a link to"):
                save_pretrained(model, out)
            assert not out.exists()
    # a link inside the folder is read as before
    inside = copy(checkpoint, tmp_path / "inside")
    (inside / "kept.json").write_bytes((inside / "tokenizer_config.json").read_bytes())
    (inside / "tokenizer_config.json").unlink()
    os.symlink("kept.json", inside / "tokenizer_config.json")
    assert preprocessor(inside).get_vocab_size() == preprocessor(checkpoint).get_vocab_size()


# ------------------------------------------------------------------------------ items 8, 18
def test_safetensors_headers_that_lie_are_refused(tmp_path):
    f32 = {"dtype": "F32", "shape": [2]}
    cases = [
        ([1, 2], r"its header is a JSON list, not an object"),
        ({"w": {**f32, "data_offsets": [-8, 0]}}, r"tensor 'w' has data_offsets \[-8, 0\]"),
        ({"a": {**f32, "data_offsets": [0, 8]}, "b": {**f32, "data_offsets": [4, 12]}},
         r"tensors 'a' and 'b' overlap"),
        ({"w": {"dtype": "F32", "shape": [-2, -4], "data_offsets": [0, 32]}},
         r"tensor 'w' has the shape \[-2, -4\]"),
        ({"w": "nonsense"}, r"tensor 'w' has a malformed entry"),
        ({"w": {**f32, "data_offsets": [0, True]}}, r"tensor 'w' has data_offsets"),
    ]  # fmt: skip
    for i, (header, message) in enumerate(cases):
        path = header_file(tmp_path / f"h{i}.safetensors", header, bytes(16))
        with pytest.raises(CheckpointError, match=message) as caught:
            read_header(path)
        assert str(path) in str(caught.value)
    good = tmp_path / "good.safetensors"
    write_safetensors(good, {"a": np.ones(2, np.float32), "b": np.zeros((0, 3), np.float32)})
    assert sorted(read_header(good)) == ["a", "b"]


# ------------------------------------------------------------------------------ item 4
def test_a_lying_config_is_refused_before_a_resized_tensor_is_allocated(
    checkpoint, tmp_path, monkeypatch
):
    folder = copy(checkpoint, tmp_path / "lying")
    edit(folder, vocab_size=10**9)  # 64 GB of word embeddings at float32
    made = []
    original = weights_module._init_value

    def init_value(path, shape, dtype, *args):
        made.append(shape)
        assert math.prod(shape) < 2**28, f"allocating {shape}"
        return original(path, shape, dtype, *args)

    monkeypatch.setattr(weights_module, "_init_value", init_value)
    with pytest.raises(
        CheckpointError, match=r"word_embeddings.*\[1000000000, 16\].*GiB.*config\.json"
    ):
        from_pretrained(folder, ignore_mismatched_sizes=True)
    assert all(math.prod(s) < 2**28 for s in made)


# ------------------------------------------------------------------------------ items 6, 20, 15
def test_a_config_with_fewer_layers_names_the_unused_tensors(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path / "fewer")
    edit(folder, num_hidden_layers=1)
    with pytest.warns(
        UserWarning, match=r"tensors of layers are not used by .*bert\.encoder\.layer\.1\."
    ):
        from_pretrained(folder)
    for layers in (0, -1):
        edit(folder, num_hidden_layers=layers)
        with pytest.raises(
            CheckpointError,
            match=rf"config\.json: num_hidden_layers must be an integer >= 1, got {layers}",
        ):
            from_pretrained(folder)


def test_config_fields_are_checked_at_load_naming_the_file(checkpoint, tmp_path):
    cases = [
        ({"vocab_size": None}, r"config\.json: vocab_size must be an integer >= 1, got None"),
        ({"hidden_act": "nope"}, r"config\.json: hidden_act='nope' is not an activation"),
        ({"layer_norm_eps": "tiny"}, r"config\.json: layer_norm_eps must be a finite number > 0"),
        ({"hidden_dropout_prob": 1.5}, r"hidden_dropout_prob must be a number in \[0, 1\)"),
        ({"pad_token_id": 50}, r"config\.json: pad_token_id 50 is not a token id"),
        ({"hidden_size": 15}, r"hidden_size 15 must be a multiple of num_attention_heads 2"),
    ]
    for i, (changes, message) in enumerate(cases):
        folder = copy(checkpoint, tmp_path / f"c{i}")
        edit(folder, **changes)
        for load in (from_pretrained, preprocessor):
            with pytest.raises(CheckpointError, match=message) as caught:
                load(folder)
            assert str(folder / "config.json") in str(caught.value)
    folder = copy(checkpoint, tmp_path / "missing")
    config = json.loads((folder / "config.json").read_text())
    del config["vocab_size"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: vocab_size is missing"):
        from_pretrained(folder)


# ------------------------------------------------------------------------------ items 13, 24
def test_tokenizer_settings_that_do_not_fit_name_the_file(checkpoint, tmp_path):
    small = copy(checkpoint, tmp_path / "small")
    edit(small, vocab_size=4)  # the tokenizer has 50 tokens
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.json has 50 tokens, more than .*vocab_size 4"
    ):
        preprocessor(small)
    for key in ("truncation_side", "padding_side"):
        folder = copy(checkpoint, tmp_path / key)
        edit(folder, "tokenizer_config.json", **{key: "middle"})
        with pytest.raises(
            CheckpointError,
            match=rf"tokenizer_config\.json: {key} must be 'left' or 'right', got 'middle'",
        ):
            preprocessor(folder)
    folder = copy(checkpoint, tmp_path / "latin1")
    (folder / "chat_template.jinja").write_bytes("{{ 'caf\xe9' }}".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"chat_template\.jinja is not UTF-8 text"):
        chat_template(folder, "the model")


# ------------------------------------------------------------------------------ item 14
def test_preprocessor_config_nonsense_is_refused():
    cases = [
        ({"image_mean": [float("nan"), 0.5, 0.5]}, r"image_mean must be a finite number"),
        ({"do_resize": "no"}, r"do_resize must be true or false, got 'no'"),
        ({"rescale_factor": 0}, r"rescale_factor must be a finite number > 0"),
        ({"do_normalize": 1}, r"do_normalize must be true or false"),
    ]
    for values, message in cases:
        with pytest.raises(ValueError, match=r"preprocessor_config\.json: " + message):
            ImageProcessor.from_dict(values)
    with pytest.raises(ValueError, match=r"preprocessor_config\.json: mean must be a finite"):
        ASTFeatureExtractor.from_dict({"mean": float("nan")})


# ------------------------------------------------------------------------------ item 7
def test_resume_checks_every_file_the_run_read(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path / "hashed")
    (folder / "generation_config.json").write_text('{"max_new_tokens": 3}')
    saved = open_checkpoint(str(folder)).record()
    assert {"tokenizer_config.json", "generation_config.json", "vocab.txt"} <= set(saved["sha256"])
    for name in ("tokenizer_config.json", "generation_config.json"):
        before = (folder / name).read_bytes()
        edit(folder, name, changed=True)
        with pytest.raises(
            ConfigError, match=rf"changed since the run started: {name} \(changed\)"
        ):
            check_unchanged(saved, open_checkpoint(str(folder)))
        (folder / name).write_bytes(before)
    check_unchanged(saved, open_checkpoint(str(folder)))
    # a run recorded before every file was hashed resumes with the files it recorded
    old = {**saved, "sha256": {k: v for k, v in saved["sha256"].items()
                               if k in ("config.json", "tokenizer.json", "model.safetensors")}}  # fmt: skip
    del old["hashed"]
    check_unchanged(old, open_checkpoint(str(folder)))
