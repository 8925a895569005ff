import io

import jax.numpy as jnp
import numpy as np
import PIL.Image
import pytest
import soundfile

from jaxfeed import Audio, Dataset, DecodeError, FeatureError, Features, Image


def png_bytes(array):
    buffer = io.BytesIO()
    PIL.Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def image_files(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (6, 5, 3), dtype=np.uint8) for _ in range(3)]
    paths = []
    for i, a in enumerate(arrays):
        path = tmp_path / f"img{i}.png"
        PIL.Image.fromarray(a).save(path)
        paths.append(str(path))
    return paths, arrays


def test_image_from_paths_bytes_pil_and_arrays(image_files):
    paths, arrays = image_files
    values = [paths[0], png_bytes(arrays[1]), PIL.Image.fromarray(arrays[2]), arrays[0]]
    ds = Dataset.from_dict({"image": values}, features=Features({"image": Image()}))
    row = ds[0]["image"]
    assert isinstance(row, PIL.Image.Image) and row.size == (5, 6)
    batch = ds.with_format("numpy")[:4]["image"]
    assert batch.shape == (4, 6, 5, 3) and batch.dtype == np.uint8
    np.testing.assert_array_equal(batch, np.stack([arrays[0], arrays[1], arrays[2], arrays[0]]))


def test_image_jax_keeps_uint8_and_stacks(image_files):
    paths, arrays = image_files
    ds = Dataset.from_dict({"image": paths}, features=Features({"image": Image()})).with_format(
        "jax"
    )
    assert ds[0]["image"].shape == (6, 5, 3) and ds[0]["image"].dtype == jnp.uint8
    assert ds[:2]["image"].shape == (2, 6, 5, 3)
    np.testing.assert_array_equal(np.asarray(ds[:3]["image"]), np.stack(arrays))


def test_image_mode_and_grayscale(image_files):
    paths, arrays = image_files
    ds = Dataset.from_dict({"image": paths}, features=Features({"image": Image(mode="L")}))
    gray = ds.with_format("numpy")[0]["image"]
    assert gray.shape == (6, 5) and gray.dtype == np.uint8
    expected = np.asarray(PIL.Image.fromarray(arrays[0]).convert("L"))
    np.testing.assert_array_equal(gray, expected)


def test_images_of_different_sizes_give_a_list(tmp_path):
    a, b = np.zeros((4, 4, 3), np.uint8), np.zeros((2, 3, 3), np.uint8)
    ds = Dataset.from_dict({"image": [a, b]}, features=Features({"image": Image()})).with_format(
        "jax"
    )
    batch = ds[:2]["image"]
    assert isinstance(batch, list) and [x.shape for x in batch] == [(4, 4, 3), (2, 3, 3)]


def test_image_decode_false(image_files):
    paths, _ = image_files
    ds = Dataset.from_dict({"image": paths[:1]}, features=Features({"image": Image(decode=False)}))
    assert ds[0]["image"] == {"bytes": None, "path": paths[0]}


def test_image_inferred_from_pil(image_files):
    _, arrays = image_files
    ds = Dataset.from_dict({"image": [PIL.Image.fromarray(a) for a in arrays]})
    assert ds.features["image"] == Image()


def test_corrupt_image_names_column_row_and_path(tmp_path, image_files):
    paths, _ = image_files
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG not really")
    ds = Dataset.from_dict(
        {"image": [paths[0], paths[1], str(bad)]}, features=Features({"image": Image()})
    )
    with pytest.raises(DecodeError, match=r"column 'image', row 2, path '.*broken.png'"):
        ds.with_format("numpy")[:3]
    with pytest.raises(DecodeError, match="row 2"):
        ds[2]
    shuffled = ds.select([2, 0])
    with pytest.raises(DecodeError, match="row 2"):  # reported as the underlying table row
        shuffled.with_format("jax")[:2]


