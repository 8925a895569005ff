"""A Hub checkpoint whose ``tokenizer_config.json`` says ``truncation_side: left`` has its texts
cut on the left by the command, as ``transformers`` cuts them: in training's tokenization, in
``eval``/``predict`` batches and in the export's spec (``tokenizer.json`` alone does not carry
the side, so the run records it)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hub_checkpoints import VOCAB, save_checkpoint
from jaxfeed import Dataset
from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.kinds.text import TextKind, tokenized
from jaxfeed.recipes.sources.hub_checkpoint import open_checkpoint, pretrained_inputs
from jaxfeed.recipes.text.tokenizer import token_batch
from jaxfeed.serve.spec import SpecError, text_options

LONG = " ".join(f"w{i}" for i in range(10, 30))  # 20 words: past the checkpoint's 8 tokens


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import transformers  # the reference tokenizer (optional in this suite)

    out = {}
    for side in ("left", "right"):
        folder = tmp_path_factory.mktemp(side)
        save_checkpoint(folder, "bert", "sequence-classification")  # model_max_length 8
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(
            json.dumps({**settings, "truncation_side": side})
        )
        train = Dataset.from_dict({"text": [LONG, "w5 w6"] * 4, "label": [0, 1] * 4})
        run_data = SimpleNamespace(
            splits=SimpleNamespace(train=train),
            columns=SimpleNamespace(inputs=["text"], label="label"),
            task="classification",
        )
        pretrained = pretrained_inputs(open_checkpoint(str(folder), hashed=False))
        prep, _ = TextKind().plan(run_data, RunConfig(), pretrained)
        TextKind().reopen(prep, run_data, folder)  # the run's tokenizer loaded, as eval does
        reference = transformers.AutoTokenizer.from_pretrained(folder)
        out[side] = prep, train, reference(LONG, truncation=True)["input_ids"]
    return out


@pytest.mark.parametrize("side", ["left", "right"])
def test_the_checkpoints_side_cuts_training_serving_and_the_spec(plans, side):
    prep, train, want = plans[side]
    assert len(want) == 8  # transformers cut the 22 tokens to the checkpoint's 8
    assert want[1] == (VOCAB.index("w24") if side == "left" else VOCAB.index("w10")), want
    trained = tokenized(prep, train.select([0]), [], int(prep.text["max_length"]), False)
    assert trained[0]["input_ids"] == want
    served = token_batch(prep, [LONG])["input_ids"][0]
    assert served.tolist() == want
    spec_text = prep.serving_text()
    assert spec_text.get("truncation_side", "right") == side
    assert text_options(spec_text, "spec.json") == spec_text  # the spec reads back the same


def test_a_spec_with_an_unknown_side_is_refused_by_name():
    with pytest.raises(SpecError, match=r"preprocessing.text.truncation_side must be 'left' or"):
        text_options({"column": "t", "max_length": 8, "truncation_side": "middle"}, "spec.json")
