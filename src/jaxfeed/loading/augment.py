"""Per-row image augmentations, public as :mod:`jaxfeed.transforms` (the contract of a transform,
its ``rng`` and :func:`compose` are described there). Images are ``(H, W)`` or ``(H, W, C)``
arrays; ``uint8`` stays ``uint8`` until :func:`normalize`. Resizing uses Pillow's resampling
(antialiased, as torchvision's ``antialias=True``), with the crop and the resize done in one call;
crops and flips are numpy views.

>>> import numpy as np
>>> flip = horizontal_flip(p=1.0)
>>> flip(np.arange(6).reshape(2, 3), np.random.default_rng(0)).tolist()
[[2, 1, 0], [5, 4, 3]]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import PIL.Image

from jaxfeed._base.calls import takes_rng
from jaxfeed.loading.spectrogram import log_mel  # audio rows: one transformation per module

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Transform",
    "center_crop",
    "compose",
    "horizontal_flip",
    "log_mel",
    "normalize",
    "random_crop",
    "random_resized_crop",
    "resize",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
"""The ImageNet per-channel (RGB) means of pixels scaled to [0, 1], for `normalize`."""
IMAGENET_STD = (0.229, 0.224, 0.225)
"""The ImageNet per-channel (RGB) standard deviations of pixels in [0, 1], for `normalize`."""

_RESAMPLE = {
    "nearest": PIL.Image.Resampling.NEAREST,
    "bilinear": PIL.Image.Resampling.BILINEAR,
    "bicubic": PIL.Image.Resampling.BICUBIC,
    "lanczos": PIL.Image.Resampling.LANCZOS,
    "box": PIL.Image.Resampling.BOX,
}

Size = int | tuple[int, int]


def _size(size: Size, name: str) -> tuple[int, int]:
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if not (
        isinstance(size, tuple | list)
        and len(size) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
    ):
        raise ValueError(f"{name}: size must be a positive int or (height, width), got {size!r}")
    return int(size[0]), int(size[1])


def _resample(interpolation: str) -> Any:
    if interpolation not in _RESAMPLE:
        raise ValueError(f"interpolation must be one of {sorted(_RESAMPLE)}, got {interpolation!r}")
    return _RESAMPLE[interpolation]


class Transform:
    """A per-row transform: ``t(row, rng)`` on a row dict, or ``t(image, rng)`` on an array.

    >>> import numpy as np
    >>> from jaxfeed import transforms as T
    >>> flip = T.horizontal_flip(p=1.0)           # a Transform
    >>> flip(np.array([[1, 2, 3]], np.uint8), np.random.default_rng(0))
    array([[3, 2, 1]], dtype=uint8)
    """

    column: str = "image"
    needs_rng: bool = False

    def apply(self, image: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, row: Any, rng: np.random.Generator | None = None) -> Any:
        if self.needs_rng and rng is None:
            raise ValueError(
                f"{type(self).__name__} is random: call it as t(row, rng) with a "
                "numpy.random.Generator (the DataLoader passes one to row_transform)"
            )
        if isinstance(row, np.ndarray):
            return self.apply(_check(row, "image"), rng)
        if not isinstance(row, dict):
            raise TypeError(f"expected a row dict or an image array, got {type(row).__name__}")
        if self.column not in row:
            raise KeyError(
                f"{type(self).__name__}: the row has no column {self.column!r} (it has "
                f"{sorted(row)}); pass column=..."
            )
        return {**row, self.column: self.apply(_check(row[self.column], self.column), rng)}


def _check(image: Any, column: str) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.ndim not in (2, 3):
        shape = getattr(image, "shape", None)
        raise ValueError(
            f"column {column!r}: expected an image array of shape (H, W) or (H, W, C), got "
            f"{type(image).__name__}{'' if shape is None else f' of shape {shape}'}"
        )
    return image


def _crop_resize(
    image: np.ndarray, box: tuple[int, int, int, int], size: tuple[int, int], resample: Any
) -> np.ndarray:
    """Crop ``box`` = (top, left, height, width) and resize it to ``size`` in one Pillow call."""
    top, left, h, w = box
    out_h, out_w = size
    if (h, w) == (out_h, out_w):
        return image[top : top + h, left : left + w]
    pil_box = (left, top, left + w, top + h)
    if image.dtype == np.uint8 and (image.ndim == 2 or image.shape[2] in (1, 3, 4)):
        squeeze = image.ndim == 3 and image.shape[2] == 1
        source = image[:, :, 0] if squeeze else image
        resized = np.asarray(
            PIL.Image.fromarray(np.ascontiguousarray(source)).resize(
                (out_w, out_h), resample, box=pil_box
            )
        )
        return resized[:, :, None] if squeeze else resized
    # other dtypes: each channel as a 32-bit float image
    planes = image[:, :, None] if image.ndim == 2 else image
    channels = [
        np.asarray(
            PIL.Image.fromarray(np.ascontiguousarray(planes[:, :, c], dtype=np.float32)).resize(
                (out_w, out_h), resample, box=pil_box
            )
        )
        for c in range(planes.shape[2])
    ]
    out = np.stack(channels, axis=2).astype(image.dtype, copy=False)
    return out[:, :, 0] if image.ndim == 2 else out


class _RandomResizedCrop(Transform):
    needs_rng = True

    def __init__(self, size, scale, ratio, interpolation, column) -> None:
        self.size = _size(size, "random_resized_crop")
        if not (0 < scale[0] <= scale[1] <= 1):
            raise ValueError(
                f"random_resized_crop: scale must satisfy 0 < lo <= hi <= 1, got {scale}"
            )
        if not (0 < ratio[0] <= ratio[1]):
            raise ValueError(f"random_resized_crop: ratio must satisfy 0 < lo <= hi, got {ratio}")
        self.scale, self.log_ratio = scale, (math.log(ratio[0]), math.log(ratio[1]))
        self.ratio = ratio
        self.resample, self.column = _resample(interpolation), column

    def box(self, height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
        area = height * width
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*self.log_ratio))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return top, left, h, w
        aspect = width / height  # fall back to a centre crop within the ratio bounds
        if aspect < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif aspect > self.ratio[1]:
            h, w = height, round(height * self.ratio[1])
        else:
            h, w = height, width
        return (height - h) // 2, (width - w) // 2, h, w

    def apply(self, image, rng):
        return _crop_resize(
            image, self.box(image.shape[0], image.shape[1], rng), self.size, self.resample
        )


def random_resized_crop(
    size: Size,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    interpolation: str = "bilinear",
    column: str = "image",
) -> Transform:
    """A random crop of ``scale`` of the area and aspect ``ratio``, resized to ``size`` (the
    Inception / torchvision ``RandomResizedCrop`` recipe: 10 tries, then a centre crop).

    >>> import numpy as np
    >>> t = random_resized_crop((16, 20))
    >>> t(np.zeros((50, 40, 3), np.uint8), np.random.default_rng(1)).shape
    (16, 20, 3)
    """
    return _RandomResizedCrop(size, tuple(scale), tuple(ratio), interpolation, column)


class _RandomCrop(Transform):
    needs_rng = True

    def __init__(self, size, padding, column) -> None:
        self.size, self.padding, self.column = _size(size, "random_crop"), int(padding), column
        if self.padding < 0:
            raise ValueError(f"random_crop: padding must be >= 0, got {padding}")

    def apply(self, image, rng):
        if self.padding:
            pad = [(self.padding, self.padding), (self.padding, self.padding)]
            image = np.pad(image, pad + [(0, 0)] * (image.ndim - 2))
        h, w = self.size
        height, width = image.shape[:2]
        if h > height or w > width:
            raise ValueError(
                f"random_crop: cannot crop {self.size} from an image of {(height, width)}"
            )
        top = int(rng.integers(0, height - h + 1))
        left = int(rng.integers(0, width - w + 1))
        return image[top : top + h, left : left + w]


def random_crop(size: Size, padding: int = 0, column: str = "image") -> Transform:
    """A crop of ``size`` at a random place (after zero-padding each side by ``padding``).

    >>> import numpy as np
    >>> random_crop(32, padding=4)(np.ones((32, 32, 3), np.uint8), np.random.default_rng(0)).shape
    (32, 32, 3)
    """
    return _RandomCrop(size, padding, column)


class _CenterCrop(Transform):
    def __init__(self, size, column) -> None:
        self.size, self.column = _size(size, "center_crop"), column

    def apply(self, image, rng):
        h, w = self.size
        height, width = image.shape[:2]
        if h > height or w > width:
            raise ValueError(
                f"center_crop: cannot crop {self.size} from an image of {(height, width)}"
            )
        top, left = (height - h) // 2, (width - w) // 2
        return image[top : top + h, left : left + w]


def center_crop(size: Size, column: str = "image") -> Transform:
    """The central ``size`` crop.

    >>> import numpy as np
    >>> center_crop(2)(np.arange(16).reshape(4, 4)).tolist()
    [[5, 6], [9, 10]]
    """
    return _CenterCrop(size, column)


class _Resize(Transform):
    def __init__(self, size, interpolation, column) -> None:
        if isinstance(size, int) and not isinstance(size, bool):
            if size <= 0:
                raise ValueError(f"resize: size must be positive, got {size}")
            self.short, self.size = size, None
        else:
            self.short, self.size = None, _size(size, "resize")
        self.resample, self.column = _resample(interpolation), column

    def apply(self, image, rng):
        height, width = image.shape[:2]
        if self.size is not None:
            size = self.size
        elif height <= width:
            size = (self.short, max(1, round(width * self.short / height)))
        else:
            size = (max(1, round(height * self.short / width)), self.short)
        return _crop_resize(image, (0, 0, height, width), size, self.resample)


def resize(size: Size, interpolation: str = "bilinear", column: str = "image") -> Transform:
    """Resize to ``(height, width)``, or, given one int, so that the shorter side is ``size``
    (keeping the aspect ratio, as torchvision's ``Resize(int)``).

    >>> import numpy as np
    >>> resize(8)(np.zeros((16, 32, 3), np.uint8)).shape
    (8, 16, 3)
    """
    return _Resize(size, interpolation, column)


class _HorizontalFlip(Transform):
    needs_rng = True

    def __init__(self, p, column) -> None:
        if not 0 <= p <= 1:
            raise ValueError(f"horizontal_flip: p must be in [0, 1], got {p}")
        self.p, self.column = float(p), column

    def apply(self, image, rng):
        return image[:, ::-1] if rng.random() < self.p else image


def horizontal_flip(p: float = 0.5, column: str = "image") -> Transform:
    """Mirror the image left-right with probability ``p``.

    >>> import numpy as np
    >>> horizontal_flip(p=1.0)(np.array([[1, 2, 3]]), np.random.default_rng(0)).tolist()
    [[3, 2, 1]]
    """
    return _HorizontalFlip(p, column)


class _Normalize(Transform):
    def __init__(self, mean, std, scale, dtype, column) -> None:
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        if np.any(self.std == 0):
            raise ValueError(f"normalize: std must not be zero, got {std}")
        self.scale, self.dtype, self.column = scale, np.dtype(dtype), column
        self._rows: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # factors tiled over a row

    def __getstate__(self) -> dict:
        # without the cache: a used transform pickles to the same bytes as a fresh one, so a new
        # DataLoader with it recognises the recipe of the last one and takes over its workers
        return {**self.__dict__, "_rows": {}}

    def apply(self, image, rng):
        scale = self.scale
        if scale is None:
            scale = 1 / 255 if image.dtype == np.uint8 else 1.0
        factor = (np.float32(scale) / self.std).astype(self.dtype)
        offset = (-self.mean / self.std).astype(self.dtype)
        if image.ndim == 3 and factor.ndim == 1 and factor.shape[0] not in (1, image.shape[2]):
            raise ValueError(
                f"normalize: {factor.shape[0]} mean/std values for an image of "
                f"{image.shape[2]} channels"
            )
        if image.ndim == 3 and factor.size > 1:
            # Broadcasting over a 3-long channel axis runs numpy's inner loop 3 elements at a
            # time (7x slower): work on (H, W*C) rows against factors tiled W times instead.
            h, w, c = image.shape
            key = (w, c, float(scale))
            row = self._rows.get(key)
            if row is None:
                row = self._rows[key] = (np.tile(factor, w), np.tile(offset, w))
            out = np.multiply(_contiguous(image).reshape(h, w * c), row[0], dtype=self.dtype)
            out += row[1]
            return out.reshape(h, w, c)
        out = np.multiply(image, factor, dtype=self.dtype)
        out += offset
        return out


def _contiguous(image: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of an (H, W, C) view (e.g. flipped), one channel at a time: 6x faster
    than ``np.ascontiguousarray`` for 3 channels, for the same reason as above."""
    if image.flags.c_contiguous:
        return image
    if image.shape[2] > 4:
        return np.ascontiguousarray(image)
    out = np.empty(image.shape, image.dtype)
    for c in range(image.shape[2]):
        out[:, :, c] = image[:, :, c]
    return out


def normalize(
    mean: float | Sequence[float],
    std: float | Sequence[float],
    scale: float | None = None,
    dtype: Any = np.float32,
    column: str = "image",
) -> Transform:
    """``(image * scale - mean) / std`` per channel, as ``dtype``; ``scale`` defaults to 1/255
    for ``uint8`` images (so ImageNet statistics in [0, 1] apply) and 1 otherwise.

    >>> import numpy as np
    >>> normalize(0.5, 0.5)(np.array([[0, 255]], np.uint8)).tolist()
    [[-1.0, 1.0]]
    """
    return _Normalize(mean, std, scale, dtype, column)


class _Compose(Transform):
    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = list(transforms)
        self.rng = [takes_rng(t) for t in self.transforms]
        self.needs_rng = any(
            getattr(t, "needs_rng", r) for t, r in zip(self.transforms, self.rng, strict=True)
        )

    def __call__(self, row: Any, rng: np.random.Generator | None = None) -> Any:
        for t, with_rng in zip(self.transforms, self.rng, strict=True):
            row = t(row, rng) if with_rng else t(row)
        return row


def compose(*transforms: Callable) -> Transform:
    """Apply ``transforms`` in order (each ``fn(row)`` or ``fn(row, rng)``), sharing one ``rng``.

    >>> import numpy as np
    >>> t = compose(center_crop(2), normalize(0.0, 1.0, scale=1.0))
    >>> t({"image": np.ones((4, 4), np.uint8)})["image"].dtype
    dtype('float32')
    """
    return _Compose(transforms)
