"""An image checkpoint's preprocessing (``preprocessor_config.json``) as data, applied in numpy.

:class:`ImageProcessor` follows ``transformers``' ``ViTImageProcessor`` (its PIL backend, the one
used without torchvision): resize with Pillow (``size`` as ``{"height", "width"}``, one int for a
square, or ``{"shortest_edge"}`` keeping the aspect ratio), optionally center-crop to
``crop_size`` (padding with zeros when the image is smaller), rescale by ``rescale_factor`` and
normalise by ``image_mean`` / ``image_std``, giving ``pixel_values`` ``(batch, channels, height,
width)`` float32 (or channels-last with ``channels_last=True``; the models take both).

Images are ``(H, W, C)`` or ``(C, H, W)`` arrays (1, 3 or 4 channels; channels-last when the last
axis could be either), ``(H, W)`` grayscale arrays, PIL images, a list of them or a ``(batch, H,
W, C)`` / ``(batch, C, H, W)`` array. uint8 images are resized exactly as ``transformers`` does;
float images are resized channel by channel in Pillow's float mode (``transformers`` first
quantises them to uint8).

:func:`for_model` builds the processor and checks that the size it produces is one the model can
take (the config's ``image_size``, a multiple of ``patch_size``): one clear error otherwise.

>>> import numpy as np
>>> proc = ImageProcessor.from_dict({"size": {"height": 4, "width": 4},
...                                  "image_mean": [0.5] * 3, "image_std": [0.5] * 3})
>>> proc(np.full((8, 6, 3), 255, np.uint8))["pixel_values"].shape
(1, 3, 4, 4)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

IMAGENET_STANDARD = (0.5, 0.5, 0.5)
BILINEAR = 2  # PIL.Image.Resampling.BILINEAR, transformers' PILImageResampling.BILINEAR
RESAMPLINGS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
SIZE_KEYS = ({"height", "width"}, {"shortest_edge"})
WHERE = "preprocessor_config.json"


def _size(value: Any, key: str, where: str) -> dict[str, int]:
    """A ``size``/``crop_size`` entry as a dict: an int is a square (``ViTImageProcessor``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"height": value, "width": value}
    if not isinstance(value, Mapping) or set(value) not in SIZE_KEYS:
        raise ValueError(
            f"{where}: {key} must be an int, {{'height': H, 'width': W}} or "
            f"{{'shortest_edge': S}}, got {value!r}"
        )
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}: {key}[{k!r}] must be a positive int, got {v!r}")
    return dict(value)


def _floats(value: Any, key: str, where: str) -> tuple[float, ...]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values
    ):
        raise ValueError(f"{where}: {key} must be a finite number or a list of them, got {value!r}")
    return tuple(float(v) for v in values)


FLAGS = ("do_resize", "do_center_crop", "do_rescale", "do_normalize")


