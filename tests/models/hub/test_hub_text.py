"""``preprocessor`` for text checkpoints: the checkpoint's ``tokenizer.json`` with its padding and
truncation, giving the ids and masks ``transformers``' tokenizer gives."""

import json

import pytest

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from hub_checkpoints import save_checkpoint  # noqa: E402
from jaxfeed.models import preprocessor  # noqa: E402

TEXTS = ["w1 w2 w3", "w4 w5 w6 w7 w8 w9 w10 w11 w12 w13", "w9"]


def test_matches_the_transformers_tokenizer(tmp_path):
    save_checkpoint(tmp_path, "bert", "sequence-classification")  # model_max_length 8
    ours = preprocessor(tmp_path).encode_batch(TEXTS)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)(
        TEXTS, padding=True, truncation=True
    )
    assert [e.ids for e in ours] == theirs["input_ids"]
    assert [e.attention_mask for e in ours] == theirs["attention_mask"]
    assert max(len(e.ids) for e in ours) == 8  # truncated to model_max_length


def test_pad_token_and_side_from_tokenizer_config(tmp_path):
    save_checkpoint(tmp_path, "bert", "sequence-classification")
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    settings.update(padding_side="left", model_max_length=5, pad_token="[MASK]")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    short, long = preprocessor(tmp_path).encode_batch(["w1", "w1 w2 w3 w4 w5 w6"])
    assert len(long.ids) == 5 and short.ids[:3] == [4, 4, 2]  # [MASK] on the left, then [CLS]
    assert short.attention_mask == [0, 0, 1, 1, 1]


def test_no_limit_falls_back_on_the_model_positions(tmp_path):
    save_checkpoint(tmp_path, "bert", "sequence-classification")
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    settings["model_max_length"] = int(1e30)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    (long,) = preprocessor(tmp_path).encode_batch([" ".join(["w1"] * 40)])
    assert len(long.ids) == 24  # max_position_embeddings of the tiny config
