"""Exports called with what they cannot take (issue 42: items 7, 8, 9, 22, 23): every input is
checked before the StableHLO function runs, and refused naming the input and what was expected;
an empty batch gives an empty result."""

import json

import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import Trainer, export, load_exported
from jaxfeed.models import AudioCNN, TransformerClassifier, TransformerLM
from jaxfeed.serve.spec import ServingSpec

IDS = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]], np.int32)
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A learned-position classifier (max_length 8, 50 ids), exported on its own inputs."""
    model = TransformerClassifier(50, 3, dim=16, depth=1, num_heads=2, max_length=8,
                                  rngs=nnx.Rngs(0))  # fmt: skip
    model.eval()
    folder = export(model, tmp_path_factory.mktemp("exports") / "classifier")
    return model, folder, load_exported(folder)


def test_a_learned_position_export_refuses_sequences_longer_than_max_length(classifier):
    model, folder, served = classifier
    inputs = json.loads((folder / "config.json").read_text())["inputs"]
    assert [i.get("max_length") for i in inputs] == [8, 8]  # declared in the export
    np.testing.assert_allclose(served.call(IDS, MASK), model(IDS, MASK), atol=1e-5)
    long = np.ones((2, 12), np.int32)
    with pytest.raises(ValueError, match=r"input 0 of .*classifier has sequences of 12 tokens; "
                       r"the model takes at most 8 \(its max_length, learned positions\)"):  # fmt: skip
        served.call(long, long)
    # the function itself refuses them too (its length is bounded), never clamping positions
    with pytest.raises(ValueError):  # (JAX's words: a shape constraint, or "refining shapes")
        served._exported.call(served.weights, long, long)
    # rotary positions have no bound: a longer sequence is served
    lm = TransformerLM(40, dim=16, depth=1, num_heads=2, max_length=8, rngs=nnx.Rngs(0))
    rotary = load_exported(export(lm, folder.parent / "rotary"))
    assert "max_length" not in rotary.inputs[0]
    assert rotary.call(long, long).shape == (2, 12, 40)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (50, r"token id 50 \(row 1, position 2\) is outside the model's vocabulary of 50 ids"),
        (-1, r"token id -1 \(row 1, position 2\) is outside the model's vocabulary of 50 ids"),
    ],
)
def test_an_export_refuses_token_ids_outside_the_vocabulary(classifier, bad, message):
    _, _, served = classifier
    ids = IDS.copy()
    ids[1, 2] = bad
    with pytest.raises(ValueError, match=rf"input 0 of .*classifier: {message} \(0\.\.49\)"):
        served.call(ids, MASK)


def test_a_trainer_export_of_a_text_classifier_checks_its_ids_and_old_exports_too(tmp_path):
    model = TransformerClassifier(30, 2, dim=16, depth=1, num_heads=2, max_length=8,
                                  rngs=nnx.Rngs(0))  # fmt: skip
    columns = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    trainer = Trainer(model, optax.adam(1e-3), inputs=columns, verbose=0)
    example = {"input_ids": IDS[:1], "attention_mask": MASK[:1]}
    folder = export(trainer, tmp_path / "text", example)  # the compiled (identity) preprocess
    served = load_exported(folder)
    assert {i["argument"]: i.get("token_ids") for i in served.inputs} == {
        "input_ids": 30, "attention_mask": None}  # fmt: skip
    pad = IDS.copy()
    pad[1, 3:] = 99  # an out-of-vocabulary pad id: NaN before, whatever the mask said
    with pytest.raises(ValueError, match=r"input input_ids of .*text: token id 99 \(row 1, "
                       r"position 3\) is outside the model's vocabulary of 30 ids"):  # fmt: skip
        served.call(input_ids=pad, attention_mask=MASK)
    # an export written before inputs recorded their checks: the model's own record is used
    config = json.loads((folder / "config.json").read_text())
    for entry in config["inputs"]:
        entry.pop("token_ids", None)
        entry.pop("max_length", None)
    (folder / "config.json").write_text(json.dumps(config))
    old = load_exported(folder)
    with pytest.raises(ValueError, match=r"token id 99 .* vocabulary of 30 ids"):
        old.call(input_ids=pad, attention_mask=MASK)
    with pytest.raises(ValueError, match=r"at most 8 \(its max_length"):
        old.call(input_ids=np.ones((1, 9), np.int32), attention_mask=np.ones((1, 9), np.int32))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (np.array([["3", "4"]]), r"takes int32 values \(token ids: tokenize the texts first\)"),
        (np.array([["3", "4"]]), r"got strings \(<U1\)"),
        (np.array([[b"3", b"4"]]), r"got bytes \(\|S1\)"),
        (np.array([[None, 1]], dtype=object), r"got Python objects \(object\)"),
        ([[3, 4, 5], [6]], r"is not one rectangular array of int32 \(rows of different lengths"),
        (np.ones((2, 4), np.complex64), r"got complex numbers \(complex64\)"),
    ],
)
def test_an_export_refuses_non_numeric_inputs_by_name(classifier, ids, message):
    _, _, served = classifier
    with pytest.raises((TypeError, ValueError), match=rf"input 0 of .*classifier.*{message}"):
        served.call(ids, np.ones((2, 4), np.int32))


def test_an_empty_batch_gives_an_empty_result_and_zero_length_rows_are_refused(classifier):
    _, _, served = classifier
    empty = np.zeros((0, 5), np.int32)
    out = np.asarray(served.call(empty, empty))
    assert out.shape == (0, 3) and out.dtype == np.float32
    with pytest.raises(ValueError, match=r"input 0 of .*classifier has sequences of length 0: "
                       r"give at least one token per row"):  # fmt: skip
        served.call(np.zeros((2, 0), np.int32), np.zeros((2, 0), np.int32))
    with pytest.raises(ValueError, match=r"one batch size: input 0 has 2 rows, input 1 3"):
        served.call(IDS, np.ones((3, 5), np.int32))
    with pytest.raises(ValueError, match=r"one sequence length: input 0 has 5, input 1 4"):
        served.call(IDS, np.ones((2, 4), np.int32))
    # an LM's empty batch keeps its other dimensions
    lm = TransformerLM(40, dim=16, depth=1, num_heads=2, max_length=8, rngs=nnx.Rngs(0))
    served_lm = load_exported(export(lm, served.path.parent / "lm"))
    assert np.asarray(served_lm.call(empty, empty)).shape == (0, 5, 40)


def test_an_audio_export_takes_features_of_its_input_shape_as_features(tmp_path):
    options = {"sample_rate": 8000, "n_mels": 16, "n_fft": 256, "hop_length": 128,
               "clip_seconds": 0.3}  # fmt: skip
    frames = 1 + int(8000 * 0.3) // 128
    model = AudioCNN(3, input_shape=(frames, 16), rngs=nnx.Rngs(0))
    model.eval()
    spec = ServingSpec(kind="audio", input_shape=(frames, 16), labels=("a", "b", "c"),
                       audio=options)  # fmt: skip
    served = load_exported(export(model, tmp_path / "audio", np.zeros((1, frames, 16), np.float32),
                                  preprocessing=spec))  # fmt: skip
    features = np.random.default_rng(0).normal(size=(4, frames, 16)).astype(np.float32)
    # (n, frames, n_mels) is the model's input, not n multichannel waveforms
    np.testing.assert_allclose(served(features), spec.outputs(served.call(features)), atol=1e-6)
    # waveforms still go through the log-mel front end
    waves = np.random.default_rng(1).normal(size=(2, 2400)).astype(np.float32)
    assert served(waves).shape == (2, 3)


def test_an_export_refuses_positions_past_a_learned_position_table(tmp_path):
    """The same class as item 7: positions given to a learned-position LM were clamped too."""
    lm = TransformerLM(40, dim=16, depth=1, num_heads=2, max_length=8, positions="learned",
                       rngs=nnx.Rngs(0))  # fmt: skip
    ones = np.ones((1, 4), np.int32)
    example = {"input_ids": ones, "attention_mask": ones, "segment_ids": ones,
               "positions": np.arange(4, dtype=np.int32)[None]}  # fmt: skip
    served = load_exported(export(lm, tmp_path / "lm", example))
    assert served.call(**example).shape == (1, 4, 40)
    with pytest.raises(ValueError, match=r"input positions of .*lm: position 9 \(row 0\) is "
                       r"outside the model's 8 learned positions \(0\.\.7, its max_length\)"):  # fmt: skip
        served.call(**{**example, "positions": np.array([[0, 1, 2, 9]], np.int32)})