@dataclass(frozen=True)
class ImageProcessor:
    """Resize, crop, rescale and normalise images as a checkpoint's preprocessor says.

    >>> proc = ImageProcessor(size={"height": 2, "width": 2}, do_normalize=False)
    >>> proc(np.zeros((2, 2, 3), np.uint8), channels_last=True)["pixel_values"].shape
    (1, 2, 2, 3)
    """

    do_resize: bool = True
    size: dict[str, int] = field(default_factory=lambda: {"height": 224, "width": 224})
    resample: int = BILINEAR
    do_center_crop: bool = False
    crop_size: dict[str, int] | None = None
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple[float, ...] = IMAGENET_STANDARD
    image_std: tuple[float, ...] = IMAGENET_STANDARD
    do_convert_rgb: bool | None = None
    image_processor_type: str = "ViTImageProcessor"

    def __post_init__(self) -> None:
        where = WHERE
        for flag in (*FLAGS, "do_convert_rgb"):
            value = getattr(self, flag)
            if not isinstance(value, bool) and not (flag == "do_convert_rgb" and value is None):
                raise ValueError(f"{where}: {flag} must be true or false, got {value!r}")
        object.__setattr__(self, "size", _size(self.size, "size", where))
        if self.do_center_crop:
            if self.crop_size is None:
                raise ValueError(f"{where}: do_center_crop is true but crop_size is missing")
            crop = _size(self.crop_size, "crop_size", where)
            if "height" not in crop:
                raise ValueError(f"{where}: crop_size must be {{'height', 'width'}}, got {crop}")
            object.__setattr__(self, "crop_size", crop)
        if self.resample not in RESAMPLINGS:
            raise ValueError(
                f"{where}: resample must be one of {sorted(RESAMPLINGS)} (PIL filters), got "
                f"{self.resample!r}"
            )
        object.__setattr__(self, "image_mean", _floats(self.image_mean, "image_mean", where))
        object.__setattr__(self, "image_std", _floats(self.image_std, "image_std", where))
        if self.do_normalize and any(s == 0 for s in self.image_std):
            raise ValueError(f"{where}: image_std has a zero: {self.image_std}")
        factor = self.rescale_factor
        if (
            not isinstance(factor, (int, float))
            or isinstance(factor, bool)
            or not (math.isfinite(factor) and factor > 0)
        ):
            raise ValueError(
                f"{where}: rescale_factor must be a finite number > 0 (1/255 maps bytes to "
                f"[0, 1]), got {factor!r}"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str = WHERE) -> ImageProcessor:
        """The processor a ``preprocessor_config.json`` describes (keys this processor does not use,
        such as ``feature_extractor_type``, are ignored as ``transformers`` ignores them)."""
        if not isinstance(values, Mapping):
            raise ValueError(f"{where}: expected a JSON object, got {type(values).__name__}")
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in values.items() if k in names and v is not None})

    def to_dict(self) -> dict[str, Any]:
        """``preprocessor_config.json``'s content."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["image_mean"], out["image_std"] = list(self.image_mean), list(self.image_std)
        if out["crop_size"] is None:
            del out["crop_size"]
        return out

    # ------------------------------------------------------------------------------ sizes
    def output_size(self) -> tuple[int, int] | None:
        """``(height, width)`` of every processed image, or None when it depends on the image
        (``shortest_edge`` without a center crop, or no resize)."""
        if self.do_center_crop:
            return self.crop_size["height"], self.crop_size["width"]
        if self.do_resize and "height" in self.size:
            return self.size["height"], self.size["width"]
        return None

    def check_model(self, config: Mapping[str, Any], *, interpolate: bool = False,
                    where: str = WHERE) -> None:  # fmt: skip
        """Raise a ``ValueError`` unless the images this processor makes fit the model of
        ``config`` (a ViT-like ``config.json``: ``image_size``, ``patch_size``): its
        ``image_size``, or with ``interpolate`` (the model called with
        ``interpolate_pos_encoding=True``) any multiple of the patch size.

        >>> ImageProcessor(size=30).check_model({"image_size": 32, "patch_size": 8})
        Traceback (most recent call last):
        ...
        ValueError: preprocessor_config.json asks for 30x30 images, which the model cannot take: \
30 is not a multiple of config.json's patch_size 8 (and config.json's image_size is 32x32; \
position embeddings are not interpolated)
        >>> ImageProcessor(size=48).check_model({"image_size": 32, "patch_size": 8},
        ...                                     interpolate=True)
        """
        image = _pair(config.get("image_size", 224))
        patch = _pair(config.get("patch_size", 16))
        size = self.output_size()
        model = f"config.json's image_size is {image[0]}x{image[1]}"
        if size is None:
            raise ValueError(
                f"{where} gives images of varying size (size={self.size}, do_center_crop="
                f"{self.do_center_crop}), but the model takes only {image[0]}x{image[1]} ({model})"
            )
        bad = [(s, p) for s, p in zip(size, patch, strict=True) if s % p]
        if size == image or (interpolate and not bad):
            return
        reason = (
            f"{bad[0][0]} is not a multiple of config.json's patch_size {bad[0][1]} (and {model}"
            if bad
            else f"{model} ("
        )
        raise ValueError(
            f"{where} asks for {size[0]}x{size[1]} images, which the model cannot take: {reason}; "
            f"position embeddings are {'interpolated' if interpolate else 'not interpolated'})"
        )

    # ------------------------------------------------------------------------------ apply
    def __call__(self, images: Any, *, channels_last: bool = False) -> dict[str, np.ndarray]:
        """``{"pixel_values": (batch, C, H, W)}`` float32 (``(batch, H, W, C)`` with
        ``channels_last``)."""
        out = [self.process(image, i) for i, image in enumerate(_images(images))]
        shapes = {a.shape for a in out}
        if len(shapes) > 1:
            raise ValueError(
                f"the processed images have different shapes {sorted(shapes)}: the preprocessor "
                "does not fix the size (set size to height/width or use a center crop)"
            )
        batch = np.stack(out)  # (B, H, W, C)
        return {"pixel_values": batch if channels_last else batch.transpose(0, 3, 1, 2)}

    def process(self, image: np.ndarray, index: int = 0) -> np.ndarray:
        """One ``(H, W, C)`` image -> ``(h, w, C)`` float32."""
        if self.do_convert_rgb:
            image = _rgb(image)
        if self.do_resize:
            image = _resize(image, self._resize_to(image.shape[:2]), self.resample)
        if self.do_center_crop:
            image = _center_crop(image, (self.crop_size["height"], self.crop_size["width"]))
        if self.do_rescale:
            image = (image.astype(np.float64) * self.rescale_factor).astype(np.float32)
        if self.do_normalize:
            image = image if np.issubdtype(image.dtype, np.floating) else image.astype(np.float32)
            channels = image.shape[-1]
            mean, std = self.image_mean, self.image_std
            if len(mean) == 1:
                mean, std = mean * channels, std * channels
            if len(mean) != channels or len(std) != channels:
                raise ValueError(
                    f"image {index} has {channels} channels but {WHERE}'s image_mean/image_std "
                    f"have {len(mean)}/{len(std)} values"
                )
            image = (image - np.array(mean, image.dtype)) / np.array(std, image.dtype)
        return np.asarray(image, np.float32)

    def _resize_to(self, hw: tuple[int, int]) -> tuple[int, int]:
        if "height" in self.size:
            return self.size["height"], self.size["width"]
        short, (h, w) = self.size["shortest_edge"], hw
        if h <= w:
            return short, int(short * w / h)
        return int(short * h / w), short


def _pair(value: Any) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _images(images: Any) -> list[np.ndarray]:
    """Images in any accepted form -> a list of ``(H, W, C)`` arrays."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        images = list(images)
    elif not isinstance(images, (list, tuple)):
        images = [images]
    if not images:
        raise ValueError("no images given")
    return [_hwc(image, i) for i, image in enumerate(images)]


