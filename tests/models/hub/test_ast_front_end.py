"""AST's front end as a run uses it (``jaxfeed train --model`` an AST checkpoint): the row
transform equals ``transformers``' ``ASTFeatureExtractor``, its JSON options read back (bad ones
refused by name), the serving spec takes them, and the loader's worker processes run it without
importing JAX."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxfeed.models.hub import audio_features as af
from jaxfeed.serve.spec import ServingSpec, SpecError

EXTRACTOR = af.ASTFeatureExtractor(num_mel_bins=16, max_length=40)


def clips():
    """A 0.25 s tone (padded to 40 frames) and 0.6 s of noise (cut to 40 frames), at 16 kHz."""
    rng = np.random.default_rng(0)
    t = np.arange(4000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return [tone, (0.2 * rng.standard_normal(9600)).astype(np.float32)]


def test_the_row_transform_equals_transformers_extractor():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")  # transformers 5's ASTFeatureExtractor refuses to start without it
    reference = transformers.ASTFeatureExtractor(num_mel_bins=16, max_length=40)
    expected = reference(clips(), sampling_rate=16000, return_tensors="np")["input_values"]
    front = af.ASTFrontEnd(EXTRACTOR, crop="start", column="audio")
    for i, clip in enumerate(clips()):
        row = {"audio": {"array": clip, "sampling_rate": 16000}, "label": 1}
        got = front(row)
        assert got["label"] == 1 and got["audio"].shape == (40, 16)
        np.testing.assert_allclose(got["audio"], expected[i], atol=1e-3)
    # PCM integers are scaled to [-1, 1) and stereo is mixed to mono first
    pcm = (clips()[0] * 32767).astype(np.int16)
    stereo = np.stack([pcm, pcm])
    as_float = front(pcm.astype(np.float32) / 32768)
    np.testing.assert_allclose(front({"array": stereo, "sampling_rate": 16000}), as_float,
                               atol=1e-5)  # fmt: skip


def test_clips_are_resampled_to_the_checkpoint_rate_and_cut_at_random_in_training():
    pytest.importorskip("soxr")
    front = af.ASTFrontEnd(EXTRACTOR)
    tone = clips()[0]
    at_8k = front({"array": tone[::2], "sampling_rate": 8000})  # the same tone at 8 kHz
    assert at_8k.shape == (40, 16)
    low = slice(0, 8)  # the bins below 4 kHz carry the 440 Hz tone either way
    assert np.abs(at_8k[:20, low] - front(tone)[:20, low]).mean() < 0.2
    noise = clips()[1]
    random = af.ASTFrontEnd(EXTRACTOR, crop="random")
    with pytest.raises(ValueError, match="is random: call it as t"):
        random(noise)
    crops = {random(noise, np.random.default_rng(s)).tobytes() for s in range(4)}
    assert len(crops) > 1  # windows at different starts
    one = random(noise, np.random.default_rng(0))
    starts = [s for s in range(0, len(noise) - EXTRACTOR.clip_samples + 1)
              if np.allclose(EXTRACTOR.features(noise[s : s + EXTRACTOR.clip_samples]), one)]  # fmt: skip
    assert len(starts) >= 1  # the features of one window of the clip


def test_options_round_trip_and_bad_ones_are_named():
    options = af.front_end_options(EXTRACTOR)
    assert options["front_end"] == "ast" and options["clip_seconds"] == 0.415
    assert af.from_options(options) == EXTRACTOR
    spec = ServingSpec("audio", (40, 16), labels=("a", "b"), audio=options)
    assert ServingSpec.from_dict(spec.to_dict(), "spec.json") == spec
    batch = spec.model_inputs([{"array": c, "sampling_rate": 16000} for c in clips()])
    assert batch.shape == (2, 40, 16) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch[1], af.ASTFrontEnd(EXTRACTOR)(clips()[1]))
    cases = [({"std": 0}, "std must be > 0"), ({"max_length": 0}, "max_length must be a positive"),
             ({"mean": "x"}, "mean must be a finite number"), ({"window": 3}, "unknown field"),
             ({"clip_seconds": 1.0}, "make max_length=40 frames")]  # fmt: skip
    for change, message in cases:
        with pytest.raises(SpecError, match=f"spec.json: preprocessing.audio: .*{message}"):
            ServingSpec.from_dict({**spec.to_dict(), "audio": {**options, **change}}, "spec.json")
    with pytest.raises(
        SpecError, match=r"clip 0: .*has 100 samples; AST.s front end needs at least 400"
    ):
        spec.model_inputs([np.zeros(100, np.float32)])


SCRIPT = textwrap.dedent(
    """
    import io, sys
    import numpy as np

    def modules(row):  # defined in __main__: reaches the workers by value
        heavy = sorted({m.split(".")[0] for m in sys.modules} & {"jax", "jaxlib", "flax", "torch"})
        return {**row, "heavy": " ".join(heavy) or "-"}

    if __name__ == "__main__":
        import soundfile
        from jaxfeed import Audio, DataLoader, Dataset, Features, Value
        from jaxfeed.models.hub.audio_features import ASTFeatureExtractor, ASTFrontEnd

        buffer = io.BytesIO()
        soundfile.write(buffer, np.zeros(4000, np.float32), 8000, format="WAV")
        ds = Dataset.from_dict(
            {"audio": [{"bytes": buffer.getvalue(), "path": None}] * 4, "id": np.arange(4)},
            features=Features({"audio": Audio(), "id": Value("int64")}),
        )
        front = ASTFrontEnd(ASTFeatureExtractor(num_mel_bins=16, max_length=40), "random")
        loader = DataLoader(ds, 2, num_workers=1, row_transform=lambda r, g: modules(front(r, g)))
        shapes = {tuple(b["audio"].shape) for b in loader}
        print(" ".join(sorted({h for b in loader for h in b["heavy"]})), shapes, flush=True)
    """
)


def test_worker_processes_run_the_front_end_without_jax(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    script = tmp_path / "front_end_workers.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "- {(2, 40, 16)}", done.stdout + done.stderr[-2000:]
