"""Bad checkpoints: one clear error each, naming the file or tensor and what was expected."""

import json
import re
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hub_checkpoints import save_checkpoint
from jaxfeed.models import from_pretrained, preprocessor
from jaxfeed.models.hub import CheckpointError
from jaxfeed.models.hub.files import write_safetensors


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    save_checkpoint(folder, "bert", "sequence-classification")
    return folder


def copy(checkpoint, tmp_path):
    for p in checkpoint.iterdir():
        (tmp_path / p.name).write_bytes(p.read_bytes())
    return tmp_path


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_folder_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"has no config\.json.*found: model\.safetensors"):
        from_pretrained(tmp_path)


def test_missing_folder_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*Hub's layout"):
        from_pretrained(tmp_path / "nowhere")


def test_unsupported_model_type_lists_the_supported(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    edit_config(folder, model_type="t5")
    with pytest.raises(
        CheckpointError, match=r"model_type 't5' is not supported; .*bert, distilbert, .*roberta"
    ):
        from_pretrained(folder)


def test_remote_code_is_refused(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    edit_config(folder, auto_map={"AutoModel": "modeling_x.XModel"})
    (folder / "modeling_x.py").write_text("raise SystemExit('ran code from the checkpoint')\n")
    with pytest.raises(CheckpointError, match=r"asks for remote code .*never runs code"):
        from_pretrained(folder)


def test_pickled_weights_only_are_refused_with_how_to_convert(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not loaded")
    with pytest.raises(
        CheckpointError, match=r"only pickled .*pytorch_model\.bin.*save_pretrained"
    ):
        from_pretrained(folder)


def test_shape_mismatch_names_the_tensor_and_both_shapes(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    edit_config(folder, intermediate_size=24)
    pattern = r"'bert\.encoder\.layer\.0\.intermediate\.dense\.weight' .* shape \[32, 16\].* expects \[24, 16\]"
    with pytest.raises(CheckpointError, match=pattern):
        from_pretrained(folder)


def test_missing_shard_in_index(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    header = json.loads(
        (folder / "model-00001-of-00002.safetensors").read_bytes()[8:][
            : int.from_bytes(
                (folder / "model-00001-of-00002.safetensors").read_bytes()[:8], "little"
            )
        ]
    )
    names = [n for n in header if n != "__metadata__"]
    weight_map = {n: "model-00001-of-00002.safetensors" for n in names}
    weight_map["classifier.weight"] = "model-00002-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(
        CheckpointError, match=r"lists the shard 'model-00002-of-00002\.safetensors'.*missing"
    ):
        from_pretrained(folder)


def test_sharded_checkpoint_loads(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    from jaxfeed.models.hub.files import Weights

    full = Weights(folder)
    names = full.names()
    half = len(names) // 2
    parts = {"model-00001-of-00002.safetensors": names[:half],
             "model-00002-of-00002.safetensors": names[half:]}  # fmt: skip
    for shard, part in parts.items():
        write_safetensors(folder / shard, {n: np.array(full.get(n)) for n in part})
    expected = np.array(full.get("classifier.bias"))
    (folder / "model.safetensors").unlink()
    weight_map = {n: shard for shard, part in parts.items() for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    model = from_pretrained(folder)
    np.testing.assert_array_equal(np.asarray(model.classifier.bias[...]), expected)


def test_truncated_safetensors(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors is truncated: tensor '.*' ends at byte"
    ):
        from_pretrained(folder)
    (folder / "model.safetensors").write_bytes(data[:5])
    with pytest.raises(CheckpointError, match=r"truncated"):
        from_pretrained(folder)


def test_tokenizer_json_that_is_not_one(checkpoint, tmp_path):
    folder = copy(checkpoint, tmp_path)
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": 3}')
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.json is not a tokenizers tokenizer\.json"
    ):
        preprocessor(folder)
    (folder / "tokenizer.json").write_bytes(b"\xff\xfe not json")
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.json is not a tokenizers tokenizer\.json"
    ):
        preprocessor(folder)


def test_num_labels_disagreeing_with_the_head(checkpoint):
    with pytest.raises(
        CheckpointError,
        match=re.escape("num_labels=5 disagrees with the checkpoint's")
        + r".*'classifier\.weight'.*\[3, 16\].*\[5, 16\].*ignore_mismatched_sizes=True",
    ):
        from_pretrained(checkpoint, num_labels=5)
    with pytest.warns(UserWarning, match=r"classifier\.weight, classifier\.bias newly initialised"):
        model = from_pretrained(checkpoint, num_labels=5, ignore_mismatched_sizes=True)
    assert model.classifier.kernel[...].shape == (16, 5)
    assert model.hub_config["num_labels"] == 5


def test_unknown_task_and_bad_num_labels(checkpoint):
    with pytest.raises(
        ValueError, match=r"task 'image-classification' is not available .*masked-lm"
    ):
        from_pretrained(checkpoint, task="image-classification")
    with pytest.raises(ValueError, match=r"num_labels must be a positive int, got 0"):
        from_pretrained(checkpoint, num_labels=0)


def test_missing_extras_are_named(checkpoint, monkeypatch):
    from jaxfeed._base.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(MissingExtraError, match=r"org/tiny needs huggingface_hub.*jaxfeed\[hub\]"):
        from_pretrained("hf:org/tiny")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingExtraError, match=r"needs tokenizers.*jaxfeed\[text\]"):
        preprocessor(checkpoint)
