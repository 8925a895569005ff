"""Audio in the library: ``transforms.log_mel`` against references, ``AudioCNN``, its export."""

import io
import wave

import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Dataset, Padding, Trainer, export, load_exported
from jaxfeed import transforms as T
from jaxfeed.data.features import Audio, Features, Value
from jaxfeed.loading.spectrogram import hz_to_mel, mel_filterbank, mel_to_hz
from jaxfeed.models import AudioCNN
from jaxfeed.serve.export import rebuild
from jaxfeed.serve.spec import ServingSpec, SpecError


def tone(freq, seconds, rate, amplitude=0.5):
    t = np.arange(round(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def wav_bytes(samples, rate):
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def test_log_mel_equals_scipy_stft_through_the_filterbank():
    import scipy.signal  # here, not at the top: 1 s of every xdist worker's collection

    rng = np.random.default_rng(0)
    clip = rng.normal(size=4000).astype(np.float32) * 0.1
    t = T.log_mel(8000, 40, n_fft=256, hop_length=100)
    got = t(clip)
    window = scipy.signal.get_window("hann", 256).astype(np.float32)
    _, _, z = scipy.signal.stft(clip, window=window, nperseg=256, noverlap=156, boundary="zeros",
                                padded=False, scaling="spectrum", detrend=False)  # fmt: skip
    power = (np.abs(z * window.sum()) ** 2).T
    want = np.log(power @ mel_filterbank(8000, 256, 40) + 1e-6)
    assert got.shape == want.shape == (1 + 4000 // 100, 40) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=2e-3)


def test_filterbank_is_htk_triangles_and_a_tone_peaks_in_its_bin():
    bank = mel_filterbank(16000, 512, 32, f_min=100.0, f_max=6000.0)
    freqs = np.linspace(0, 8000, 257)
    centres = mel_to_hz(np.linspace(hz_to_mel(100.0), hz_to_mel(6000.0), 34))[1:-1]
    for m in (0, 10, 31):  # each filter peaks next to its centre and is zero outside its band
        peak = freqs[np.argmax(bank[:, m])]
        assert abs(peak - centres[m]) <= 16000 / 512
        assert bank[freqs > mel_to_hz(hz_to_mel(6000.0)), m].sum() == 0
    t = T.log_mel(16000, 32, n_fft=512, hop_length=256, f_min=100.0, f_max=6000.0)
    for freq in (300.0, 1000.0, 4000.0):
        spectrum = t(tone(freq, 0.5, 16000)).mean(axis=0)
        assert abs(centres[np.argmax(spectrum)] - freq) < 0.1 * freq + 60, freq


def test_resampling_stereo_ints_and_crops():
    t = T.log_mel(8000, 32, n_fft=256, hop_length=80, clip_seconds=0.5)
    at_8k = t({"array": tone(1000, 0.5, 8000), "sampling_rate": 8000})
    at_22k = t({"array": tone(1000, 0.5, 22050), "sampling_rate": 22050})  # resampled by soxr
    assert at_8k.shape == at_22k.shape == (51, 32)
    peak = at_8k.mean(0).argmax()
    assert at_22k.mean(0).argmax() == peak and np.abs(at_8k - at_22k)[2:-2].mean() < 0.5
    stereo = np.stack([tone(1000, 0.5, 8000), tone(1000, 0.5, 8000)])
    np.testing.assert_allclose(t(stereo), at_8k, atol=1e-5)
    pcm = (tone(1000, 0.5, 8000) * 32768).astype(np.int16)
    np.testing.assert_allclose(np.exp(t(pcm)), np.exp(at_8k), rtol=1e-3, atol=1e-4)  # PCM noise
    # cropping: a 1 s clip whose halves differ; the centre crop takes 0.25..0.75 s
    halves = np.concatenate([tone(500, 0.5, 8000), tone(3000, 0.5, 8000)])
    centre = T.log_mel(8000, 32, n_fft=256, hop_length=80, clip_seconds=0.5)(halves)
    np.testing.assert_allclose(centre, t(halves[2000:6000]), atol=1e-5)
    random = T.log_mel(8000, 32, n_fft=256, hop_length=80, clip_seconds=0.5, crop="random")
    starts = set()
    for seed in range(20):
        out = random({"audio": halves, "label": 1}, np.random.default_rng(seed))
        assert out["label"] == 1 and out["audio"].shape == (51, 32)
        again = random({"audio": halves}, np.random.default_rng(seed))["audio"]
        np.testing.assert_array_equal(out["audio"], again)  # a function of the rng alone
        starts.add(out["audio"][:, 20].round(3).tobytes())
    assert len(starts) > 5
    # shorter clips are padded with silence at the end
    short = t(tone(1000, 0.25, 8000))
    np.testing.assert_allclose(short[:20], at_8k[:20], atol=1e-4)
    assert np.allclose(short[-20:], np.log(1e-6), atol=1e-3)


def test_variable_length_rows_through_padding_and_workers_agree():
    waves = [tone(f, s, 8000) for f, s in ((500, 0.3), (1500, 0.2), (2500, 0.45), (800, 0.1))]
    ds = Dataset.from_dict(
        {"audio": [{"array": w, "sampling_rate": 8000} for w in waves], "label": [0, 1, 1, 0]},
        features=Features({"audio": Audio(), "label": Value("int64")}),
    )
    t = T.log_mel(8000, 16, n_fft=128, hop_length=80)
    loader = DataLoader(ds, 4, row_transform=t, padding=Padding(multiple_of=16))
    batch = next(iter(loader))
    frames = [1 + len(w) // 80 for w in waves]
    assert batch["audio"].shape == (4, 48, 16)
    assert np.asarray(batch["attention_mask"]).sum(1).tolist() == frames
    for i, w in enumerate(waves):
        np.testing.assert_allclose(np.asarray(batch["audio"])[i, : frames[i]], t(w), atol=1e-5)


def test_bad_clips_and_options_are_named():
    t = T.log_mel(8000, 16, n_fft=128, hop_length=80, clip_seconds=0.1, crop="random")
    with pytest.raises(ValueError, match=r"call it as t\(row, rng\)"):
        t({"audio": tone(500, 0.1, 8000)})
    center = T.log_mel(8000, 16, n_fft=128, hop_length=80)
    bad = [
        ({"audio": {"array": tone(500, 0.1, 8000), "sampling_rate": 0, "path": "a.wav"}},
         r"column 'audio' \(a.wav\): sampling_rate must be a positive int, got 0"),
        ({"audio": np.zeros(0, np.float32)}, "the clip is empty"),
        ({"audio": np.zeros((2, 3, 4), np.float32)}, r"expected a waveform of shape"),
        ({"sound": np.zeros(10, np.float32)}, "the row has no column 'audio'"),
    ]  # fmt: skip
    for row, message in bad:
        with pytest.raises((ValueError, KeyError), match=message):
            center(row)
    for kwargs, message in [
        ({"sample_rate": 0}, "sample_rate must be a positive int"),
        ({"f_max": 9000.0}, "f_max <= sample_rate / 2"),
        ({"clip_seconds": 0.0}, "clip_seconds must be a positive number"),
        ({"crop": "left"}, "crop must be one of"),
    ]:
        with pytest.raises(ValueError, match=message):
            T.log_mel(**{"sample_rate": 8000, **kwargs})
    spec = ServingSpec("audio", (11, 16), labels=("a", "b"), audio={"sample_rate": 8000})
    with pytest.raises(SpecError, match=r"an audio spec needs audio\.clip_seconds"):
        ServingSpec.from_dict(spec.to_dict(), "x")
    values = {**spec.to_dict(), "audio": {"sample_rate": 0, "clip_seconds": 0.1}}
    with pytest.raises(
        SpecError, match=r"preprocessing\.audio: sample_rate must be a positive int"
    ):
        ServingSpec.from_dict(values, "x")
    with pytest.raises(SpecError, match="unknown audio field 'window'"):
        ServingSpec.from_dict({**values, "audio": {"window": "hann"}}, "x")


def test_audio_cnn_ignores_padding_and_exports_with_its_spec(tmp_path):
    model = AudioCNN(2, input_shape=(16, 16), channels=(8, 8), rngs=nnx.Rngs(0))
    model.eval()
    forward = nnx.jit(lambda m, x, mask=None: m(x, mask))  # eager NNX compiles op by op: slow
    x = np.random.default_rng(0).normal(size=(3, 24, 16)).astype(np.float32)
    mask = np.arange(24)[None] < np.array([[16], [24], [20]])
    padded = np.where(mask[..., None], x, -13.8)
    full = np.asarray(forward(model, padded, mask))
    for i, n in enumerate((16, 24, 20)):
        alone = np.asarray(forward(model, x[i : i + 1, :n]))[0]
        np.testing.assert_allclose(full[i], alone, atol=1e-5)
    with pytest.raises(ValueError, match="needs at least 4 frames and mel bins"):
        AudioCNN(2, input_shape=(3, 16), channels=(8, 8), rngs=nnx.Rngs(0))
    # trained a few steps on tones, exported, served on raw waveforms
    options = {"sample_rate": 8000, "n_mels": 16, "n_fft": 128, "hop_length": 80,
               "clip_seconds": 0.2}  # fmt: skip
    t = T.log_mel(**options)
    waves = [tone(f, 0.2, 8000) for f in (400, 500, 2500, 3000) * 4]
    ds = Dataset.from_dict({"x": [t(w) for w in waves], "y": [0, 0, 1, 1] * 4})
    model = AudioCNN(2, input_shape=(21, 16), channels=(8, 8), rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adam(1e-2), inputs="x", targets="y", verbose=0)
    trainer.fit(DataLoader(ds, 8, shuffle=True), epochs=3)
    spec = ServingSpec("audio", (21, 16), labels=("low", "high"), audio=options)
    path = export(trainer, tmp_path / "audio", preprocessing=spec)
    served = load_exported(path)
    assert served.config["model"]["class"] == "AudioCNN"
    raw = [{"array": tone(450, 0.3, 16000), "sampling_rate": 16000}, tone(2800, 0.1, 8000)]
    want = np.asarray(trainer.predict({"x": np.stack([t(r) for r in raw])}))
    np.testing.assert_allclose(served.logits(raw), want, atol=1e-5)
    assert served.predict(raw)[0] == [["low", "high"][i] for i in want.argmax(-1)]
    rebuilt, _ = rebuild(path)  # by its registry name, from the export's weights
    x = np.stack([t(r) for r in raw])
    np.testing.assert_allclose(np.asarray(nnx.jit(lambda m, x: m(x))(rebuilt, x)), want, atol=1e-5)