def _hwc(image: Any, index: int) -> np.ndarray:
    if hasattr(image, "getbands") and hasattr(image, "size"):  # a PIL image
        image = np.asarray(image)
    array = np.asarray(image)
    if array.ndim == 2:
        return array[..., None]
    if array.ndim == 3:
        if array.shape[-1] in (1, 3, 4):
            return array
        if array.shape[0] in (1, 3, 4):
            return np.moveaxis(array, 0, -1)
    raise ValueError(
        f"image {index}: expected (height, width[, channels]) or (channels, height, width) with "
        f"1, 3 or 4 channels, got shape {array.shape}"
    )


def _rgb(image: np.ndarray) -> np.ndarray:
    channels = image.shape[-1]
    if channels == 1:
        return np.repeat(image, 3, axis=-1)
    return image[..., :3] if channels == 4 else image


def _resize(image: np.ndarray, hw: tuple[int, int], resample: int) -> np.ndarray:
    """Resize with Pillow: uint8 images as one image (as ``transformers``), others channel by
    channel in float mode."""
    from PIL import Image  # noqa: PLC0415 (import cost: Pillow only when resizing)

    h, w = hw
    if image.dtype == np.uint8:
        squeeze = image.shape[-1] == 1
        pil = Image.fromarray(image[..., 0] if squeeze else image)
        out = np.asarray(pil.resize((w, h), resample=resample))
        return out[..., None] if out.ndim == 2 else out
    planes = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(image[..., c], np.float32), mode="F").resize(
                (w, h), resample=resample
            )
        )
        for c in range(image.shape[-1])
    ]
    return np.stack(planes, axis=-1)


def _center_crop(image: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """``transformers``' center crop: the middle ``hw``, zero-padded around when larger."""
    (ch, cw), (h, w) = hw, image.shape[:2]
    if ch > h or cw > w:
        nh, nw = max(ch, h), max(cw, w)
        padded = np.zeros((nh, nw, image.shape[-1]), image.dtype)
        top, left = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
        padded[top : top + h, left : left + w] = image
        image, h, w = padded, nh, nw
    top, left = (h - ch) // 2, (w - cw) // 2
    return image[top : top + ch, left : left + cw]


def for_model(values: Mapping[str, Any], config: Mapping[str, Any], where: str = WHERE, *,
              interpolate: bool = False) -> ImageProcessor:  # fmt: skip
    """The processor of ``preprocessor_config.json`` ``values``, checked against the model's
    ``config`` (see :meth:`ImageProcessor.check_model`): a size the model cannot take is refused
    before anything runs.

    >>> for_model({"size": 32}, {"image_size": 32, "patch_size": 8}).output_size()
    (32, 32)
    """
    processor = ImageProcessor.from_dict(values, where)
    processor.check_model(config, interpolate=interpolate, where=where)
    return processor


__all__ = ["ImageProcessor", "for_model"]
