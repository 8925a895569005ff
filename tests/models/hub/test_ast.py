"""AST from Hub checkpoints: logits equal to transformers' PyTorch model, the log-mel front end
equal to transformers' ASTFeatureExtractor, the save_pretrained round trip, and bad input.

Without torchaudio (not a test dependency), transformers' ASTFeatureExtractor takes its numpy
path (``audio_utils.spectrogram``); that is the reference the front end is compared with here."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from jaxfeed import Trainer  # noqa: E402
from jaxfeed.models.hub import from_pretrained, preprocessor, save_pretrained  # noqa: E402
from jaxfeed.models.hub.audio_features import ASTFeatureExtractor  # noqa: E402

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "patch_size": 8, "frequency_stride": 6, "time_stride": 5,
        "max_length": 40, "num_mel_bins": 16}  # fmt: skip
TOL = 1e-4


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """An ASTForAudioClassification (4 labels) and a bare ASTModel saved by transformers, with
    an ASTFeatureExtractor's preprocessor_config.json. AST initialises its special tokens and
    positions to zero: every weight is moved so that they matter."""
    torch.manual_seed(0)
    config = transformers.ASTConfig(**TINY, num_labels=4)
    root = tmp_path_factory.mktemp("ast")
    extractor = transformers.ASTFeatureExtractor(num_mel_bins=16, max_length=40)
    models = {}
    for name, cls in (("classifier", transformers.ASTForAudioClassification),
                      ("bare", transformers.ASTModel)):  # fmt: skip
        model = cls(config).eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.1 * torch.randn_like(param))
        model.save_pretrained(root / name)
        extractor.save_pretrained(root / name)
        models[name] = model
    return root, models, extractor


def waveforms():
    """Clips of 0.1 s to 0.6 s at 16 kHz: a tone with noise (padded to 40 frames), noise long
    enough to be cut, and silence."""
    rng = np.random.default_rng(0)
    t = np.arange(6000) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)
    return [tone.astype(np.float32), (0.2 * rng.standard_normal(9000)).astype(np.float32),
            np.zeros(1600, np.float32)]  # fmt: skip


def max_diff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def torch_out(model, x):
    with torch.no_grad():
        return model(input_values=torch.from_numpy(np.asarray(x)))


@pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values")
@pytest.mark.parametrize(("rate", "mel", "frames"), [(16000, 128, 1024), (16000, 16, 40),
                                                     (8000, 24, 60)])  # fmt: skip
def test_feature_extractor_equals_transformers(rate, mel, frames):
    reference = transformers.ASTFeatureExtractor(sampling_rate=rate, num_mel_bins=mel,
                                                 max_length=frames)  # fmt: skip
    ours = ASTFeatureExtractor.from_dict(reference.to_dict())
    clips = waveforms()
    expected = reference(clips, sampling_rate=rate, return_tensors="np")["input_values"]
    got = ours(clips, sampling_rate=rate)["input_values"]
    assert got.shape == expected.shape == (3, frames, mel) and got.dtype == np.float32
    assert max_diff(got, expected) < 1e-3
    # one clip alone gives the same rows as in the batch
    assert max_diff(ours(clips[1], sampling_rate=rate)["input_values"][0], expected[1]) < 1e-3


def test_audio_classification_logits_equal_pytorch(checkpoints):
    root, models, extractor = checkpoints
    model = from_pretrained(root / "classifier")
    assert model.hub_task == "audio-classification"
    x = extractor(waveforms(), sampling_rate=16000, return_tensors="np")["input_values"]
    logits = model(input_values=jnp.asarray(x))
    assert logits.shape == (3, 4) and logits.dtype == jnp.float32
    assert max_diff(logits, torch_out(models["classifier"], x).logits.numpy()) < TOL


def test_waveform_to_logits_through_the_checkpoints_preprocessor(checkpoints):
    root, models, extractor = checkpoints
    front = preprocessor(root / "classifier")
    assert isinstance(front, ASTFeatureExtractor)
    assert (front.num_mel_bins, front.max_length) == (16, 40)
    clips = waveforms()
    ours = from_pretrained(root / "classifier")(**front(clips, sampling_rate=16000))
    x = extractor(clips, sampling_rate=16000, return_tensors="np")["input_values"]
    assert max_diff(ours, torch_out(models["classifier"], x).logits.numpy()) < TOL


def test_bare_encoder_hidden_states_and_pooled_equal_pytorch(checkpoints):
    root, models, _ = checkpoints
    model = from_pretrained(root / "bare")
    assert model.hub_task == "feature-extraction"
    x = np.random.default_rng(1).standard_normal((2, 40, 16)).astype(np.float32)
    out = torch_out(models["bare"], x)
    hidden = model(input_values=jnp.asarray(x))
    patches = ((16 - 8) // 6 + 1) * ((40 - 8) // 5 + 1)
    assert hidden.shape == (2, 2 + patches, 32)
    assert max_diff(hidden, out.last_hidden_state.numpy()) < TOL
    pooled = model(input_values=jnp.asarray(x), output="pooler_output")
    assert max_diff(pooled, out.pooler_output.numpy()) < TOL


def test_save_pretrained_loads_in_transformers_with_equal_logits(checkpoints, tmp_path):
    root, _, _ = checkpoints
    model = from_pretrained(root / "classifier")
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda a: a * 1.01, params))
    out = save_pretrained(model, tmp_path / "saved")
    reloaded = transformers.ASTForAudioClassification.from_pretrained(out).eval()
    x = np.random.default_rng(2).standard_normal((2, 40, 16)).astype(np.float32)
    expected = torch_out(reloaded, x).logits.numpy()
    assert max_diff(model(input_values=jnp.asarray(x)), expected) < TOL
    assert isinstance(preprocessor(out), ASTFeatureExtractor)  # the front end travels with it


def test_every_weight_has_logical_axis_names(checkpoints):
    root, _, _ = checkpoints
    model = from_pretrained(root / "classifier")
    for path, param in nnx.iter_graph(model):
        if isinstance(param, nnx.Param):
            names = param.get_metadata().get("out_sharding")
            assert names is not None and len(names) == param[...].ndim, path


def test_bad_input_is_refused_with_a_clear_error(checkpoints, tmp_path):
    root, _, _ = checkpoints
    model = from_pretrained(root / "classifier")
    with pytest.raises(ValueError, match=r"input_values must be \(batch, 40 frames, 16 mel bins\)"):
        model(input_values=jnp.zeros((1, 30, 16)))
    front = preprocessor(root / "classifier")
    with pytest.raises(ValueError, match="sampled at 8000 Hz, but the feature extractor expects"):
        front(np.zeros(4000, np.float32), sampling_rate=8000)
    with pytest.raises(ValueError, match="clip 1 has 100 samples"):
        front([np.zeros(4000, np.float32), np.zeros(100, np.float32)])
    with pytest.raises(ValueError, match="only mono audio"):
        front(np.zeros((2, 2, 4000), np.float32))
    # a preprocessor whose features do not fit the model
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_bytes((root / "classifier" / "config.json").read_bytes())
    transformers.ASTFeatureExtractor(num_mel_bins=32, max_length=40).save_pretrained(folder)
    with pytest.raises(ValueError, match=r"num_mel_bins=32 but the model's config\.json has"):
        preprocessor(folder)


def test_fine_tunes_head_only_in_bfloat16_on_float32_weights(checkpoints):
    root, _, extractor = checkpoints
    model = from_pretrained(root / "classifier")
    x = extractor(waveforms(), sampling_rate=16000, return_tensors="np")["input_values"]
    batch = {"input_values": x, "label": np.arange(3) % 4}
    trainer = Trainer(model, optax.adamw(1e-2), inputs={"input_values": "input_values"},
                      trainable="head", dtype="bfloat16", verbose=0)  # fmt: skip
    for _ in range(3):
        trainer.fit([batch], epochs=trainer.epoch + 1)
    losses = [h["train_loss"] for h in trainer.history]
    assert trainer.precision == "bfloat16" and np.isfinite(losses).all()
    assert losses[-1] < losses[0]
    kernel = model.classifier.dense.kernel[...]
    assert kernel.dtype == jnp.float32


def test_bare_encoder_has_no_head_to_train(checkpoints):
    root, _, _ = checkpoints
    with pytest.raises(ValueError, match=r"the bare AST encoder .* has no head"):
        Trainer(from_pretrained(root / "bare"), optax.adamw(1e-3), inputs="input_values",
                trainable="head")  # fmt: skip
