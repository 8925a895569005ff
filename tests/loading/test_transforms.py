"""jaxfeed.loading.augment: shapes, determinism, agreement with the obvious reference."""

import numpy as np
import pytest

from jaxfeed import DataLoader, Dataset, Features, Image, Value
from jaxfeed import transforms as T


def rng(seed=0):
    return np.random.default_rng(seed)


def test_random_resized_crop_boxes_follow_scale_and_ratio():
    t = T.random_resized_crop(24, scale=(0.25, 0.5), ratio=(0.5, 2.0))
    for seed in range(50):
        top, left, h, w = t.box(100, 80, rng(seed))
        assert top >= 0 and top + h <= 100 and left >= 0 and left + w <= 80
        assert 0.2 * 8000 <= h * w <= 0.55 * 8000 and 0.45 <= w / h <= 2.2
    image = np.random.default_rng(0).integers(0, 256, (100, 80, 3), dtype=np.uint8)
    a, b = t(image, rng(3)), t(image, rng(3))
    assert a.shape == (24, 24, 3) and a.dtype == np.uint8 and np.array_equal(a, b)
    floats = t(image.astype(np.float32), rng(3))
    assert floats.dtype == np.float32 and np.abs(floats - a).max() <= 1.0


def test_crops_flip_resize_normalize():
    image = np.arange(5 * 6 * 3, dtype=np.uint8).reshape(5, 6, 3)
    assert np.array_equal(T.center_crop((3, 4))(image), image[1:4, 1:5])
    crop = T.random_crop(4)(image, rng(1))
    assert crop.shape == (4, 4, 3)
    assert T.random_crop(5, padding=2)(image, rng(1)).shape == (5, 5, 3)
    assert np.array_equal(T.horizontal_flip(1.0)(image, rng()), image[:, ::-1])
    assert np.array_equal(T.horizontal_flip(0.0)(image, rng()), image)
    assert T.resize((10, 12))(image).shape == (10, 12, 3)
    assert T.resize(10)(image).shape == (10, 12, 3)
    flat = np.full((2, 2, 3), 255, np.uint8)
    out = T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)(flat)
    np.testing.assert_allclose(
        out[0, 0], (1 - np.array(T.IMAGENET_MEAN)) / np.array(T.IMAGENET_STD), rtol=1e-6
    )
    gray = T.resize((4, 4))(np.zeros((8, 8), np.uint8))
    assert gray.shape == (4, 4)


def test_errors_are_clear():
    with pytest.raises(ValueError, match="is random: call it as t\\(row, rng\\)"):
        T.random_crop(2)(np.zeros((4, 4), np.uint8))
    with pytest.raises(KeyError, match="the row has no column 'image'"):
        T.center_crop(2)({"pixels": np.zeros((4, 4))})
    with pytest.raises(ValueError, match="cannot crop \\(8, 8\\) from an image of \\(4, 4\\)"):
        T.center_crop(8)(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="size must be a positive int"):
        T.resize((0, 3))
    with pytest.raises(ValueError, match="3 mean/std values for an image of 4 channels"):
        T.normalize([0, 0, 0], [1, 1, 1])(np.zeros((2, 2, 4), np.uint8))


def test_compose_as_row_transform_in_the_loader():
    pixels = np.random.default_rng(0).integers(0, 256, (10, 40, 40, 3), dtype=np.uint8)
    ds = Dataset.from_dict(
        {"image": list(pixels), "label": list(range(10))},
        features=Features({"image": Image(), "label": Value("int64")}),
    )
    augment = T.compose(
        T.random_resized_crop(32), T.horizontal_flip(), T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)
    )
    loader = DataLoader(ds, batch_size=4, shuffle=True, seed=1, row_transform=augment)
    batches = list(loader)
    assert batches[0]["image"].shape == (4, 32, 32, 3) and batches[0]["image"].dtype == np.float32
    again = list(DataLoader(ds, batch_size=4, shuffle=True, seed=1, row_transform=augment))
    for a, b in zip(batches, again, strict=True):
        np.testing.assert_array_equal(np.asarray(a["image"]), np.asarray(b["image"]))


@pytest.mark.parametrize("view", ["whole", "flipped", "cropped", "strided", "gray", "float"])
def test_normalize_gives_the_formula_bit_for_bit_on_any_view(view):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    x = {
        "whole": image,
        "flipped": image[:, ::-1],
        "cropped": image[3:20, 5:33],
        "strided": image[::2, ::3],
        "gray": image[:, :, 0],
        "float": image.astype(np.float32)[:, ::-1],
    }[view]
    t = T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)
    scale = np.float32(1 / 255 if x.dtype == np.uint8 else 1.0)
    std, mean = np.float32(T.IMAGENET_STD), np.float32(T.IMAGENET_MEAN)
    if x.ndim == 2:  # one channel: scalar statistics
        t = T.normalize(0.5, 0.25)
        std, mean = np.float32(0.25), np.float32(0.5)
    want = np.multiply(x, scale / std, dtype=np.float32)
    want += -mean / std
    got = t(x)
    assert got.dtype == np.float32 and got.shape == x.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