def test_missing_image_file_is_rejected_at_encode(tmp_path):
    with pytest.raises(FeatureError, match=r"column 'image', row 0.*no file at"):
        Dataset.from_dict(
            {"image": [str(tmp_path / "nope.png")]}, features=Features({"image": Image()})
        )


def wav_bytes(samples, rate, fmt="WAV", subtype=None):
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def test_audio_wav_and_flac(tmp_path):
    t = np.linspace(0, 1, 8000, endpoint=False)
    stereo = (
        np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 220 * t)], axis=1).astype(
            np.float32
        )
        * 0.5
    )
    wav = tmp_path / "a.wav"
    soundfile.write(wav, stereo, 8000, subtype="FLOAT")
    flac = wav_bytes((stereo * 32767).astype(np.int16), 8000, fmt="FLAC")
    ds = Dataset.from_dict({"audio": [str(wav), flac]}, features=Features({"audio": Audio()}))
    row = ds[0]["audio"]
    assert row["sampling_rate"] == 8000 and row["path"] == str(wav)
    np.testing.assert_allclose(row["array"], stereo.mean(axis=1), atol=1e-6)
    np.testing.assert_allclose(ds[1]["audio"]["array"], stereo.mean(axis=1), atol=1e-3)
    both = Dataset.from_dict({"audio": [str(wav)]}, features=Features({"audio": Audio(mono=False)}))
    assert both[0]["audio"]["array"].shape == (2, 8000)


def test_audio_resample_and_jax_format(tmp_path):
    tone = np.sin(2 * np.pi * 100 * np.arange(4000) / 4000).astype(np.float32)
    ds = Dataset.from_dict(
        {"audio": [{"array": tone, "sampling_rate": 4000}]},
        features=Features({"audio": Audio(sampling_rate=8000)}),
    ).with_format("jax")
    row = ds[0]["audio"]
    assert row["array"].dtype == jnp.float32 and row["array"].shape == (8000,)
    assert row["sampling_rate"].dtype == jnp.int32 and int(row["sampling_rate"]) == 8000
    # a 100 Hz tone stays a 100 Hz tone: peak of the spectrum at bin 100
    spectrum = np.abs(np.fft.rfft(np.asarray(row["array"])))
    assert int(np.argmax(spectrum)) == 100
    batch = ds[:1]["audio"]
    assert isinstance(batch, list) and batch[0]["array"].shape == (8000,)


def test_corrupt_audio(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk")
    ds = Dataset.from_dict({"audio": [str(bad)]}, features=Features({"audio": Audio()}))
    with pytest.raises(DecodeError, match=r"column 'audio', row 0, path '.*bad.wav'"):
        ds[0]


def test_sixteen_bit_pngs_are_kept_or_scaled_never_clipped():
    """Image(mode="L") of a 16-bit PNG keeps or scales its values (clipping sent 99% of the
    pixels to 255)."""
    import io

    import numpy as np
    import PIL.Image

    from jaxfeed import Dataset, Features, Image

    pixels = np.arange(16, dtype=np.uint16).reshape(4, 4) * 4000 + 1000
    buffer = io.BytesIO()
    PIL.Image.fromarray(pixels).save(buffer, format="PNG")
    ds = Dataset.from_dict({"img": [buffer.getvalue()]}, features=Features({"img": Image()}))
    kept = ds.with_format("numpy")[0]["img"]
    assert kept.dtype == np.uint16 and (kept == pixels).all()  # no mode: the 16 bits are kept
    expected = np.round(pixels / 257).astype(np.uint8)
    for mode, channels in (("L", ()), ("RGB", (3,))):
        scaled = ds.cast_column("img", Image(mode=mode)).with_format("numpy")[0]["img"]
        assert scaled.dtype == np.uint8 and scaled.shape == (4, 4, *channels)
        np.testing.assert_array_equal(scaled if not channels else scaled[..., 0], expected)
