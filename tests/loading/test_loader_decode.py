"""Image decoding for the loader: the fast JPEG path matches Pillow; decode-time downscaling."""

import io

import numpy as np
import PIL.Image
import pytest

from jaxfeed import DataLoader, Dataset, Features, Image
from jaxfeed.data.features import image as image_module


def jpeg(array, **kw):
    buffer = io.BytesIO()
    PIL.Image.fromarray(array).save(buffer, format="JPEG", quality=90, **kw)
    return buffer.getvalue()


@pytest.mark.parametrize("shape", [(100, 130, 3), (64, 80), (257, 255, 3)])
@pytest.mark.parametrize("mode", [None, "RGB"])
@pytest.mark.parametrize("min_size", [None, (30, 30), (60, 40), (13, 100)])
def test_fast_jpeg_path_is_pillow_pixel_for_pixel(shape, mode, min_size):
    data = jpeg(np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8))
    feature = Image(mode=mode)
    fast = feature.decode_array((data, None), 0, min_size=min_size)
    slow = feature.decode_array((data, None), 0, min_size=min_size, decoder="pillow")
    assert fast.shape == slow.shape and fast.dtype == np.uint8
    np.testing.assert_array_equal(fast, slow)
    if min_size is not None:
        assert fast.shape[0] >= min(min_size[0], shape[0])
        assert fast.shape[1] >= min(min_size[1], shape[1])
    if min_size == (30, 30) and shape[0] == 257:
        assert fast.shape[:2] == (33, 32)  # 1/8 scale, done by the decoder


def test_exif_rotation_and_fallbacks_match_pillow():
    pixels = np.random.default_rng(1).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # rotated: the fast path must leave it to Pillow
    rotated = jpeg(pixels, exif=exif.tobytes())
    assert image_module._decode_jpeg(rotated, None, None) is None
    assert Image().decode_array((rotated, None), 0).shape == (30, 20, 3)
    plain = jpeg(pixels)
    assert image_module._decode_jpeg(plain, "L", None) is None  # Pillow's luma formula
    assert Image(mode="L").decode_array((plain, None), 0).shape == (20, 30)


def test_without_simplejpeg_pillow_decodes(monkeypatch):
    data = jpeg(np.full((16, 16, 3), 90, np.uint8))
    expected = Image().decode_array((data, None), 0)
    monkeypatch.setattr(image_module, "simplejpeg", None)
    np.testing.assert_array_equal(Image().decode_array((data, None), 0), expected)


def test_loader_decode_size_downscales_in_the_decoder():
    pixels = np.random.default_rng(2).integers(0, 256, (6, 64, 64, 3), dtype=np.uint8)
    ds = Dataset.from_dict(
        {"image": [jpeg(p) for p in pixels]}, features=Features({"image": Image()})
    )
    batch = next(iter(DataLoader(ds, batch_size=3, decode_size=(16, 16))))
    assert batch["image"].shape == (3, 16, 16, 3)
    batch = next(iter(DataLoader(ds, batch_size=3, decode_size={"image": 20})))
    assert batch["image"].shape == (3, 32, 32, 3)
    with pytest.raises(ValueError, match="decode_size for column 'image' must be"):
        DataLoader(ds, batch_size=3, decode_size=(0, 4))
